"""ForkOperations (orchestration/fork_operations.py) on the in-memory cluster and guard: process forks started
through their targets' guards and recorded in the release, all or none; pod-mode forks as release entries; and the
deletion of forks through the targets that still run."""

from __future__ import annotations

from typing import Any

import pytest

from areal_workers.areal_types import Worker
from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.errors import WorkerCreationError
from areal_workers.orchestration.driver import ReleaseDriver
from areal_workers.orchestration.finder import WorkerFinder
from areal_workers.orchestration.fork_operations import ForkOperations
from areal_workers.pods.held_workers import HeldWorkers
from areal_workers.runtime.loop_thread import LoopThread
from memory_backend import MemoryCluster, MemoryGuard, MemoryInspector, MemoryPods, MemoryReleases, MemoryStatefulSets

RELEASE = "aw-exp-trial-1a2b3c4d"
ACTOR = {"replicas": 2, "extraPorts": 1, "image": {"repository": "example.com/areal", "tag": "1"}}


class Setup:
    def __init__(self) -> None:
        self.cluster, self.loop, self.guard = MemoryCluster(RELEASE), LoopThread(), MemoryGuard()
        self.config = KubernetesSchedulerConfig(namespace="rl", release_name=RELEASE, fork_module="areal.fork")
        self.start()
        self.driver.apply({"experiment": "exp", "trial": "trial", "roles": {"actor": ACTOR}}, "create actor", "actor")

    def start(self) -> None:
        """A controller on the cluster: one that (re)starts adopts the release and holds no workers yet."""
        releases: Any = MemoryReleases(self.cluster)
        inspector: Any = MemoryInspector(self.cluster)
        pods: Any = MemoryPods(self.cluster)
        guard: Any = self.guard
        self.driver = ReleaseDriver(RELEASE, self.config, releases, inspector, pods, MemoryStatefulSets(), self.loop)
        self.driver.adopt()
        self.held = HeldWorkers()
        self.finder = WorkerFinder(self.driver, pods, inspector, self.held)
        self.forks = ForkOperations(
            self.driver, self.finder, guard, self.loop, self.held, inspector, self.config, "exp", "trial"
        )

    def targets(self) -> list[Worker]:
        return self.finder.wait_for_pods("actor", self.driver.model, timeout=5)

    def fork_entry(self, role: str) -> dict[str, Any] | None:
        return (self.cluster.current().values.get("forks") or {}).get(role)


@pytest.fixture
def setup():
    made = Setup()
    yield made
    made.loop.close()


def test_a_process_fork_is_one_child_per_target_recorded_with_its_ports(setup):
    targets = setup.targets()
    workers = setup.forks.fork_processes("ref", "actor", targets, None)
    assert [(w.id, w.ip) for w in workers] == [("ref/0", targets[0].ip), ("ref/1", targets[1].ip)]
    ports = [[int(port) for port in worker.worker_ports] for worker in workers]
    assert len({port for pair in ports for port in pair}) == 4  # the guard allocated two ports per fork
    assert setup.fork_entry("ref") == {"target": "actor", "mode": "process", "command": ["areal.fork"], "ports": ports}
    argv = setup.guard.forked[("ref", 0)]
    assert argv[:2] == ["bash", "-c"] and ["-m", "areal.fork"] == argv[argv.index("-m") : argv.index("-m") + 2]
    assert setup.finder.known_workers("ref") == workers
    assert setup.driver.pending() == {"actor"}  # a process fork changes no pods


def test_a_fork_that_never_answers_leaves_no_fork_and_no_revision(setup):
    revisions = len(setup.cluster.revisions)
    with pytest.raises(WorkerCreationError) as failed:
        setup.forks.fork_processes("ref", "actor", setup.targets(), "broken.module")
    assert failed.value.reason == "Failed to fork 2 out of 2 workers"
    assert "Failed indices: [0, 1]" in failed.value.details
    assert sorted(setup.guard.killed) == [("ref", 0), ("ref", 1)] and setup.guard.forked == {}
    assert len(setup.cluster.revisions) == revisions and setup.fork_entry("ref") is None


def test_forks_whose_revision_fails_are_killed(setup):
    setup.cluster.fail_next_apply = "Error: UPGRADE FAILED: timed out"
    with pytest.raises(WorkerCreationError, match="helm upgrade failed"):
        setup.forks.fork_processes("ref", "actor", setup.targets(), None)
    assert sorted(setup.guard.killed) == [("ref", 0), ("ref", 1)] and setup.guard.forked == {}


def test_a_chart_without_worker_flags_cannot_fork(setup, monkeypatch):
    topology = setup.cluster.topology
    monkeypatch.setattr(setup.cluster, "topology", lambda: {k: v for k, v in topology().items() if k != "worker_flags"})
    setup.driver.reload()
    with pytest.raises(WorkerCreationError, match="records no worker flags"):
        setup.forks.fork_processes("ref", "actor", setup.targets(), None)
    assert setup.guard.forked == {}


def test_a_pod_mode_fork_is_an_entry_of_the_release_with_its_command(setup):
    values = setup.forks.pod_fork_values("ref", "actor", "my.server")
    assert values["forks"]["ref"] == {
        "target": "actor",
        "mode": "pod",
        "command": [setup.config.python_executable, "-m", "my.server"],
    }
    plain = setup.forks.pod_fork_values("plain", "actor", None)
    assert plain["forks"]["plain"] == {"target": "actor", "mode": "pod"}
    assert "ref" not in plain["forks"]  # values of the release as it is, plus the one fork


def test_deleting_a_process_fork_kills_its_children_in_reverse_rank_order_when_asked(setup):
    setup.forks.fork_processes("ref", "actor", setup.targets(), None)
    setup.forks.kill("ref", reverse_order=True)
    assert setup.guard.killed == [("ref", 1), ("ref", 0)]


def test_a_restarted_controller_kills_a_forks_children_through_the_targets_it_finds(setup):
    setup.forks.fork_processes("ref", "actor", setup.targets(), None)
    setup.start()
    setup.forks.kill("ref", reverse_order=False)
    assert sorted(setup.guard.killed) == [("ref", 0), ("ref", 1)]


def test_deleting_a_fork_whose_targets_are_gone_kills_nothing(setup):
    setup.forks.fork_processes("ref", "actor", setup.targets(), None)
    setup.start()
    setup.cluster.pods.clear()  # the target pods went, and their forked children with them
    setup.forks.kill("ref", reverse_order=False)
    assert setup.guard.killed == []
