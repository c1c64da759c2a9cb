"""The wait's predicate (pods/watch.all_ready): every index Ready once, nothing beyond, and, given the StatefulSet's
update revision, only pods of that template: a Ready pod of the template before an update is not a worker of it."""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes import client

from areal_workers.naming import LABEL_POD_INDEX
from areal_workers.pods.watch import all_ready, template_revision


def pod(index: int, revision: str = "r2", ready: bool = True, deleting: bool = False) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=f"t-actor-{index}",
            labels={LABEL_POD_INDEX: str(index), "controller-revision-hash": revision},
            deletion_timestamp=datetime(2026, 12, 7, tzinfo=UTC) if deleting else None,
        ),
        status=client.V1PodStatus(
            pod_ip=f"127.0.0.{index + 2}",
            conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


def by_name(*pods: client.V1Pod) -> dict[str, client.V1Pod]:
    return {p.metadata.name: p for p in pods}


def test_every_index_ready_once_and_none_beyond():
    assert all_ready(2)(by_name(pod(0), pod(1)))
    assert not all_ready(2)(by_name(pod(0)))
    assert not all_ready(2)(by_name(pod(0), pod(1, ready=False)))
    assert not all_ready(1)(by_name(pod(0), pod(1)))  # a scale-down not done yet
    assert all_ready(1)(by_name(pod(0), pod(1, deleting=True)))


def test_with_the_update_revision_a_ready_pod_of_the_earlier_template_is_not_counted():
    rolling = by_name(pod(0, revision="r1"), pod(1, revision="r2"))
    assert all_ready(2)(rolling)  # without the revision, the old pod passes: the race this guards against
    assert not all_ready(2, {"r2"})(rolling)
    assert all_ready(2, {"r2"})(by_name(pod(0), pod(1)))
    assert template_revision(pod(0, revision="r1")) == "r1"
