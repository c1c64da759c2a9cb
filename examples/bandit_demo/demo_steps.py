"""The steps of the bandit demo around its training: the header, the workers (created, forked, shown), a bad
update diagnosed and rolled back, the release's history, and the cleanup or what to look at with --keep."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from kubernetes import client

import demo_cluster as cluster
from areal_workers import Job, KubernetesScheduler, Worker, WorkerFailedError
from bandit_config import BanditExperimentConfig
from bandit_training import BanditTraining
from demo_checks import DemoFailure, expect
from demo_setup import LOCAL_HELM, REPLICAS, Target, missing_image, worker_spec
from demo_terminal import Terminal

# How a kubelet reports an image it cannot have: a failed pull, or (pull policy Never, the real node) none to use.
PULL_FAILURES = ("ImagePullBackOff", "ErrImagePull", "ErrImageNeverPull")


@dataclass
class BanditDemo:
    args: argparse.Namespace
    out: Terminal
    target: Target
    scheduler: KubernetesScheduler
    exp: BanditExperimentConfig
    arm_probs: np.ndarray
    workers: dict[str, list[Worker]] = field(default_factory=dict)
    made_namespace: bool = False
    made_release: bool = False  # this run installed the release (a cleanup after a failure may remove it)
    training: BanditTraining = field(init=False)

    def __post_init__(self) -> None:
        # The training reads the workers this demo's steps create, from the same dict.
        self.training = BanditTraining(self.scheduler, self.out, self.exp, self.arm_probs, self.workers)

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

    # --- 0. header ---------------------------------------------------------------------------------------

    def header(self) -> None:
        self.out.title("areal-workers demo: KubernetesScheduler runs a small RL experiment, as an AReaL trainer would")
        if self.target.real_node:
            where = (
                f"the local cluster's real node (kubelet + containerd, beside {self.target.nodes - 1} KWOK "
                f"nodes); each worker is a container of the locally built image running AReaL's rpc_server"
            )
        elif self.target.local:
            where = (
                f"the local cluster ({self.target.nodes} KWOK nodes); each worker pod's command, AReaL's "
                f"rpc_server, runs as a process on this machine"
            )
        else:
            where = f"{self.target.nodes or 'unknown number of'} nodes"
        self.out.field("cluster", f"{self.target.server} · {where}")
        self.out.field(
            "namespace",
            f"{self.args.namespace} · release {self.release} "
            f"(experiment {self.exp.experiment_name}, trial {self.exp.trial_name})",
        )
        best = int(np.argmax(self.arm_probs))
        self.out.field(
            "task",
            f"REINFORCE on a bandit with {len(self.arm_probs)} arms paying "
            f"{' '.join(f'{p:.2f}' for p in self.arm_probs)} (best: arm {best})",
        )

    def check_fresh(self) -> None:
        """A release left by an earlier run (`--keep`) would be adopted, and its roles exist already."""
        if self.scheduler.history():
            kubeconfig = f" --kubeconfig {shown_path(self.args.kubeconfig)}" if self.args.kubeconfig else ""
            helm = f"{shown_path(self.args.helm)}{kubeconfig} -n {self.args.namespace} uninstall {self.release} --wait"
            raise DemoFailure(
                f"release {self.release} already exists in namespace {self.args.namespace} (left by "
                f"--keep?): remove it with `{helm}`, or choose another --namespace or --trial"
            )

    # --- 1. workers --------------------------------------------------------------------------------------

    def create_workers(self) -> None:
        self.out.step(
            "Create the workers",
            "actor: AReaL's TrainController.initialize (create_workers, get_workers, "
            "set_worker_env, engines, gloo group); rollout: create_workers(Job(role, "
            "replicas=2)); the scheduler installs or upgrades the release, waits "
            "until every worker answers and sends /configure",
        )
        started = time.monotonic()
        self.made_release = True
        with self.out.waiting("actor: TrainController.initialize", self.progress_of("actor")):
            actor = self.training.create_actor(worker_spec(self.target))
        ids = [w.id for w in actor]
        expect(ids == [f"actor/{i}" for i in range(REPLICAS)], f"TrainController's actor workers are {ids}")
        expect(
            self.training.master(self.training.actor) == f"{actor[0].ip}:{actor[0].worker_ports[1]}",
            f"MASTER_ADDR:MASTER_PORT {self.training.master(self.training.actor)} is not actor/0's second port",
        )
        self.out.ok(
            f"actor    {' '.join(ids)} ready, engines in a gloo group at {self.training.master(self.training.actor)}"
            f" (actor/0's pod IP and second port) · helm revision {self.revision()}",
            time.monotonic() - started,
        )
        started = time.monotonic()
        with self.out.waiting("rollout: create_workers", self.progress_of("rollout")):
            ids = self.scheduler.create_workers(
                Job(role="rollout", replicas=REPLICAS, tasks=[worker_spec(self.target)])
            )
        expect(ids == [f"rollout/{i}" for i in range(REPLICAS)], f"create_workers(rollout) returned {ids}")
        self.workers["rollout"] = self.scheduler.get_workers("rollout")
        self.out.ok(
            f"rollout  {' '.join(ids)} ready and configured · helm revision {self.revision()}",
            time.monotonic() - started,
        )

    def fork_reference(self) -> None:
        self.out.step(
            "Fork a role into the actor's pods",
            "TrainController.initialize for ref, colocated with "
            "actor (fork=True): each actor server forks an rpc_server",
        )
        started = time.monotonic()
        with self.out.waiting("ref: forking 2 rpc_server processes"):
            refs = self.training.create_reference(worker_spec(self.target))
        expect([w.id for w in refs] == [f"ref/{i}" for i in range(REPLICAS)], f"the fork of ref made {refs}")
        for ref, actor in zip(refs, self.workers["actor"]):
            expect(
                ref.ip == actor.ip and ref.worker_ports[0] != actor.worker_ports[0],
                f"{ref.id} should run in {actor.id}'s pod on ports of its own: {ref} vs {actor}",
            )
        ports = ", ".join(f"{w.id} on {w.ip}:{w.worker_ports[0]}" for w in refs)
        self.out.ok(f"ref      {ports} · helm revision {self.revision()} records the ports", time.monotonic() - started)

    def show_workers(self, title: str) -> None:
        self.out.step(title, f"pods of the release (label app.kubernetes.io/instance={self.release})")
        pods = self.pods()
        rows = cluster.worker_rows(self.workers, pods, forks={"ref": "actor"})
        self.out.table(cluster.TABLE_HEADER, rows)
        expect(
            len(pods) == 2 * REPLICAS and all(cluster.is_ready(p) for p in pods),
            f"expected {2 * REPLICAS} Ready pods, found {[(p.metadata.name, cluster.is_ready(p)) for p in pods]}",
        )

    # --- 2. a failure ------------------------------------------------------------------------------------

    def bad_update(self) -> None:
        missing = missing_image(self.target)
        self.out.step("A bad update, diagnosed and rolled back", f"update_workers(Job('rollout', 2, image={missing}))")
        if self.target.registry is not None:
            self.out.note(
                f"(the real node's kubelet pulls it for real from the local cluster's registry at "
                f"{self.target.registry.address}, which never had this tag: ErrImagePull, then ImagePullBackOff)"
            )
        elif self.target.real_node:
            self.out.note(
                "(the real node's kubelet: the image is not on the node and no registry is reachable, so "
                "the pull policy is Never: ErrImageNeverPull)"
            )
        elif self.target.local:
            self.out.note(
                "(simulated: the local cluster pulls no images; its fake kubelet, KWOK, fails pulls from "
                "registry.invalid as a kubelet reports them: ErrImagePull, then ImagePullBackOff)"
            )
        good, before = self.revision(), cluster.uids(self.pods())
        self.scheduler.update_workers(Job(role="rollout", replicas=REPLICAS, tasks=[worker_spec(self.target, missing)]))
        self.out.ok(f"helm revision {self.revision()}: the StatefulSet replaces its pods from the highest ordinal")
        error = self.wait_for_failure()
        self.check_rollback(good, before, error)

    def wait_for_failure(self) -> WorkerFailedError:
        started = time.monotonic()
        try:
            with self.out.waiting("rollout: get_workers", self.progress_of("rollout")):
                workers = self.scheduler.get_workers("rollout", timeout=self.args.timeout)
        except WorkerFailedError as error:
            self.out.ok(
                f"get_workers('rollout') raised {type(error).__name__}; its text, with the scheduler's "
                f"diagnosis and what it did about it:",
                time.monotonic() - started,
            )
            self.out.quote(failure_lines(error), limit=30)
            return error
        hint = (
            " (a local cluster started before its KWOK stages simulated image pulls: `make cluster-down`, then "
            "`make demo`)"
            if self.target.local
            else ""
        )
        raise DemoFailure(f"get_workers succeeded on an image that does not exist: {workers}{hint}")

    def check_rollback(self, good: int, before: dict[str, str], error: WorkerFailedError) -> None:
        text = "\n".join([str(error), *getattr(error, "__notes__", [])])
        expect(
            missing_image(self.target) in text and any(reason in text for reason in PULL_FAILURES),
            "the diagnosis names neither the image nor the pull failure",
        )
        latest = self.scheduler.history()[-1]
        expect(
            latest["description"] == f"Rollback to {good}",
            f"the release's last revision is {latest}, not a rollback to revision {good}",
        )
        started = time.monotonic()
        with self.out.waiting("rollout: get_workers after the rollback", self.progress_of("rollout")):
            self.workers["rollout"] = self.scheduler.get_workers("rollout")
        after = cluster.uids(self.pods())
        kept = sorted(name for name, uid in before.items() if after.get(name) == uid)
        replaced = sorted(name for name in before if name not in kept)
        expect(all("-actor-" not in name for name in replaced), f"the failed update of rollout touched {replaced}")
        images = {c.image for p in self.pods() for c in p.spec.containers}
        missing = missing_image(self.target)
        expect(missing not in images, f"pods still use {missing} after the rollback")
        self.out.ok(
            f"revision {latest['revision']} ({latest['description']}): the release is back at revision {good}'s values",
            time.monotonic() - started,
        )
        self.out.ok(f"untouched, same pod UIDs: {', '.join(short(n, self.release) for n in kept)}")
        if replaced:
            self.out.ok(
                f"replaced by the update and back on the good image: "
                f"{', '.join(short(n, self.release) for n in replaced)}"
            )
        self.training.resume(replaced)

    # --- 3. history, cleanup -----------------------------------------------------------------------------

    def show_history(self) -> None:
        self.out.step(
            f"helm history {self.release}",
            "one revision per scheduler change (scheduler.history()), with what became of it in parentheses",
        )
        self.out.table(
            ("REVISION", "STATUS", "DESCRIPTION"),
            [
                (r["revision"], r["status"], r["description"] + (f" ({r['note']})" if r["note"] else ""))
                for r in self.scheduler.history()
            ],
        )

    def addresses(self) -> list[tuple[str, int]]:
        return [(w.ip, int(port)) for role in self.workers.values() for w in role for port in w.worker_ports[:1]]

    def clean_up(self) -> None:
        self.out.step(
            "Clean up",
            "TrainController.destroy for ref and actor (engines leave their gloo groups, "
            "delete_workers(role, reverse_order=True)), then delete_workers(): rollout's "
            "engines destroyed, release uninstalled",
        )
        started, addresses = time.monotonic(), self.addresses()
        with self.out.waiting("TrainController.destroy"):
            self.training.destroy()
        left = [p.metadata.name for p in self.pods() if "-rollout-" not in p.metadata.name]
        expect(not left, f"TrainController.destroy left pods of actor: {left}")
        with self.out.waiting("delete_workers"):
            self.scheduler.delete_workers()
        expect(self.scheduler.history() == [], f"release {self.release} is still installed")
        expect(self.pods() == [], f"pods left: {[p.metadata.name for p in self.pods()]}")
        with self.out.waiting("waiting for the worker processes to exit"):
            alive = cluster.wait_until_silent(addresses, timeout=60.0)
        expect(not alive, f"worker servers still answer after the release is gone: {alive}")
        self.out.ok(
            f"release uninstalled, no pods left, nothing answers on the {len(addresses)} worker addresses",
            time.monotonic() - started,
        )

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
    shown: list[str] = []
    skipping = 0
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
