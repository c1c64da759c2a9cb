"""A restarted trainer (a new scheduler of the same trial) creating the workloads its dead predecessor left: the same
pods with their workers restarted in place when the shape is the same, a revision when it differs, a deleted pod when
a guard cannot restart, and AReaL's "already exists" for workloads the scheduler created itself."""

# ruff: noqa: F811 (the tests take the fixtures imported from test_scheduler_state as arguments)
from __future__ import annotations

import pytest

from areal_workers.errors import WorkerCreationError
from areal_workers.guard.restart import RESTART_FORK_ROLE, stop_guard_argv
from memory_backend import MemoryCluster, MemoryGuard
from test_scheduler_state import cluster, job, make_scheduler  # noqa: F401


def uids(cluster: MemoryCluster, role: str) -> dict[str, str]:
    return {name: pod.metadata.uid for name, pod in cluster.pods.items() if f"-{role}-" in name}


def restarts(cluster: MemoryCluster, role: str) -> list[int]:
    return [
        pod.status.container_statuses[0].restart_count for name, pod in sorted(cluster.pods.items()) if role in name
    ]


def test_the_same_role_again_restarts_its_workers_in_the_same_pods(make_scheduler, cluster):
    make_scheduler().create_workers(job("actor", 2))  # the predecessor, then gone without deleting anything
    before, revisions = uids(cluster, "actor"), len(cluster.revisions)
    guard = MemoryGuard(cluster)
    successor = make_scheduler(guard=guard)
    assert successor.create_workers(job("actor", 2)) == ["actor/0", "actor/1"]
    assert sorted(guard.restarted) == ["actor/0", "actor/1"]
    assert guard.forked[(RESTART_FORK_ROLE, 0)] == stop_guard_argv()
    assert uids(cluster, "actor") == before and restarts(cluster, "actor") == [1, 1]
    assert len(cluster.revisions) == revisions  # nothing to write: the release already says this
    workers = successor.get_workers("actor")  # the restart the scheduler asked for is not a crash
    assert [w.id for w in workers] == ["actor/0", "actor/1"]
    with pytest.raises(WorkerCreationError, match="already exists"):  # now it is this controller's own
        successor.create_workers(job("actor", 2))


def test_another_image_is_a_revision_and_new_pods(make_scheduler, cluster):
    make_scheduler().create_workers(job("actor", 2))
    before = uids(cluster, "actor")
    guard = MemoryGuard(cluster)
    make_scheduler(guard=guard).create_workers(job("actor", 2, image="example.com/areal:2"))
    assert cluster.revisions[-1].description == "re-create actor for a new controller: 2 worker(s)"
    assert set(uids(cluster, "actor").values()).isdisjoint(before.values())  # the StatefulSet replaced them
    assert guard.restarted == []  # new pods run new workers: nothing to restart


def test_more_replicas_keep_and_restart_the_existing_pods(make_scheduler, cluster):
    make_scheduler().create_workers(job("actor", 2))
    before = uids(cluster, "actor")
    guard = MemoryGuard(cluster)
    make_scheduler(guard=guard).create_workers(job("actor", 3))
    after = uids(cluster, "actor")
    assert {k: after[k] for k in before} == before and len(after) == 3
    assert sorted(guard.restarted) == ["actor/0", "actor/1"]


def test_a_guard_that_cannot_restart_has_its_pod_replaced(make_scheduler, cluster):
    make_scheduler().create_workers(job("actor", 2))
    before = uids(cluster, "actor")
    guard = MemoryGuard(cluster)
    guard.refusing.add(cluster.pods["trial-release-actor-0"].status.pod_ip)
    cluster.stuck_guards.add("trial-release-actor-1")
    make_scheduler(guard=guard).create_workers(job("actor", 2))
    assert sorted(cluster.deleted) == ["trial-release-actor-0", "trial-release-actor-1"]
    assert set(uids(cluster, "actor").values()).isdisjoint(before.values())


def test_a_guard_that_stops_before_its_reply_keeps_its_pod(make_scheduler, cluster):
    # AReaL's guard exits on SIGTERM without finishing requests in flight: the child may stop it before the reply.
    make_scheduler().create_workers(job("actor", 2))
    before = uids(cluster, "actor")
    guard = MemoryGuard(cluster)
    guard.disconnecting.add(cluster.pods["trial-release-actor-0"].status.pod_ip)
    make_scheduler(guard=guard).create_workers(job("actor", 2))
    assert cluster.deleted == [] and uids(cluster, "actor") == before
    assert restarts(cluster, "actor") == [1, 1]


def test_an_inherited_process_fork_is_forked_again_with_new_ports(make_scheduler, cluster):
    guard = MemoryGuard(cluster)  # one guard per pod, as before: its ports are never handed out twice
    first = make_scheduler(guard=guard)
    first.create_workers(job("actor", 2))
    first.fork_workers("ref", "actor")
    old_ports = cluster.current().values["forks"]["ref"]["ports"]
    successor = make_scheduler(guard=guard)
    successor.create_workers(job("actor", 2))
    assert successor.create_workers(job("ref", 2, type="colocation", target="actor", fork=True)) == ["ref/0", "ref/1"]
    assert ("ref", 0) in guard.killed and ("ref", 1) in guard.killed  # the predecessor's children, if still there
    new_ports = cluster.current().values["forks"]["ref"]["ports"]
    assert new_ports != old_ports and cluster.revisions[-1].description == "fork ref from actor (2 processes)"
    assert "delete fork ref" not in [r.description for r in cluster.revisions]  # reclaimed, not deleted first
    with pytest.raises(WorkerCreationError, match="already exists"):
        successor.fork_workers("ref", "actor")


def test_an_inherited_colocation_on_the_same_target_writes_nothing(make_scheduler, cluster):
    first = make_scheduler()
    first.create_workers(job("actor", 2))
    first.create_workers(job("critic", 2, type="colocation", target="actor", fork=False))
    successor = make_scheduler()
    successor.create_workers(job("actor", 2))
    revisions = len(cluster.revisions)
    assert successor.create_workers(job("critic", 2, type="colocation", target="actor", fork=False)) == [
        "actor/0",
        "actor/1",
    ]
    assert len(cluster.revisions) == revisions


def test_an_inherited_workload_of_another_kind_is_deleted_then_created(make_scheduler, cluster):
    first = make_scheduler()
    first.create_workers(job("actor", 2))
    first.create_workers(job("critic", 2, type="colocation", target="actor", fork=False))
    successor = make_scheduler()
    successor.create_workers(job("actor", 2))
    successor.create_workers(job("critic", 1))  # a role of its own this time
    assert "critic" in cluster.current().values["roles"]
    assert "critic" not in (cluster.current().values.get("colocations") or {})
    assert [w.id for w in successor.get_workers("critic")] == ["critic/0"]


def test_a_role_the_scheduler_created_itself_is_refused_as_areal_refuses_it(make_scheduler, cluster):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    with pytest.raises(WorkerCreationError, match="already exists"):
        scheduler.create_workers(job("actor", 1))


def test_workers_returned_before_the_restart_are_forgotten_with_their_processes(make_scheduler, cluster):
    """AReaL may look at the role (get_workers) before it creates it again: what it learnt then, the pods as they
    were ready, must not count the restart the scheduler asks for as the worker's."""
    make_scheduler().create_workers(job("actor", 2))
    successor = make_scheduler()
    before = successor.get_workers("actor")
    assert successor.finder.known_workers("actor") == before
    successor.create_workers(job("actor", 2))
    assert successor.finder.known_workers("actor") is None
    assert successor.get_workers("actor") == before  # the same pods and addresses, new processes
