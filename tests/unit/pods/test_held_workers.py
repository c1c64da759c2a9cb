"""HeldWorkers (pods/held_workers.py): what AReaL holds is valid only in the epoch it was learnt in."""

from __future__ import annotations

from kubernetes import client

from areal_workers.areal_types import Worker
from areal_workers.pods.held_workers import HeldWorkers


def pod(name: str, uid: str = "uid-1") -> client.V1Pod:
    return client.V1Pod(metadata=client.V1ObjectMeta(name=name, uid=uid))


WORKERS = [
    Worker(id="actor/0", ip="10.0.0.1", worker_ports=["8000"]),
    Worker(id="actor/1", ip="10.0.0.2", worker_ports=["8000"]),
]


def test_workers_held_in_an_epoch_are_known_in_that_epoch_only():
    held = HeldWorkers()
    held.hold("actor", 3, WORKERS)
    assert held.workers("actor", 3) == WORKERS
    assert held.workers("actor", 4) is None
    assert held.workers("critic", 3) is None


def test_nothing_is_known_without_an_epoch():
    """A workload without an epoch (not in the release) never matches, not even what was held without one."""
    held = HeldWorkers()
    held.hold("actor", None, WORKERS, [pod("aw-actor-0")])
    assert held.workers("actor", None) is None
    assert held.ready_pod("aw-actor-0", None) is None


def test_a_new_epoch_replaces_what_was_held():
    held = HeldWorkers()
    held.hold("actor", 1, WORKERS)
    held.hold("actor", 2, WORKERS[:1])
    assert held.workers("actor", 2) == WORKERS[:1]
    assert held.workers("actor", 1) is None


def test_a_ready_pod_is_the_one_seen_in_its_epoch():
    held = HeldWorkers()
    seen = pod("aw-actor-0", uid="uid-7")
    held.hold("actor", 5, WORKERS, [seen, pod("aw-actor-1")])
    assert held.ready_pod("aw-actor-0", 5) is seen
    assert held.ready_pod("aw-actor-0", 6) is None
    assert held.ready_pod("aw-actor-9", 5) is None


def test_holding_workers_without_pods_keeps_the_pods_seen_before():
    """A process fork's workers are held without pods: their targets' pods stay as seen, in their own epoch."""
    held = HeldWorkers()
    seen = pod("aw-actor-0")
    held.hold("actor", 1, WORKERS, [seen])
    held.hold("actor-fork", 9, WORKERS)
    assert held.ready_pod("aw-actor-0", 1) is seen
    assert held.workers("actor-fork", 9) == WORKERS
