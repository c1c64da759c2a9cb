"""Kueue admission read from Workload objects (pure logic of areal_workers.pods.admission; the cluster side is in
tests/integration/test_kueue.py)."""

from __future__ import annotations

from kubernetes import client

from areal_workers.pods.admission import (
    ADMISSION_GATE,
    POD_GROUP_LABEL,
    admission_of,
    is_gated,
    queues_of,
    workload_name,
)

SHORT = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor gpu, 8 more needed"
)
NEVER = (
    "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor gpu, previously "
    "considered podsets requests (0) + current podset request (12) > maximum capacity (8)"
)


def workload(name: str, *conditions: dict, queue: str = "lq", priority: int = 0, created: str = "2026-01-01T00:00:00Z"):
    return {
        "metadata": {"name": name, "creationTimestamp": created},
        "spec": {"queueName": queue, "priority": priority},
        "status": {"conditions": list(conditions)},
    }


def condition(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict:
    return {"type": kind, "status": status, "reason": reason, "message": message}


def test_a_pending_workload_is_queued_with_its_position_and_the_missing_quota():
    mine = workload("mine", condition("QuotaReserved", "False", "Pending", SHORT), created="2026-01-01T00:00:05Z")
    earlier = workload("earlier", condition("QuotaReserved", "False", "Pending", SHORT), created="2026-01-01T00:00:01Z")
    admitted = workload("running", condition("QuotaReserved"), condition("Admitted"))
    elsewhere = workload("other-queue", condition("QuotaReserved", "False"), queue="other")
    admission = admission_of(mine, [earlier, admitted, elsewhere, mine])
    assert (admission.state, admission.position, admission.pending) == ("queued", 2, 2)
    assert not admission.fatal
    assert admission.describe().startswith("queued in lq (position 2 of 2, pending quota: couldn't assign flavors")


def test_higher_priority_goes_first_in_the_position():
    mine = workload("mine", priority=1000, created="2026-01-01T00:00:09Z")
    older = workload("older", priority=10, created="2026-01-01T00:00:01Z")
    assert admission_of(mine, [older]).position == 1
    assert admission_of(older, [mine]).position == 2


def test_a_request_over_the_maximum_capacity_is_inadmissible_and_fatal():
    admission = admission_of(workload("big", condition("QuotaReserved", "False", "Pending", NEVER)))
    assert admission.state == "inadmissible" and admission.fatal
    assert "never admitted by lq" in admission.describe() and "maximum capacity (8)" in admission.describe()


def test_preemption_and_other_evictions_are_fatal_and_named():
    preempted = workload(
        "low",
        condition(
            "Evicted",
            reason="Preempted",
            message="Preempted to accommodate a workload (UID: 1) due to prioritization in the ClusterQueue",
        ),
        condition(
            "Preempted",
            reason="InClusterQueue",
            message="Preempted to accommodate a workload (UID: 1) due to prioritization in the ClusterQueue",
        ),
        condition("QuotaReserved", "False"),
    )
    admission = admission_of(preempted)
    assert admission.state == "preempted" and admission.fatal
    assert admission.describe().startswith("preempted by Kueue in lq: Preempted to accommodate")
    stopped = admission_of(workload("w", condition("Evicted", reason="ClusterQueueStopped", message="stopped")))
    assert stopped.state == "evicted" and "ClusterQueueStopped" in stopped.describe()


def test_an_admitted_workload_is_not_fatal():
    admission = admission_of(workload("w", condition("QuotaReserved"), condition("Admitted")))
    assert admission.state == "admitted" and not admission.fatal


def test_pods_name_their_workload_and_gate():
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", labels={POD_GROUP_LABEL: "statefulset-x"}),
        spec=client.V1PodSpec(containers=[], scheduling_gates=[client.V1PodSchedulingGate(name=ADMISSION_GATE)]),
    )
    assert workload_name(pod) == "statefulset-x" and is_gated(pod)
    plain = client.V1Pod(metadata=client.V1ObjectMeta(name="p"), spec=client.V1PodSpec(containers=[]))
    assert workload_name(plain) is None and not is_gated(plain)


def test_queues_of_rendered_statefulsets():
    manifests = [
        {"kind": "StatefulSet", "metadata": {"labels": {"areal.io/role": "actor", "kueue.x-k8s.io/queue-name": "lq"}}},
        {"kind": "StatefulSet", "metadata": {"labels": {"areal.io/role": "other", "kueue.x-k8s.io/queue-name": "q2"}}},
        {"kind": "StatefulSet", "metadata": {"labels": {"areal.io/role": "plain"}}},
        {"kind": "Service", "metadata": {"labels": {"areal.io/role": "actor", "kueue.x-k8s.io/queue-name": "x"}}},
    ]
    assert queues_of(manifests, ("actor", "plain")) == {"lq"}
