"""The record of the pods AReaL holds (pods/ready_pods.py): written and read back, a role's pods replaced as a whole,
nothing compared for a pod of another entry or for an annotation someone edited, and the baseline diagnosis judges a
restart and a replacement against."""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from areal_workers import diagnosis, naming
from areal_workers.pods import ready_pods


def pod(index: int, uid: str = "", restarts: int = 0, role: str = "actor") -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=f"r-{role}-{index}", uid=uid or f"uid-{role}-{index}", labels={naming.LABEL_ROLE: role}
        ),
        spec=client.V1PodSpec(containers=[client.V1Container(name="worker")]),
        status=client.V1PodStatus(
            phase="Running",
            conditions=[client.V1PodCondition(type="Ready", status="True")],
            container_statuses=[
                client.V1ContainerStatus(
                    name="worker",
                    image="",
                    image_id="",
                    ready=True,
                    restart_count=restarts,
                    state=client.V1ContainerState(running=client.V1ContainerStateRunning()),
                )
            ],
        ),
    )


def test_a_record_reads_back_as_written():
    record = ready_pods.with_workload({}, "actor", [pod(0, restarts=2), pod(1)], "entry-a")
    record = ready_pods.with_workload(record, "critic", [pod(0, role="critic")], "entry-c")
    annotations = {ready_pods.READY_PODS_ANNOTATION: ready_pods.render(record)}
    assert ready_pods.parse(annotations) == record
    assert record["actor"]["r-actor-0"].restarts == (("worker", 2),)


def test_a_roles_pods_are_replaced_as_a_whole_and_a_role_without_pods_leaves():
    record = ready_pods.with_workload({}, "actor", [pod(0), pod(1), pod(2)], "e")
    record = ready_pods.with_workload(record, "actor", [pod(0)], "e")  # scaled to 1
    assert set(record["actor"]) == {"r-actor-0"}
    assert ready_pods.with_workload(record, "actor", [], "e") == {}
    assert ready_pods.without(record, ["actor"]) == {}


@pytest.mark.parametrize(
    "text", ["not json", "[1, 2]", '{"actor": 3}', '{"actor": {"pods": {"p": {"uid": "u"}}}}', '{"actor": {"pods": 1}}']
)
def test_an_annotation_edited_into_something_else_holds_nothing(text):
    assert ready_pods.parse({ready_pods.READY_PODS_ANNOTATION: text}) == {}


def test_the_baseline_is_the_pod_as_held_and_only_for_the_same_entry():
    record = ready_pods.with_workload({}, "actor", [pod(0, restarts=1)], "entry")
    now = pod(0, restarts=2)
    held = ready_pods.baseline(record, now, "entry")
    assert held is not None and held.metadata.uid == "uid-actor-0"
    assert held.status.container_statuses[0].restart_count == 1
    assert ready_pods.baseline(record, now, "another entry") is None
    assert ready_pods.baseline(record, pod(1), "entry") is None


def test_diagnosis_against_the_baseline_finds_a_restart_and_a_replacement_and_nothing_else():
    record = ready_pods.with_workload({}, "actor", [pod(0, restarts=1)], "entry")
    same = pod(0, restarts=1)
    assert diagnosis.diagnose_pod(same, ready_pod=ready_pods.baseline(record, same, "entry")) is None
    again = pod(0, restarts=2)
    problem = diagnosis.diagnose_pod(again, ready_pod=ready_pods.baseline(record, again, "entry"))
    assert problem is not None and problem.fatal and problem.reason == "RestartedAfterReady"
    assert "engines are lost" in problem.message
    other = pod(0, uid="uid-new")
    problem = diagnosis.diagnose_pod(other, ready_pod=ready_pods.baseline(record, other, "entry"))
    assert (
        problem is not None and problem.reason == "RestartedAfterReady" and "uid-actor-0 -> uid-new" in problem.message
    )


def test_a_role_of_a_thousand_workers_stays_well_within_an_objects_annotations():
    name = "aw-gsm8k-grpo-run-7-c90f4c87-areal-workers-rollout"
    pods = [pod(i, uid=str(uuid.UUID(int=i))) for i in range(1024)]
    for i, each in enumerate(pods):
        each.metadata.name = f"{name}-{i}"
    text = ready_pods.render(ready_pods.with_workload({}, "rollout", pods, "entry"))
    assert len(text.encode()) < 128 * 1024  # of the 256 KiB every annotation of the ConfigMap shares
