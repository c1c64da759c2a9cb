"""Placement in topology domains on labelled nodes, judged by the real kube-scheduler: exclusiveTopology keeps a
role's workers in one rack that no other role's workers share, and the capacity check refuses, before anything is
written, a role no rack could ever hold.

The test's own KWOK nodes (two in rack a with 8 GPUs each, so one 8-GPU worker per node, and one in rack b with 4)
carry a taint of the test's, which only its roles tolerate, and its roles are pinned to them. Rack b cannot hold an
8-GPU worker at all: the kube-scheduler picks the domain of a group's first worker without looking at room for the
rest (the chart README says so), so a test where two racks could take the first one would pass by chance.
serial_cluster: the nodes are cluster-wide, and capacity messages of tests running beside it would count them.
"""

from __future__ import annotations

import pytest

from areal_workers import WorkerCreationError, WorkerTimeoutError
from clusterlib import job, spec, wait_for
from fault_nodes import rack_nodes

pytestmark = pytest.mark.serial_cluster

RACK = "topology.areal-workers.dev/rack"


@pytest.fixture
def racks(core):
    with rack_nodes(core, {"a1": "a", "a2": "a", "b1": "b"}, RACK, first_index=240, gpus={"b1": 4}) as made:
        yield made


def placed(core, namespace: str, role: str) -> list[str]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"areal.io/role={role}").items
    return sorted(pod.spec.node_name for pod in pods if pod.spec.node_name)


def scheduling_failed(core, namespace: str, role: str) -> bool:
    """The kube-scheduler has reported a FailedScheduling event for a pod of the role."""
    events = core.list_namespaced_event(namespace, field_selector="reason=FailedScheduling").items
    return any(f"-{role}-" in (event.involved_object.name or "") for event in events)


def test_exclusive_roles_hold_a_rack_each_and_keep_other_workers_out(make_scheduler, core, namespace, racks):
    layout, on_them = racks
    exclusive = {**on_them, "exclusiveTopology": RACK}
    values = {"roles": {"actor": exclusive, "rollout": exclusive, "critic": on_them}}
    scheduler = make_scheduler(extra_values=values)
    gpu = [spec(gpu=8)]

    with pytest.raises(WorkerCreationError) as refused:
        scheduler.create_workers(job("actor", 3, gpu))
    assert (
        f"role actor must run its 3 workers in one domain of node label {RACK} (exclusiveTopology), but no domain "
        "could ever hold more than 2"
    ) in str(refused.value)
    assert core.list_namespaced_secret(namespace, label_selector="owner=helm").items == []  # no release written

    scheduler.create_workers(job("actor", 2, gpu))
    scheduler.get_workers("actor", timeout=120)
    actor_nodes = placed(core, namespace, "actor")
    assert {layout[node] for node in actor_nodes} == {"a"} and len(actor_nodes) == 2  # the one rack that holds 2

    scheduler.create_workers(job("rollout", 1, [spec(gpu=1)]))  # rack a is the actors' (and full)
    scheduler.get_workers("rollout", timeout=120)
    assert [layout[node] for node in placed(core, namespace, "rollout")] == ["b"]

    # Every rack is held: a worker of a role without exclusive placement would fit b1's 3 free GPUs, but the real
    # scheduler keeps it out of rack b (and rack a has no GPU left).
    scheduler.create_workers(job("critic", 1, [spec(gpu=1)]))
    wait_for(lambda: scheduling_failed(core, namespace, "critic"), 120, "the critic's FailedScheduling event", 1)
    # The scheduler has judged the worker: the time-out that follows needs to be only long enough to happen.
    with pytest.raises(WorkerTimeoutError) as waited:
        scheduler.get_workers("critic", timeout=3)
    assert "anti-affinity" in waited.value.diagnosis, waited.value.diagnosis
    assert placed(core, namespace, "critic") == []
