"""What helm leaves undone to a release's pods and StatefulSets: pods waited gone (but not those stranded on an
unreachable node), StatefulSets deleted or scaled to rank 0, stuck pods of an abandoned revision replaced, the chart's
test pods removed (fakes for the pod watch, the StatefulSet API and the inspector)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from areal_workers import naming
from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.orchestration.pod_cleanup import PodCleanup
from areal_workers.pods.watch import WaitTimedOut, pod_index

NAMESPACE = "ns"
DELETED = datetime(2024, 1, 1, tzinfo=UTC)


def pod(name, labels=None, *, node="n1", terminating=False, ready=True, revision=None):
    labels = dict(labels or {})
    if revision:
        labels["controller-revision-hash"] = revision
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=labels, deletion_timestamp=DELETED if terminating else None),
        spec=client.V1PodSpec(containers=[], node_name=node),
        status=client.V1PodStatus(
            pod_ip="10.0.0.1",
            conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


def node(name):
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name),
        status=client.V1NodeStatus(conditions=[client.V1NodeCondition(type="Ready", status="True")]),
    )


def matches(selector: str, labels: dict) -> bool:
    return all(labels.get(key) == value for key, value in (term.split("=", 1) for term in selector.split(",")))


class FakePods:
    """A wait sees the pods as they are: done, or WaitTimedOut."""

    def __init__(self, pods, delete_errors=None):
        self.pods = {p.metadata.name: p for p in pods}
        self.deleted, self.delete_errors, self.waits = [], dict(delete_errors or {}), []

    def list(self, selector):
        return [p for p in self.pods.values() if matches(selector, p.metadata.labels or {})], "1"

    def delete(self, name):
        if name in self.delete_errors:
            raise self.delete_errors[name]
        self.deleted.append(name)
        self.pods.pop(name, None)

    def wait(self, selector, done, timeout, on_pod=None, on_idle=None):
        self.waits.append((selector, timeout, on_idle))
        pods = {p.metadata.name: p for p in self.list(selector)[0]}
        if done(pods):
            return pods
        raise WaitTimedOut({pod_index(p): p for p in pods.values()})


class WatchResponse:
    """A watch's HTTP response as urllib3 streams it: one JSON event per line."""

    status = 200

    def __init__(self, events):
        serialize = client.ApiClient().sanitize_for_serialization
        self.lines = [json.dumps({"type": kind, "object": serialize(obj)}).encode() + b"\n" for kind, obj in events]

    def stream(self, amt=None, decode_content=False):
        yield from self.lines

    def close(self):
        pass

    def release_conn(self):
        pass


class FakeStatefulSets:
    def __init__(self, statefulsets):
        self.items = {s.metadata.name: s for s in statefulsets}
        self.deleted, self.scaled = [], []
        self.events = []  # what a watch streams: (type, StatefulSet)
        self.watches = []  # the field selector and resourceVersion of each

    def list_namespaced_stateful_set(self, namespace, label_selector="", watch=False, **kwargs):
        assert namespace == NAMESPACE
        if watch:
            self.watches.append((kwargs["field_selector"], kwargs["resource_version"]))
            return WatchResponse(self.events)
        return SimpleNamespace(
            items=[s for s in self.items.values() if matches(label_selector, s.metadata.labels or {})]
        )

    def read_namespaced_stateful_set(self, name, namespace):
        if name not in self.items:
            raise ApiException(status=404)
        return self.items[name]

    def delete_namespaced_stateful_set(self, name, namespace, propagation_policy):
        assert propagation_policy == "Background"
        self.deleted.append(name)
        del self.items[name]

    def patch_namespaced_stateful_set_scale(self, name, namespace, body):
        self.scaled.append((name, body))


def statefulset(name, labels, replicas=2, update_revision="new"):
    return client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name=name, labels=labels, generation=3),
        spec=client.V1StatefulSetSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels={naming.LABEL_ROLE: name}),
            service_name=name,
            template=client.V1PodTemplateSpec(),
        ),
        status=client.V1StatefulSetStatus(replicas=replicas, observed_generation=3, update_revision=update_revision),
    )


def cleanup(pods, statefulsets=(), nodes=()):
    config = KubernetesSchedulerConfig(namespace=NAMESPACE, release_name="rel", helm_timeout=7)
    inspector = SimpleNamespace(nodes=lambda: list(nodes))
    return PodCleanup(config, pods, FakeStatefulSets(statefulsets), inspector)  # type: ignore[arg-type]


ROLE = {"app": "w", naming.LABEL_ROLE: "actor"}


def test_wait_gone_returns_quietly_once_no_pod_is_left(caplog):
    pods = FakePods([])
    with caplog.at_level(logging.WARNING):
        cleanup(pods).wait_gone("app=w")
    assert caplog.records == [] and pods.waits[0][:2] == ("app=w", 7)
    assert pods.waits[0][2][0] > 0  # the nodes are read again while it waits


def test_wait_gone_does_not_wait_for_pods_terminating_on_a_deleted_node(caplog):
    pods = FakePods([pod("w-0", ROLE, node="gone", terminating=True), pod("w-1", ROLE, node="gone", terminating=True)])
    with caplog.at_level(logging.WARNING):
        cleanup(pods, nodes=[node("n1")]).wait_gone("app=w")
    assert "not waiting for 2 pod(s)" in caplog.text and "w-0 on gone, w-1 on gone" in caplog.text


@pytest.mark.parametrize(
    "stuck",
    [
        pod("w-0", ROLE, node="n1", terminating=True),  # its node answers: the kubelet will confirm the end
        pod("w-0", ROLE, node="gone", terminating=False),  # not being deleted at all
    ],
)
def test_wait_gone_waits_for_pods_a_kubelet_can_still_end_then_warns_at_the_timeout(stuck, caplog):
    with caplog.at_level(logging.WARNING):
        cleanup(FakePods([stuck]), nodes=[node("n1")]).wait_gone("app=w")
    assert "pods still terminating after 7s: w-0" in caplog.text


def test_without_node_access_every_terminating_pod_is_waited_for(caplog):
    with caplog.at_level(logging.WARNING):
        cleanup(FakePods([pod("w-0", ROLE, node="gone", terminating=True)]), nodes=[]).wait_gone("app=w")
    assert "still terminating" in caplog.text


def test_delete_statefulsets_deletes_what_the_selector_selects_and_waits_them_gone():
    pods = FakePods([])
    work = cleanup(pods, [statefulset("actor", {"app": "w"}), statefulset("other", {"app": "x"})])
    assert work.delete_statefulsets("app=w") == ["actor"]
    assert work.statefulsets.deleted == ["actor"] and list(work.statefulsets.items) == ["other"]
    assert [w[0] for w in pods.waits] == ["app=w"]  # and its pods waited gone


def test_scale_down_patches_only_statefulsets_above_one_replica_and_waits_for_rank_zero():
    pods = FakePods([pod("actor-0", ROLE)])
    work = cleanup(
        pods, [statefulset("actor", {"app": "w"}, replicas=3), statefulset("solo", {"app": "w"}, replicas=1)]
    )
    work.scale_down_to_rank_zero("app=w")
    assert work.statefulsets.scaled == [("actor", {"spec": {"replicas": 1}})]
    with pytest.raises(WaitTimedOut):  # a pod of index 1 still there: not done
        cleanup(FakePods([pod("actor-0", ROLE), pod("actor-1", ROLE)])).scale_down_to_rank_zero("app=w")


def test_delete_test_pods_removes_the_charts_test_pods_and_tolerates_those_already_gone():
    test = {"app": "w", naming.LABEL_COMPONENT: "test"}
    pods = FakePods(
        [pod("rel-test", test), pod("rel-test-2", test), pod("actor-0", ROLE)],
        delete_errors={"rel-test-2": ApiException(status=404)},
    )
    cleanup(pods).delete_test_pods("app=w")
    assert pods.deleted == ["rel-test"] and "actor-0" in pods.pods


def test_delete_test_pods_raises_other_api_errors():
    test = {"app": "w", naming.LABEL_COMPONENT: "test"}
    pods = FakePods([pod("rel-test", test)], delete_errors={"rel-test": ApiException(status=403)})
    with pytest.raises(ApiException):
        cleanup(pods).delete_test_pods("app=w")


def test_replace_stuck_pods_deletes_only_unready_pods_of_another_revision():
    pods = FakePods(
        [
            pod("actor-0", ROLE, ready=False, revision="old"),  # stuck on the abandoned revision
            pod("actor-1", ROLE, ready=True, revision="old"),  # old but serving: the StatefulSet rolls it
            pod("actor-2", ROLE, ready=False, revision="new"),  # current revision, still starting
        ]
    )
    work = cleanup(pods, [statefulset("actor", {"app": "w"}, replicas=3, update_revision="new")])
    assert work.replace_stuck_pods("app=w") == ["actor-0"]
    assert pods.deleted == ["actor-0"]


def test_replace_stuck_pods_follows_a_statefulset_its_controller_has_not_observed_yet():
    stale = statefulset("actor", {"app": "w"}, update_revision="old")
    stale.status.observed_generation = 2  # generation 3 not seen yet: update_revision is stale
    fresh = statefulset("actor", {"app": "w"}, update_revision="new")
    pods = FakePods([pod("actor-0", ROLE, ready=False, revision="old")])
    work = cleanup(pods, [stale])
    work.statefulsets.events = [("MODIFIED", fresh)]
    assert work.replace_stuck_pods("app=w") == ["actor-0"]  # judged against the fresh "new" revision


def test_update_revisions_seen_reads_once_and_counts_an_unobserved_statefulset_as_unknown():
    observed = statefulset("actor", ROLE, update_revision="new")
    unobserved = statefulset("critic", {**ROLE, naming.LABEL_ROLE: "critic"}, update_revision="old")
    unobserved.status.observed_generation = 2  # generation 3 not seen yet: its update revision may be stale
    no_status = statefulset("ref", {**ROLE, naming.LABEL_ROLE: "ref"})
    no_status.status = None  # created, not yet touched by its controller
    work = cleanup(FakePods([]), [observed, unobserved, no_status])
    work.statefulsets.read_namespaced_stateful_set = lambda *_: pytest.fail("it waited for a controller")
    for role, revisions in {"actor": {"new"}, "critic": None, "ref": None, "none": set()}.items():
        assert work.update_revisions_seen(f"app=w,{naming.LABEL_ROLE}={role}") == revisions, role


def test_update_revisions_waits_for_the_controller_to_observe_the_latest_spec():
    """The moment between update_workers and the StatefulSet controller's first look at the new template (the
    controller manager busy or restarting): the status still names the earlier template as the update revision."""
    stale = statefulset("actor", ROLE, update_revision="old")
    stale.status.observed_generation = 2  # generation 3 not seen yet
    stale.metadata.resource_version = "41"
    fresh = statefulset("actor", ROLE, update_revision="new")
    work = cleanup(FakePods([]), [stale])
    work.statefulsets.events = [("MODIFIED", stale), ("MODIFIED", fresh), ("MODIFIED", stale)]
    work.statefulsets.read_namespaced_stateful_set = lambda *_: pytest.fail("read again instead of watched")
    assert work.update_revisions("app=w") == {"new"}
    assert work.statefulsets.watches == [("metadata.name=actor", "41")]  # one watch, from the version listed


def test_a_statefulset_watched_from_a_version_too_old_is_read_as_it_is():
    stale = statefulset("actor", ROLE, update_revision="old")
    stale.status.observed_generation = 2
    work = cleanup(FakePods([]), [stale])
    gone = {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}
    work.statefulsets.events = [("ERROR", gone)]
    work.statefulsets.read_namespaced_stateful_set = lambda name, namespace: statefulset(name, ROLE)
    assert work.update_revisions("app=w") == {"new"}
