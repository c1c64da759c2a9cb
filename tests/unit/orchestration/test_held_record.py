"""The record of the pods AReaL holds (pods/ready_pods.py on the topology ConfigMap) as the scheduler keeps it: written
when get_workers hands pods out, forgotten for a role a revision changes, rewritten after a restarted trainer's
restart in place (the scheduler's own restart is not a restart after ready), and read by a scheduler that adopts the
release: a held pod replaced since is a failed worker there too."""

# ruff: noqa: F811 (the tests take the fixtures imported from test_scheduler_state as arguments)
from __future__ import annotations

import pytest

from areal_workers import diagnosis
from areal_workers.errors import WorkerFailedError
from areal_workers.pods import ready_pods
from memory_backend import MemoryCluster, MemoryGuard, MemoryPods
from test_scheduler_state import RELEASE, cluster, job, make_scheduler  # noqa: F401

ACTORS = [f"{RELEASE}-actor-0", f"{RELEASE}-actor-1"]


def held_uids(cluster: MemoryCluster, role: str) -> dict[str, str]:
    return {name: held.uid for name, held in cluster.ready_pods.get(role, {}).items()}


def test_the_pods_get_workers_hands_out_are_recorded_and_an_adopter_fails_one_replaced_since(make_scheduler, cluster):
    first = make_scheduler()
    first.create_workers(job("actor", 2))
    assert cluster.ready_pods == {}  # nothing handed out yet
    first.get_workers("actor")
    assert held_uids(cluster, "actor") == {name: cluster.pods[name].metadata.uid for name in ACTORS}

    MemoryPods(cluster).delete(ACTORS[1])  # kubectl delete pod: its StatefulSet starts another
    adopter = make_scheduler()  # another process: it never held these pods itself
    with pytest.raises(WorkerFailedError, match="replaced") as failed:
        adopter.get_workers("actor")
    assert failed.value.worker_id == "actor/1"


def test_a_revision_that_changes_a_role_forgets_its_pods_until_they_are_handed_out_again(make_scheduler, cluster):
    scheduler = make_scheduler()
    for role in ("actor", "critic"):
        scheduler.create_workers(job(role, 2))
        scheduler.get_workers(role)
    critics = held_uids(cluster, "critic")
    scheduler.update_workers(job("actor", 2, image="example.com/areal:2"))
    assert "actor" not in cluster.ready_pods and held_uids(cluster, "critic") == critics
    scheduler.get_workers("actor")
    assert held_uids(cluster, "actor") == {name: cluster.pods[name].metadata.uid for name in ACTORS}


def test_a_restarted_trainers_restart_in_place_is_recorded_and_not_a_restart_after_ready(make_scheduler, cluster):
    first = make_scheduler()
    first.create_workers(job("actor", 2))
    first.get_workers("actor")
    successor = make_scheduler(guard=MemoryGuard(cluster))
    successor.create_workers(job("actor", 2))  # its predecessor's workers restarted in place: restartCount 1
    assert {name: held.restarts for name, held in cluster.ready_pods["actor"].items()} == {
        name: (("worker", 1),) for name in ACTORS
    }
    fingerprint = successor.driver.model.fingerprint("actor")
    for name in ACTORS:  # what `areal-workers status` and `diagnose` judge each pod against
        pod = cluster.pods[name]
        assert diagnosis.diagnose_pod(pod, ready_pod=ready_pods.baseline(cluster.ready_pods, pod, fingerprint)) is None
