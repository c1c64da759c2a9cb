#!/usr/bin/env python3
"""The bandit demo: KubernetesScheduler running a small RL experiment, the way an AReaL trainer uses a scheduler.

    make demo                                   # local cluster (started if needed), then this program
    python examples/bandit_demo/demo.py --help  # any cluster: --kubeconfig, --namespace, --image

What it does, step by step, checking each result (exit status 1 at the first surprise):
 1. the workers: an actor role through AReaL's own TrainController (its `initialize` creates the workers through
    the scheduler, sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, creates the engines and has them form a gloo
    group across their pods), and a rollout role through create_workers; 2 workers each, running AReaL's
    rpc_server, configured with the experiment config;
 2. a reference role forked into the actor's pods (TrainController again, colocation with fork=True: AReaL's
    process fork);
 3. the worker table (pods read from the API server);
 4. the rollout role's engines (examples/bandit_demo/bandit_engines.py: CPU subclasses of AReaL's TrainEngine);
 5. a few iterations of REINFORCE on a multi-armed bandit: the rollout engines sample actions and rewards, the
    reference controller scores them, the actor controller splits the batch over its ranks, which all-reduce their
    gradients over gloo and step; the new weights go to the rollout engines; the mean reward rises;
 6. a bad update (the rollout role's image does not exist): the scheduler's diagnosis and its rollback to the last
    good revision, with the other workers untouched, then training goes on;
 7. `helm history` of the release;
 8. TrainController.destroy for the train roles, delete_workers for the rest: no release, no pod and no worker
    process left (`--keep` leaves everything running).

It runs in AReaL's environment (areal and torch importable; `make demo` uses the one `make areal-worker` installs).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

import areal.utils.logging as areal_logging
import numpy as np
from kubernetes import client

from areal_workers import KubernetesScheduler
from bandit_config import BanditExperimentConfig, cluster_for
from demo_checks import DemoFailure
from demo_setup import (
    LOCAL_HELM,
    Target,
    ensure_namespace,
    ensure_pull_secret,
    find_target,
    local_kubeconfig,
    pod_runner,
    scheduler_config,
)
from demo_steps import BanditDemo
from demo_terminal import Terminal

MIN_ITERATIONS = 4
ARMS_SEED = 2024


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--kubeconfig",
        help="cluster credentials (default: the local cluster's .tools/kubeconfig "
        "when it exists, else $KUBECONFIG or ~/.kube/config, or in-cluster)",
    )
    parser.add_argument("--namespace", default="bandit-demo", help="namespace of the release (created if missing)")
    parser.add_argument(
        "--image",
        help="worker image with AReaL and examples/bandit_demo/ on its PYTHONPATH "
        "(default: the chart's, AReaL's runtime image; unused on the local cluster)",
    )
    parser.add_argument("--experiment", default="bandit", help="AReaL experiment name (default: bandit)")
    parser.add_argument("--trial", default="demo", help="AReaL trial name (default: demo)")
    parser.add_argument("--iterations", type=int, default=8, help="training iterations (default: 8)")
    parser.add_argument("--keep", action="store_true", help="leave the workers running and say how to look at them")
    parser.add_argument(
        "--local-cluster-pod",
        action="store_true",
        help="this program runs as a pod of this checkout's local cluster (make demo IN_CLUSTER=1, "
        "with areal-workers submit): its workers are processes of this machine too",
    )
    parser.add_argument(
        "--run-pods",
        action="store_true",
        help="local cluster only: run the worker pods with a pod runner inside this program, for a "
        "cluster whose own runner is not running (the workers stop when the program does)",
    )
    parser.add_argument("--helm", help="helm binary (default: .tools/bin/helm when it exists, else helm)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds workers get to become ready")
    parser.add_argument("--verbose", action="store_true", help="show the scheduler's and helm's own log lines")
    args = parser.parse_args(argv)
    if args.iterations < MIN_ITERATIONS:
        parser.error(f"--iterations must be at least {MIN_ITERATIONS}: the demo checks that the reward rises")
    # A trainer pod acts with its ServiceAccount's credentials (KUBECONFIG from its runner), never the admin's.
    if args.kubeconfig is None and not args.local_cluster_pod and local_kubeconfig().exists():
        args.kubeconfig = str(local_kubeconfig())
    if args.helm is None:
        args.helm = str(LOCAL_HELM) if LOCAL_HELM.exists() else "helm"
    return args


def build(args: argparse.Namespace, out: Terminal, target: Target) -> BanditDemo:
    exp = BanditExperimentConfig(
        experiment_name=args.experiment,
        trial_name=args.trial,
        cluster=cluster_for(target.fileroot),
        iterations=args.iterations,
    )
    arm_probs = np.round(np.random.default_rng(ARMS_SEED).uniform(0.1, 0.9, exp.n_arms), 2)
    made_namespace = ensure_namespace(target, args.namespace)
    try:
        ensure_pull_secret(target, args.namespace)
        scheduler = KubernetesScheduler(exp, config=scheduler_config(args, target))
    except BaseException:
        if made_namespace:
            client.CoreV1Api(target.api).delete_namespace(args.namespace)
        raise
    return BanditDemo(
        args=args,
        out=out,
        target=target,
        scheduler=scheduler,
        exp=exp,
        arm_probs=arm_probs,
        made_namespace=made_namespace,
    )


def run(demo: BanditDemo) -> None:
    demo.header()
    demo.check_fresh()
    demo.create_workers()
    demo.fork_reference()
    demo.show_workers("Workers")
    demo.training.create_rollout_engines()
    demo.training.train()
    demo.bad_update()
    demo.show_history()
    if demo.args.keep:
        demo.explain_keep()
    else:
        demo.clean_up()


def quiet_libraries(verbose: bool) -> None:
    """The scheduler, the helm client and AReaL's controllers log what they do; the demo gives its own account of
    it, so they show only errors unless --verbose. AReaL's logging setup replaces the root logger whenever one of
    its modules makes a logger, so the levels are set on the loggers themselves: at the start, and again once the
    scheduler and the controllers are built."""
    level = logging.INFO if verbose else logging.ERROR
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("      [%(name)s] %(message)s"))
    for name in ("areal_workers", "pyhelm3"):
        logger = logging.getLogger(name)
        logger.setLevel(level)
        logger.handlers, logger.propagate, logger.disabled = [handler], False, False
    for logger in list(areal_logging._created_loggers.values()):
        logger.setLevel(level if verbose else logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_libraries(args.verbose)
    out = Terminal()
    started = time.monotonic()
    try:
        target = find_target(args)
        with pod_runner(args, target):
            demo = build(args, out, target)
            quiet_libraries(args.verbose)
            code = execute(demo)
    except DemoFailure as failure:
        out.fail(str(failure))
        return 1
    if code == 0:
        out.say()
        out.title(f"Done in {time.monotonic() - started:.0f}s: every step did what the scheduler promises.")
    return code


def execute(demo: BanditDemo) -> int:
    """Runs the steps; on a surprise says what it was and removes what this run created (unless --keep)."""
    code = 0
    try:
        run(demo)
    except DemoFailure as failure:
        demo.out.fail(str(failure))
        code = 1
    except KeyboardInterrupt:
        demo.out.fail("interrupted")
        code = 130
    except Exception as error:  # noqa: BLE001 - the scheduler raising where the demo expects success
        demo.out.fail(f"{type(error).__name__}: {error}")
        if demo.args.verbose:
            logging.exception("the failed step")
        code = 1
    if code and not demo.args.keep:
        salvage(demo)
    if not demo.args.keep:
        demo.remove_scaffolding()
    demo.scheduler.close()
    return code


def salvage(demo: BanditDemo) -> None:
    """After a failed step: delete what the demo created, so a failure leaves nothing behind either."""
    if not demo.made_release or demo.scheduler.closed:
        return
    try:
        demo.scheduler.delete_workers()
    except Exception as error:  # noqa: BLE001 - the original failure is the one to report
        demo.out.fail(f"cleanup after the failure also failed: {error}")
    else:
        demo.out.note(f"(cleaned up after the failure: release {demo.release} uninstalled)")


if __name__ == "__main__":
    sys.exit(main())
