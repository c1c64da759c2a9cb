"""WorkerFinder (orchestration/finder.py) on the in-memory cluster: a workload's workers once its pods are Ready,
at the ports the chart gave them; a fatal pod or a time-out as AReaL's errors; what AReaL holds, per epoch; and
the liveness check the guard client runs before retrying an RPC."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

from areal_workers.areal_types import Worker
from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.errors import WorkerFailedError, WorkerNotFoundError, WorkerTimeoutError
from areal_workers.orchestration.driver import ReleaseDriver
from areal_workers.orchestration.finder import ADMISSION_RECHECK_SECONDS, WorkerFinder
from areal_workers.pods.held_workers import HeldWorkers
from areal_workers.runtime.loop_thread import LoopThread
from memory_backend import GUARD_PORT, MemoryCluster, MemoryInspector, MemoryPods, MemoryReleases, MemoryStatefulSets

RELEASE = "aw-exp-trial-1a2b3c4d"


def role(replicas: int, image: str = "example.com/areal", extra_ports: int = 1) -> dict[str, Any]:
    return {"replicas": replicas, "extraPorts": extra_ports, "image": {"repository": image, "tag": "1"}}


class RecordingPods(MemoryPods):
    """MemoryPods that also records each wait's on_idle recheck."""

    def __init__(self, cluster: MemoryCluster) -> None:
        super().__init__(cluster)
        self.idle_checks: list[Any] = []

    def wait(self, selector: str, done: Any, timeout: float, on_pod: Any = None, on_idle: Any = None) -> Any:
        self.idle_checks.append(on_idle)
        return super().wait(selector, done, timeout, on_pod, on_idle)


@pytest.fixture
def setup():
    cluster, loop = MemoryCluster(RELEASE), LoopThread()
    pods: Any = RecordingPods(cluster)
    inspector: Any = MemoryInspector(cluster)
    releases: Any = MemoryReleases(cluster)
    config = KubernetesSchedulerConfig(namespace="rl", release_name=RELEASE)
    driver = ReleaseDriver(RELEASE, config, releases, inspector, pods, MemoryStatefulSets(), loop)
    finder = WorkerFinder(driver, pods, inspector, HeldWorkers())
    yield cluster, driver, finder, pods
    loop.close()


def apply(driver: ReleaseDriver, **roles: dict[str, Any]) -> None:
    driver.apply({"experiment": "exp", "trial": "trial", "roles": roles}, "change", next(iter(roles)))


def test_the_workers_are_the_ready_pods_by_index_at_the_charts_ports(setup):
    cluster, driver, finder, _ = setup
    apply(driver, actor=role(3))
    workers = finder.wait_for_pods("actor", driver.model, timeout=5)
    by_index = {int(name.rsplit("-", 1)[1]): pod for name, pod in cluster.pods.items()}
    assert workers == [
        Worker(id=f"actor/{i}", ip=by_index[i].status.pod_ip, worker_ports=[str(GUARD_PORT), str(GUARD_PORT + 1)])
        for i in range(3)
    ]


def test_workers_are_known_until_their_workload_changes(setup):
    _, driver, finder, _ = setup
    apply(driver, actor=role(2))
    workers = finder.wait_for_pods("actor", driver.model, timeout=5)
    assert finder.known_workers("actor") == workers
    apply(driver, actor=role(2), critic=role(1))
    assert finder.known_workers("actor") == workers  # another workload's change keeps actor's pods
    apply(driver, actor=role(3), critic=role(1))
    assert finder.known_workers("actor") is None


def test_a_workload_the_release_does_not_have_is_not_found(setup):
    _, driver, finder, _ = setup
    apply(driver, actor=role(1))
    with pytest.raises(WorkerNotFoundError):
        finder.wait_for_pods("critic", driver.model, timeout=5)


def test_pods_that_never_become_ready_time_out_with_their_diagnosis(setup):
    _, driver, finder, _ = setup
    apply(driver, actor=role(2, image="slow"))
    with pytest.raises(WorkerTimeoutError) as timed_out:
        finder.wait_for_pods("actor", driver.model, timeout=5)
    assert timed_out.value.diagnosis == "actor: not ready"
    assert finder.known_workers("actor") is None


def test_a_fatal_pod_fails_the_workload_at_once(setup):
    _, driver, finder, _ = setup
    apply(driver, actor=role(1, image="broken"))
    with pytest.raises(WorkerFailedError, match="crashed"):
        finder.wait_for_pods("actor", driver.model, timeout=5)


def test_only_a_kueue_queued_workload_rereads_its_admission_while_it_waits(setup):
    _, driver, finder, pods = setup
    apply(driver, actor=role(1))
    finder.wait_for_pods("actor", driver.model, timeout=5)
    assert pods.idle_checks[-1] is None
    model = driver.model
    queued_role = {**model.roles["actor"], "kueue_queue": "rl"}  # what the chart's topology records for it
    queued = dataclasses.replace(model, topology={**model.topology, "roles": {"actor": queued_role}})
    finder.wait_for_pods("actor", queued, timeout=5)
    seconds, _ = pods.idle_checks[-1]
    assert seconds == ADMISSION_RECHECK_SECONDS


def test_a_process_forks_workers_are_in_its_targets_pods_at_the_recorded_ports(setup):
    _, driver, finder, _ = setup
    apply(driver, actor=role(2))
    targets = finder.wait_for_pods("actor", driver.model, timeout=5)
    driver.apply(
        driver.model.with_fork("ref", {"target": "actor", "mode": "process", "ports": [[9000], [9001]]}),
        "fork ref",
        "ref",
    )
    assert finder.process_fork_workers("ref", targets) == [
        Worker(id="ref/0", ip=targets[0].ip, worker_ports=["9000"]),
        Worker(id="ref/1", ip=targets[1].ip, worker_ports=["9001"]),
    ]
    assert finder.known_workers("ref") is not None


def test_a_process_fork_recording_fewer_forks_than_targets_fails(setup):
    _, driver, finder, _ = setup
    apply(driver, actor=role(2))
    targets = finder.wait_for_pods("actor", driver.model, timeout=5)
    driver.apply(
        driver.model.with_fork("ref", {"target": "actor", "mode": "process", "ports": [[9000]]}), "fork ref", "ref"
    )
    with pytest.raises(WorkerFailedError, match="records 1 forks for 2 target workers"):
        finder.process_fork_workers("ref", targets)


def test_a_live_worker_passes_the_liveness_check(setup):
    _, driver, finder, _ = setup
    apply(driver, actor=role(2))
    for worker in finder.wait_for_pods("actor", driver.model, timeout=5):
        finder.check_alive(worker)


def test_a_worker_whose_pod_is_gone_or_has_another_address_is_failed(setup):
    cluster, driver, finder, _ = setup
    apply(driver, actor=role(2))
    first, second = finder.wait_for_pods("actor", driver.model, timeout=5)
    del cluster.pods[f"{RELEASE}-actor-0"]
    with pytest.raises(WorkerFailedError, match="is gone or was replaced"):
        finder.check_alive(first)
    moved = Worker(id=second.id, ip="10.9.9.9", worker_ports=second.worker_ports)
    with pytest.raises(WorkerFailedError, match="is gone or was replaced"):
        finder.check_alive(moved)


def test_a_held_pod_replaced_under_the_same_address_is_a_lost_worker(setup):
    cluster, driver, finder, _ = setup
    apply(driver, actor=role(1))
    [worker] = finder.wait_for_pods("actor", driver.model, timeout=5)
    name = f"{RELEASE}-actor-0"
    restarted = copy.deepcopy(cluster.pods[name])
    restarted.metadata.uid = "uid-restarted"
    cluster.pods[name] = restarted
    with pytest.raises(WorkerFailedError, match="replaced"):
        finder.check_alive(worker)
