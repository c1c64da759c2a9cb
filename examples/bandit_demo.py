#!/usr/bin/env python3
"""The bandit demo: KubernetesScheduler running a small RL experiment, the way an AReaL trainer uses a scheduler.

    make demo                                   # local cluster (started if needed), then this program
    python examples/bandit_demo.py --help       # any cluster: --kubeconfig, --namespace, --image

What it does, step by step, checking each result (exit status 1 at the first surprise):
 1. create_workers: an actor role and a rollout role, 2 workers each, running AReaL's rpc_server, configured with
    the experiment config;
 2. a reference role forked into the actor's pods (colocation with fork=True: AReaL's process fork);
 3. the worker table (pods read from the API server) ;
 4. engines on every worker (examples/bandit_engines.py: CPU subclasses of AReaL's TrainEngine);
 5. a few iterations of REINFORCE on a multi-armed bandit: the rollout engines sample actions and rewards, the
    reference engines score them, the actor engines compute and apply the gradient, the new weights go to the
    rollout engines; the mean reward rises;
 6. a bad update (the rollout role's image does not exist): the scheduler's diagnosis and its rollback to the last
    good revision, with the other workers untouched, then training goes on;
 7. `helm history` of the release;
 8. delete_workers: no release, no pod and no worker process left (`--keep` leaves everything running).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from kubernetes import client, config as kube_config
from kubernetes.client.exceptions import ApiException

from areal_workers import (Job, KubernetesScheduler, KubernetesSchedulerConfig, SchedulingSpec, SchedulingStrategy,
                           Worker, WorkerFailedError)

import demo_cluster as cluster
from bandit_config import BanditExperimentConfig, ClusterConfig, cluster_for
from demo_terminal import Terminal

EXAMPLES = Path(__file__).resolve().parent
REPO_ROOT = EXAMPLES.parent
LOCAL_KUBECONFIG = REPO_ROOT / ".tools" / "kubeconfig"
CLUSTER_DIR_VARIABLE = "AREAL_WORKERS_CLUSTER_DIR"
LOCAL_FILEROOT = Path(tempfile.gettempdir()) / "areal-bandit-demo"
LOCAL_HELM = REPO_ROOT / ".tools" / "bin" / "helm"
LOCAL_WORKER_PYTHON = REPO_ROOT / ".tools" / "areal-worker" / "bin" / "python"
# `.invalid` is reserved (RFC 2606): no registry can ever serve this image, on any cluster.
MISSING_IMAGE = "registry.invalid/areal-runtime:v1.0.4"
WORKER_COMMAND = "python -m areal.infra.rpc.rpc_server"
REPLICAS = 2
MIN_ITERATIONS = 4
MIN_REWARD_GAIN = 0.1
ARMS_SEED = 2024


class DemoFailure(Exception):
    """A step did not do what the demo expects of the scheduler."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise DemoFailure(message)


# --- settings ------------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", help="cluster credentials (default: the local cluster's .tools/kubeconfig "
                                             "when it exists, else $KUBECONFIG or ~/.kube/config, or in-cluster)")
    parser.add_argument("--namespace", default="bandit-demo", help="namespace of the release (created if missing)")
    parser.add_argument("--image", help="worker image with AReaL and examples/ on its PYTHONPATH "
                                        "(default: the chart's, AReaL's runtime image; unused on the local cluster)")
    parser.add_argument("--experiment", default="bandit", help="AReaL experiment name (default: bandit)")
    parser.add_argument("--trial", default="demo", help="AReaL trial name (default: demo)")
    parser.add_argument("--iterations", type=int, default=8, help="training iterations (default: 8)")
    parser.add_argument("--keep", action="store_true", help="leave the workers running and say how to look at them")
    parser.add_argument("--run-pods", action="store_true",
                        help="local cluster only: run the worker pods with a pod runner inside this program, for a "
                             "cluster whose own runner is not running (the workers stop when the program does)")
    parser.add_argument("--helm", help="helm binary (default: .tools/bin/helm when it exists, else helm)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds workers get to become ready")
    parser.add_argument("--verbose", action="store_true", help="show the scheduler's and helm's own log lines")
    args = parser.parse_args(argv)
    if args.iterations < MIN_ITERATIONS:
        parser.error(f"--iterations must be at least {MIN_ITERATIONS}: the demo checks that the reward rises")
    if args.kubeconfig is None and local_kubeconfig().exists():
        args.kubeconfig = str(local_kubeconfig())
    if args.helm is None:
        args.helm = str(LOCAL_HELM) if LOCAL_HELM.exists() else "helm"
    return args


def local_kubeconfig() -> Path:
    """The local cluster's admin kubeconfig: .tools/kubeconfig, or the one in $AREAL_WORKERS_CLUSTER_DIR when that
    names the state of another local cluster (see tools/localcluster.py)."""
    state = os.environ.get(CLUSTER_DIR_VARIABLE)
    return Path(state) / "kubeconfig" if state else LOCAL_KUBECONFIG


@dataclass
class Target:
    """Where the demo runs: the cluster, and how its worker pods get their processes."""

    api: client.ApiClient
    server: str
    local: bool  # the project's local cluster: KWOK nodes, pods run as processes on this machine
    nodes: int
    fileroot: str  # AReaL's fileroot of the workers
    made_fileroot: bool = False


def connect(kubeconfig: str | None) -> client.ApiClient:
    if kubeconfig:
        return kube_config.new_client_from_config(config_file=kubeconfig)
    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        kube_config.load_kube_config()
    return client.ApiClient()


def find_target(args: argparse.Namespace) -> Target:
    api = connect(args.kubeconfig)
    core = client.CoreV1Api(api)
    local = cluster.is_local_cluster(core)
    if local and not LOCAL_WORKER_PYTHON.exists():
        raise DemoFailure(f"the local cluster runs AReaL's worker server from {LOCAL_WORKER_PYTHON}: "
                          f"run `make areal-worker` (or `make demo`, which does)")
    if args.run_pods and not local:
        raise DemoFailure("--run-pods runs pods of the local cluster only (its nodes are KWOK's fake nodes)")
    if local and not args.run_pods:
        check_local_runner(args.kubeconfig)
    try:
        nodes = len(core.list_node().items)
    except ApiException:
        nodes = 0
    # On the local cluster the workers are processes of this machine: their files go to a directory of the run.
    fileroot = str(LOCAL_FILEROOT / f"{args.namespace}-{args.trial}") if local else ClusterConfig().fileroot
    return Target(api=api, server=api.configuration.host, local=local, nodes=nodes, fileroot=fileroot,
                  made_fileroot=local)


def check_local_runner(kubeconfig: str | None) -> None:
    """On this checkout's local cluster, its podrunner must run the pods with AReaL's server (not the reference
    guard, which cannot load TrainEngine subclasses)."""
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    from localcluster import LocalCluster

    local = LocalCluster()
    if kubeconfig is None or Path(kubeconfig).resolve() != local.kubeconfig.resolve():
        return  # another local cluster: its runner is its owner's business
    workers = local.podrunner_workers()
    if workers != "areal":
        now = "is not running" if workers is None else f"runs the {workers} worker server"
        raise DemoFailure(f"the local cluster's podrunner {now}; the demo's workers need AReaL's: run "
                          f"`python tools/localcluster.py up --workers areal` (what `make demo` does), or pass "
                          f"--run-pods")


def scheduler_config(args: argparse.Namespace, target: Target) -> KubernetesSchedulerConfig:
    settings: dict[str, Any] = dict(namespace=args.namespace, kubeconfig=args.kubeconfig, helm_executable=args.helm,
                                    image=args.image, ready_timeout=args.timeout, helm_timeout=args.timeout,
                                    fork_ready_timeout=args.timeout)
    if target.local:
        # The pods' `python` is this machine's AReaL environment (the cluster's pod runner maps it), and forks
        # started by a worker must find it by path.
        settings.update(python_executable=str(LOCAL_WORKER_PYTHON), termination_grace_seconds=5)
    return KubernetesSchedulerConfig(**settings)


def worker_spec(image: str | None = None) -> SchedulingSpec:
    """One worker: AReaL's rpc_server on 1 CPU (the guard's port and one more, as AReaL asks for)."""
    spec = SchedulingSpec(cpu=1, gpu=0, mem=2, port_count=2, cmd=WORKER_COMMAND)
    if image is not None:
        spec.image = image
    return spec


# --- the demo ------------------------------------------------------------------------------------------------


@dataclass
class Stats:
    iteration: int
    mean_reward: float
    best_arm_share: float
    kl: float
    version: int


@dataclass
class BanditDemo:
    args: argparse.Namespace
    out: Terminal
    target: Target
    scheduler: KubernetesScheduler
    exp: BanditExperimentConfig
    arm_probs: np.ndarray
    workers: dict[str, list[Worker]] = field(default_factory=dict)
    version: int = 0
    made_namespace: bool = False
    made_release: bool = False  # this run installed the release (a cleanup after a failure may remove it)

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.target.api)

    @property
    def release(self) -> str:
        return self.scheduler.release

    def revision(self) -> int:
        return self.scheduler.history()[-1]["revision"]

    def pods(self) -> list[client.V1Pod]:
        return cluster.release_pods(self.core, self.args.namespace, self.release)

    def progress_of(self, role: str) -> Callable[[], str]:
        return lambda: cluster.progress(self.core, self.args.namespace, self.release, role, REPLICAS)

    def call(self, worker: Worker, method: str, *args: Any, **kwargs: Any) -> Any:
        """An engine call as AReaL's controllers make it: the engine named after the worker."""
        return self.scheduler.async_call_engine(worker.id, method, None, *args, **kwargs)

    # --- 0. header ---------------------------------------------------------------------------------------

    def header(self) -> None:
        self.out.title("areal-workers demo: KubernetesScheduler runs a small RL experiment, as an AReaL trainer would")
        if self.target.local:
            where = (f"the local cluster ({self.target.nodes} KWOK nodes); each worker pod's command, AReaL's "
                     f"rpc_server, runs as a process on this machine")
        else:
            where = f"{self.target.nodes or 'unknown number of'} nodes"
        self.out.field("cluster", f"{self.target.server} · {where}")
        self.out.field("namespace", f"{self.args.namespace} · release {self.release} "
                                    f"(experiment {self.exp.experiment_name}, trial {self.exp.trial_name})")
        best = int(np.argmax(self.arm_probs))
        self.out.field("task", f"REINFORCE on a bandit with {len(self.arm_probs)} arms paying "
                               f"{' '.join(f'{p:.2f}' for p in self.arm_probs)} (best: arm {best})")

    def check_fresh(self) -> None:
        """A release left by an earlier run (`--keep`) would be adopted, and its roles exist already."""
        if self.scheduler.history():
            kubeconfig = f" --kubeconfig {shown_path(self.args.kubeconfig)}" if self.args.kubeconfig else ""
            helm = f"{shown_path(self.args.helm)}{kubeconfig} -n {self.args.namespace} uninstall {self.release} --wait"
            raise DemoFailure(f"release {self.release} already exists in namespace {self.args.namespace} (left by "
                              f"--keep?): remove it with `{helm}`, or choose another --namespace or --trial")

    def ensure_namespace(self) -> None:
        try:
            self.core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=self.args.namespace)))
            self.made_namespace = True
        except ApiException as error:
            if error.status != 409:  # 409: it exists
                raise

    # --- 1. workers --------------------------------------------------------------------------------------

    def create_workers(self) -> None:
        self.out.step("Create the workers", "create_workers(Job(role, replicas=2)) installs or upgrades the "
                                            "release, waits until every worker answers, and sends /configure")
        for role in ("actor", "rollout"):
            started = time.monotonic()
            self.made_release = True
            with self.out.waiting(f"{role}: create_workers", self.progress_of(role)):
                ids = self.scheduler.create_workers(Job(role=role, replicas=REPLICAS, tasks=[worker_spec()]))
            expect(ids == [f"{role}/{i}" for i in range(REPLICAS)], f"create_workers({role}) returned {ids}")
            self.workers[role] = self.scheduler.get_workers(role)
            self.out.ok(f"{role:<8} {' '.join(ids)} ready and configured · helm revision {self.revision()}",
                        time.monotonic() - started)

    def fork_reference(self) -> None:
        self.out.step("Fork a role into the actor's pods", "create_workers(Job('ref', 2, colocation with actor, "
                                                          "fork=True)): each actor server forks an rpc_server")
        started = time.monotonic()
        strategy = SchedulingStrategy(type="colocation", target="actor", fork=True)
        with self.out.waiting("ref: forking 2 rpc_server processes"):
            ids = self.scheduler.create_workers(Job(role="ref", replicas=REPLICAS, tasks=[worker_spec()],
                                                    scheduling_strategy=strategy))
        expect(ids == [f"ref/{i}" for i in range(REPLICAS)], f"fork of ref returned {ids}")
        self.workers["ref"] = self.scheduler.get_workers("ref")
        for ref, actor in zip(self.workers["ref"], self.workers["actor"]):
            expect(ref.ip == actor.ip and ref.worker_ports[0] != actor.worker_ports[0],
                   f"{ref.id} should run in {actor.id}'s pod on ports of its own: {ref} vs {actor}")
        ports = ", ".join(f"{w.id} on {w.ip}:{w.worker_ports[0]}" for w in self.workers["ref"])
        self.out.ok(f"ref      {ports} · helm revision {self.revision()} records the ports",
                    time.monotonic() - started)

    def show_workers(self, title: str) -> None:
        self.out.step(title, f"pods of the release (label app.kubernetes.io/instance={self.release})")
        pods = self.pods()
        rows = cluster.worker_rows(self.workers, pods, forks={"ref": "actor"})
        self.out.table(cluster.TABLE_HEADER, rows)
        expect(len(pods) == 2 * REPLICAS and all(cluster.is_ready(p) for p in pods),
               f"expected {2 * REPLICAS} Ready pods, found {[(p.metadata.name, cluster.is_ready(p)) for p in pods]}")

    # --- 2. engines and training -------------------------------------------------------------------------

    def create_engines(self) -> None:
        self.out.step("Create engines", "create_engine on every worker: CPU subclasses of AReaL's TrainEngine "
                                        "(examples/bandit_engines.py)")
        started = time.monotonic()
        asyncio.run(self._create_engines())
        self.out.table(("ROLE", "ENGINE", "HOLDS"), [
            ("actor", "bandit_engines.PolicyActor", "the policy: softmax over per-arm logits"),
            ("ref", "bandit_engines.ReferencePolicy", "a frozen copy of the initial policy, for a KL penalty"),
            ("rollout", "bandit_engines.BanditRollout", "the bandit, and a copy of the policy (weights v0)")])
        self.out.ok(f"{sum(map(len, self.workers.values()))} engines created; set_worker_env(RANK, WORLD_SIZE) on "
                    f"actor and ref first, as AReaL's TrainController does", time.monotonic() - started)

    async def _create_engines(self) -> None:
        scheduler, exp = self.scheduler, self.exp
        for role in ("actor", "ref"):  # what AReaL's TrainController sets before it creates train engines
            await asyncio.gather(*(scheduler.set_worker_env(w.id, {"RANK": str(rank), "WORLD_SIZE": str(REPLICAS)})
                                   for rank, w in enumerate(self.workers[role])))
        await asyncio.gather(*(scheduler.create_engine(
            w.id, "bandit_engines.PolicyActor", None, n_arms=exp.n_arms, learning_rate=exp.learning_rate,
            kl_coef=exp.kl_coef, seed=exp.seed) for w in self.workers["actor"]))
        initial = await self.call(self.workers["actor"][0], "get_weights")
        expect(isinstance(initial, np.ndarray) and initial.shape == (exp.n_arms,),
               f"get_weights returned {type(initial).__name__}, not an array of {exp.n_arms} logits")
        await asyncio.gather(*(scheduler.create_engine(w.id, "bandit_engines.ReferencePolicy", None, weights=initial)
                               for w in self.workers["ref"]))
        await asyncio.gather(*(self._create_rollout_engine(rank, initial, 0)
                               for rank in range(len(self.workers["rollout"]))))

    async def _create_rollout_engine(self, rank: int, weights: np.ndarray, version: int) -> None:
        worker = self.workers["rollout"][rank]
        await self.scheduler.create_engine(worker.id, "bandit_engines.BanditRollout", None, arm_probs=self.arm_probs,
                                           seed=self.exp.seed * 1000 + rank)
        await self.call(worker, "set_weights", weights, version)

    def train(self) -> None:
        n = self.exp.samples_per_rollout_worker
        self.out.step("Train", f"rollout engines sample {n} actions each → ref engines score them → actor engines "
                               f"compute gradients, average, step → new weights to the rollout engines")
        started = time.monotonic()
        self.out.table(("ITER", "MEAN REWARD", "BEST ARM", "KL(pi||ref)", "POLICY"), [])
        history = [self.iterate(i + 1) for i in range(self.exp.iterations)]
        first, last = history[0].mean_reward, history[-1].mean_reward
        expect(last > first + MIN_REWARD_GAIN,
               f"the mean reward rose by less than {MIN_REWARD_GAIN}: {first:.3f} -> {last:.3f}")
        weights = asyncio.run(self._gather(self.workers["actor"], "get_weights"))
        expect(all(np.allclose(weights[0], w) for w in weights[1:]), "the actor replicas' weights differ")
        self.out.ok(f"mean reward {first:.3f} → {last:.3f} (the best arm pays {self.arm_probs.max():.2f}); the "
                    f"{REPLICAS} actor replicas hold identical weights", time.monotonic() - started)

    def iterate(self, number: int) -> Stats:
        stats = asyncio.run(self._iteration(number))
        self.out.say(f"   {stats.iteration:<4}  {stats.mean_reward:<11.3f}  {stats.best_arm_share:<8.1%}  "
                     f"{stats.kl:<11.3f}  v{stats.version}")
        return stats

    async def _gather(self, workers: list[Worker], method: str, *args: Any) -> list[Any]:
        return await asyncio.gather(*(self.call(w, method, *args) for w in workers))

    async def _iteration(self, number: int) -> Stats:
        rollout, ref, actor = self.workers["rollout"], self.workers["ref"], self.workers["actor"]
        batches = await self._gather(rollout, "generate", self.exp.samples_per_rollout_worker)
        expect({b["version"] for b in batches} == {self.version},
               f"rollout engines generated with policy versions {[b['version'] for b in batches]}, not v{self.version}")
        actions = [b["actions"] for b in batches]
        rewards = [b["rewards"] for b in batches]
        # Data parallel: shard k of the batch goes to ref k and actor k.
        ref_logp = await asyncio.gather(*(self.call(w, "logp", a) for w, a in zip(ref, actions)))
        grads = await asyncio.gather(*(self.call(w, "compute_gradient", a, r, lp)
                                       for w, a, r, lp in zip(actor, actions, rewards, ref_logp)))
        # The all-reduce a GPU engine does with NCCL: the mean of the replicas' gradients.
        gradient = np.mean([g["gradient"] for g in grads], axis=0)
        versions = await self._gather(actor, "apply_gradient", gradient)
        expect(len(set(versions)) == 1, f"actor replicas disagree on the policy version: {versions}")
        self.version = versions[0]
        weights = await self.call(actor[0], "get_weights")
        await self._gather(rollout, "set_weights", weights, self.version)
        all_actions, all_rewards = np.concatenate(actions), np.concatenate(rewards)
        return Stats(iteration=number, mean_reward=float(all_rewards.mean()),
                     best_arm_share=float(np.mean(all_actions == int(np.argmax(self.arm_probs)))),
                     kl=float(np.mean([g["kl"] for g in grads])), version=self.version)

    # --- 3. a failure ------------------------------------------------------------------------------------

    def bad_update(self) -> None:
        self.out.step("A bad update, diagnosed and rolled back",
                      f"update_workers(Job('rollout', 2, image={MISSING_IMAGE}))")
        if self.target.local:
            self.out.note("(simulated: the local cluster pulls no images; its fake kubelet, KWOK, fails pulls from "
                          "registry.invalid as a kubelet reports them: ErrImagePull, then ImagePullBackOff)")
        good, before = self.revision(), cluster.uids(self.pods())
        self.scheduler.update_workers(Job(role="rollout", replicas=REPLICAS, tasks=[worker_spec(MISSING_IMAGE)]))
        self.out.ok(f"helm revision {self.revision()}: the StatefulSet replaces its pods from the highest ordinal")
        error = self.wait_for_failure()
        self.check_rollback(good, before, error)

    def wait_for_failure(self) -> WorkerFailedError:
        started = time.monotonic()
        try:
            with self.out.waiting("rollout: get_workers", self.progress_of("rollout")):
                workers = self.scheduler.get_workers("rollout", timeout=self.args.timeout)
        except WorkerFailedError as error:
            self.out.ok(f"get_workers('rollout') raised {type(error).__name__}; its text, with the scheduler's "
                        f"diagnosis and what it did about it:", time.monotonic() - started)
            self.out.quote(failure_lines(error), limit=30)
            return error
        hint = (" (a local cluster started before its KWOK stages simulated image pulls: `make cluster-down`, then "
                "`make demo`)" if self.target.local else "")
        raise DemoFailure(f"get_workers succeeded on an image that does not exist: {workers}{hint}")

    def check_rollback(self, good: int, before: dict[str, str], error: WorkerFailedError) -> None:
        text = "\n".join([str(error), *getattr(error, "__notes__", [])])
        expect(MISSING_IMAGE in text and ("ImagePullBackOff" in text or "ErrImagePull" in text),
               "the diagnosis names neither the image nor the pull failure")
        latest = self.scheduler.history()[-1]
        expect(latest["description"] == f"Rollback to {good}",
               f"the release's last revision is {latest}, not a rollback to revision {good}")
        started = time.monotonic()
        with self.out.waiting("rollout: get_workers after the rollback", self.progress_of("rollout")):
            self.workers["rollout"] = self.scheduler.get_workers("rollout")
        after = cluster.uids(self.pods())
        kept = sorted(name for name, uid in before.items() if after.get(name) == uid)
        replaced = sorted(name for name in before if name not in kept)
        expect(all("-actor-" not in name for name in replaced), f"the failed update of rollout touched {replaced}")
        images = {c.image for p in self.pods() for c in p.spec.containers}
        expect(MISSING_IMAGE not in images, f"pods still use {MISSING_IMAGE} after the rollback")
        self.out.ok(f"revision {latest['revision']} ({latest['description']}): the release is back at revision "
                    f"{good}'s values", time.monotonic() - started)
        self.out.ok(f"untouched, same pod UIDs: {', '.join(short(n, self.release) for n in kept)}")
        if replaced:
            self.out.ok(f"replaced by the update and back on the good image: "
                        f"{', '.join(short(n, self.release) for n in replaced)}")
        self.resume_training(replaced)

    def resume_training(self, replaced: list[str]) -> None:
        """The actor and ref engines kept their state; an engine on a replaced pod is gone and is created anew,
        as a trainer that recovers a worker does."""
        versions = asyncio.run(self._gather(self.workers["actor"] + self.workers["ref"], "get_version"))
        expect(versions[:REPLICAS] == [self.version] * REPLICAS, f"actor engines lost their state: {versions}")
        lost = [rank for rank, w in enumerate(self.workers["rollout"])
                if any(name.endswith(f"-rollout-{rank}") for name in replaced)]
        weights = asyncio.run(self.call(self.workers["actor"][0], "get_weights"))
        asyncio.run(self._recreate(lost, weights))
        recreated = f"; engine re-created on {', '.join(f'rollout/{r}' for r in lost)}" if lost else ""
        self.out.ok(f"actor engines still at policy v{versions[0]}, ref forks answer{recreated}; training goes on:")
        self.iterate(self.exp.iterations + 1)

    async def _recreate(self, ranks: list[int], weights: np.ndarray) -> None:
        await asyncio.gather(*(self._create_rollout_engine(rank, weights, self.version) for rank in ranks))

    # --- 4. history, cleanup -----------------------------------------------------------------------------

    def show_history(self) -> None:
        self.out.step(f"helm history {self.release}", "one revision per scheduler change (scheduler.history())")
        self.out.table(("REVISION", "STATUS", "DESCRIPTION"),
                       [(r["revision"], r["status"], r["description"]) for r in self.scheduler.history()])

    def addresses(self) -> list[tuple[str, int]]:
        return [(w.ip, int(port)) for role in self.workers.values() for w in role for port in w.worker_ports[:1]]

    def clean_up(self) -> None:
        self.out.step("Clean up", "delete_workers(): engines destroyed, forks stopped, release uninstalled")
        started, addresses = time.monotonic(), self.addresses()
        with self.out.waiting("delete_workers"):
            self.scheduler.delete_workers()
        expect(self.scheduler.history() == [], f"release {self.release} is still installed")
        expect(self.pods() == [], f"pods left: {[p.metadata.name for p in self.pods()]}")
        with self.out.waiting("waiting for the worker processes to exit"):
            alive = cluster.wait_until_silent(addresses, timeout=60.0)
        expect(not alive, f"worker servers still answer after the release is gone: {alive}")
        self.out.ok(f"release uninstalled, no pods left, nothing answers on the {len(addresses)} worker addresses",
                    time.monotonic() - started)

    def remove_scaffolding(self) -> None:
        """What the demo itself made: the namespace (when it created it) and the local workers' fileroot."""
        if self.made_namespace:
            self.core.delete_namespace(self.args.namespace)
        if self.target.made_fileroot and self.made_release:
            shutil.rmtree(self.target.fileroot, ignore_errors=True)

    def explain_keep(self) -> None:
        namespace = f"-n {self.args.namespace}"
        kubeconfig = f" --kubeconfig {shown_path(self.args.kubeconfig)}" if self.args.kubeconfig else ""
        kubectl = f"{shown_path(str(LOCAL_HELM.with_name('kubectl')))}" if self.target.local else "kubectl"
        helm = shown_path(self.args.helm)
        self.out.step("Left running (--keep)")
        self.out.say(f"   look:      {kubectl}{kubeconfig} {namespace} get pods -o wide")
        self.out.say(f"              {kubectl}{kubeconfig} {namespace} logs {self.release}-areal-workers-actor-0")
        self.out.say(f"              {helm}{kubeconfig} {namespace} history {self.release}")
        self.out.say(f"   tear down: {helm}{kubeconfig} {namespace} uninstall {self.release} --wait")
        if self.made_namespace:
            self.out.say(f"              {kubectl}{kubeconfig} delete namespace {self.args.namespace}")
        if self.target.local:
            self.out.say(f"              rm -rf {self.target.fileroot}   (the workers' files)")
            self.out.say("              or stop the whole local cluster: make cluster-down")
            if self.args.run_pods:
                self.out.say("   (--run-pods: the worker processes stopped with this program)")


def shown_path(path: str) -> str:
    """A path as short as it can be shown: relative to the working directory when below it."""
    try:
        return str(Path(os.path.abspath(path)).relative_to(Path.cwd()))
    except ValueError:
        return path


def short(pod_name: str, release: str) -> str:
    """`actor-0` for the pod `<release>-areal-workers-actor-0`."""
    return pod_name.removeprefix(f"{release}-areal-workers-")


ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def failure_lines(error: BaseException) -> list[str]:
    """The exception's text and notes, for a reader: without AReaL's "Stderr output:" heading, colour codes, or
    the worker's log tail (a pull failure happens before the container runs: its log says nothing)."""
    lines = [ANSI_ESCAPE.sub("", line) for line in str(error).splitlines() if line.strip()]
    notes = [line for note in getattr(error, "__notes__", []) for line in note.splitlines() if line.strip()]
    lines += [line for line in notes if line not in lines]
    shown, skipping = [], 0
    for line in lines:
        if line.strip() == "Stderr output:":
            continue
        if line.lstrip().startswith("log tail"):
            skipping = len(line) - len(line.lstrip())
            shown.append(f"{' ' * skipping}{line.strip()} (omitted)")
            continue
        if skipping and len(line) - len(line.lstrip()) > skipping:
            continue
        skipping = 0
        shown.append(line)
    return shown


# --- running it ----------------------------------------------------------------------------------------------


@contextmanager
def pod_runner(args: argparse.Namespace, target: Target) -> Iterator[None]:
    """--run-pods: tools/podrunner.py inside this program, running the namespace's pods with AReaL's server."""
    if not args.run_pods:
        yield
        return
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    from podrunner import PodRunner

    logs = Path(tempfile.mkdtemp(prefix="areal-bandit-demo-pods-"))
    runner = PodRunner(args.kubeconfig, args.namespace, logs, module_map={}, python=str(LOCAL_WORKER_PYTHON),
                       pythonpath=(str(EXAMPLES),)).start()
    try:
        yield
    finally:
        runner.stop()
        shutil.rmtree(logs, ignore_errors=True)


def build(args: argparse.Namespace, out: Terminal, target: Target) -> BanditDemo:
    exp = BanditExperimentConfig(experiment_name=args.experiment, trial_name=args.trial,
                                 cluster=cluster_for(target.fileroot), iterations=args.iterations)
    arm_probs = np.round(np.random.default_rng(ARMS_SEED).uniform(0.1, 0.9, exp.n_arms), 2)
    scheduler = KubernetesScheduler(exp, config=scheduler_config(args, target))
    return BanditDemo(args=args, out=out, target=target, scheduler=scheduler, exp=exp, arm_probs=arm_probs)


def run(demo: BanditDemo) -> None:
    demo.header()
    demo.check_fresh()
    demo.ensure_namespace()
    demo.create_workers()
    demo.fork_reference()
    demo.show_workers("Workers")
    demo.create_engines()
    demo.train()
    demo.bad_update()
    demo.show_history()
    if demo.args.keep:
        demo.explain_keep()
    else:
        demo.clean_up()


def quiet_libraries(verbose: bool) -> None:
    """The scheduler and the helm client log what they do; the demo gives its own account of it, so they show
    only errors unless --verbose."""
    logging.basicConfig(level=logging.INFO if verbose else logging.ERROR, format="      [%(name)s] %(message)s")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_libraries(args.verbose)
    out = Terminal()
    started = time.monotonic()
    try:
        target = find_target(args)
        with pod_runner(args, target):
            demo = build(args, out, target)
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
