"""ReleaseDriver (orchestration/driver.py) on the in-memory cluster: epochs, what is pending against the last
all-ready revision, a failed upgrade undone, helm's failures as AReaL's errors, adoption, the rollback and the
StatefulSet work a rollback or a Kueue requeue needs."""

from __future__ import annotations

import copy
import logging
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from areal_workers import naming
from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.errors import InvalidSchedulerSetupError, SchedulerError, WorkerCreationError
from areal_workers.orchestration.driver import ReleaseDriver
from areal_workers.release.client import HelmError
from areal_workers.release.model import ReleaseModel
from areal_workers.runtime.loop_thread import LoopThread
from memory_backend import MemoryCluster, MemoryInspector, MemoryPods, MemoryReleases, MemoryStatefulSets

RELEASE = "aw-exp-trial-1a2b3c4d"
NAMESPACE = "rl"
OWN = {naming.LABEL_NAME: naming.CHART_NAME, naming.LABEL_INSTANCE: RELEASE}  # the chart's selector labels
FOREIGN = {naming.LABEL_NAME: "other-app", naming.LABEL_INSTANCE: RELEASE}  # e.g. an Argo CD app of that name


def values(**roles: dict[str, Any]) -> dict[str, Any]:
    return {"experiment": "exp", "trial": "trial", "roles": {name: dict(entry) for name, entry in roles.items()}}


ACTOR = {"replicas": 2, "image": {"repository": "example.com/areal", "tag": "1"}}
CRITIC = {"replicas": 1, "image": {"repository": "example.com/areal", "tag": "1"}}


@pytest.fixture
def loop():
    thread = LoopThread()
    yield thread
    thread.close()


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(RELEASE)


def make_driver(
    cluster: MemoryCluster,
    loop: LoopThread,
    releases: Any = None,
    statefulsets: Any = None,
    pods: Any = None,
    **settings: Any,
) -> ReleaseDriver:
    config = KubernetesSchedulerConfig(namespace=NAMESPACE, release_name=RELEASE, **settings)
    fakes: list[Any] = [
        releases or MemoryReleases(cluster),
        MemoryInspector(cluster),
        pods or MemoryPods(cluster),
        statefulsets or MemoryStatefulSets(),
    ]
    return ReleaseDriver(RELEASE, config, *fakes, loop)


# --- epochs and what is pending ----------------------------------------------------------------------------------


def test_an_epoch_changes_only_when_a_workloads_pods_may_have_been_replaced(cluster, loop):
    driver = make_driver(cluster, loop)
    driver.apply(values(actor=ACTOR), "create actor", "actor")
    first = driver.epoch("actor")
    driver.apply(values(actor=ACTOR, critic=CRITIC), "create critic", "critic")
    assert driver.epoch("actor") == first and driver.epoch("critic") not in (None, first)
    driver.apply(values(actor={**ACTOR, "replicas": 3}, critic=CRITIC), "scale actor", "actor")
    scaled = driver.epoch("actor")
    assert scaled != first
    driver.uninstall()
    assert driver.epoch("actor") is None
    driver.apply(values(actor={**ACTOR, "replicas": 3}), "create actor", "actor")
    assert driver.epoch("actor") not in (None, first, scaled)  # helm numbers revisions from 1 again, epochs never


def test_pending_is_what_changed_since_the_last_all_ready_revision(cluster, loop):
    driver = make_driver(cluster, loop)
    driver.apply(values(actor=ACTOR), "create actor", "actor")
    assert driver.pending() == {"actor"}
    driver.confirm_ready("actor", [])
    assert (driver.good_revision, cluster.ready_revision, driver.pending()) == (1, 1, set())
    driver.apply(values(actor=ACTOR, critic=CRITIC), "create critic", "critic")
    assert driver.pending() == {"critic"}


def test_a_good_revision_pruned_from_the_history_leaves_every_workload_pending(cluster, loop):
    driver = make_driver(cluster, loop)
    driver.apply(values(actor=ACTOR), "create actor", "actor")
    driver.confirm_ready("actor", [])
    driver.apply(values(actor=ACTOR, critic=CRITIC), "create critic", "critic")
    cluster.revisions = [r for r in cluster.revisions if r.revision != 1]  # history_max dropped it
    fresh = make_driver(cluster, loop)
    fresh.adopt()
    assert fresh.good_revision == 1 and fresh.pending() == {"actor", "critic"}


def test_the_held_pods_and_the_ready_revision_are_one_write(cluster, loop):
    """get_workers' last step, under the scheduler's lock and before AReaL gets its workers: one patch of the
    topology ConfigMap, not one per record."""
    driver = make_driver(cluster, loop)
    driver.apply(values(actor=ACTOR), "create actor", "actor")
    driver.confirm_ready("actor", [pod("a0", "actor", 0, "r2", ready=True)])
    assert cluster.record_writes == 1
    assert (cluster.ready_revision, list(cluster.ready_pods)) == (1, ["actor"])
    driver.confirm_ready("actor", [pod("a0", "actor", 0, "r2", ready=True)])
    assert cluster.record_writes == 1  # nothing changed: nothing written


def test_a_revision_is_not_good_while_another_pending_workload_is_not_ready(cluster, loop):
    driver = make_driver(cluster, loop)
    driver.apply(values(actor=ACTOR, critic={**CRITIC, "image": {"repository": "slow", "tag": "1"}}), "create", "a")
    driver.confirm_ready("actor", [pod("a0", "actor", 0, "r2", ready=True)])
    assert driver.good_revision is None and cluster.ready_revision is None
    assert list(cluster.ready_pods) == ["actor"] and cluster.record_writes == 1  # the held pods alone


def test_a_change_that_only_removes_a_workload_is_as_good_as_its_predecessor(cluster, loop):
    driver = make_driver(cluster, loop)
    driver.apply(values(actor=ACTOR, critic=CRITIC), "create", "actor")
    driver.confirm_ready("actor", [])
    driver.apply(values(actor=ACTOR), "delete critic", "critic")
    driver.settle()
    assert driver.good_revision == 2


# --- a failed upgrade and helm's errors ------------------------------------------------------------------------


class WritingThenFailing(MemoryReleases):
    """helm upgrade --wait that writes its revision, then fails: the release is left on the failed revision (status
    "failed", as helm records it)."""

    async def apply(self, name: str, values: dict[str, Any], description: str) -> tuple[int, dict[str, Any]]:
        self.cluster.write(values, description).status = SimpleNamespace(value="failed")
        raise HelmError(1, b"", b"Error: context deadline exceeded")


def test_a_failed_upgrade_is_rolled_back_to_the_revision_before_it(cluster, loop):
    make_driver(cluster, loop).apply(values(actor=ACTOR), "create actor", "actor")
    driver = make_driver(cluster, loop, releases=WritingThenFailing(cluster))
    driver.adopt()
    with pytest.raises(WorkerCreationError) as failed:
        driver.apply(values(actor=ACTOR, critic=CRITIC), "create critic", "critic")
    assert failed.value.reason == "helm upgrade failed" and failed.value.details == "context deadline exceeded"
    assert cluster.current().values == values(actor=ACTOR)
    assert [r.description for r in cluster.revisions] == ["create actor", "create critic", "Rollback to 1"]


class OtherWritesThenFailing(MemoryReleases):
    """Another controller writes a revision while this one's upgrade runs; this one then fails before writing."""

    async def apply(self, name: str, values: dict[str, Any], description: str) -> tuple[int, dict[str, Any]]:
        self.cluster.write(values, "the other controller's change")
        raise HelmError(1, b"", b"Error: UPGRADE FAILED: another operation (install/upgrade/rollback) is in progress")


def test_a_failed_upgrade_leaves_another_controllers_revision_alone(cluster, loop):
    make_driver(cluster, loop).apply(values(actor=ACTOR), "create actor", "actor")
    driver = make_driver(cluster, loop, releases=OtherWritesThenFailing(cluster))
    driver.adopt()
    with pytest.raises(WorkerCreationError) as failed:
        driver.apply(values(actor=ACTOR, critic=CRITIC), "create critic", "critic")
    assert "written after revision 1 by another controller: not undone" in "\n".join(failed.value.__notes__)
    assert [r.description for r in cluster.revisions] == ["create actor", "the other controller's change"]


def test_a_failed_install_is_uninstalled(cluster, loop):
    driver = make_driver(cluster, loop, releases=WritingThenFailing(cluster))
    with pytest.raises(WorkerCreationError):
        driver.apply(values(actor=ACTOR), "create actor", "actor")
    assert not cluster.installed and not driver.model.installed


class FailingReads(MemoryReleases):
    async def snapshot(self, name: str, current: Any = None) -> Any:
        raise HelmError(1, b"", b"Error: Kubernetes cluster unreachable")


def test_helms_failure_is_a_scheduler_error_with_helms_own_message(cluster, loop):
    driver = make_driver(cluster, loop, releases=FailingReads(cluster))
    with pytest.raises(SchedulerError) as failed:
        driver.reload()
    assert str(failed.value) == (
        f"helm failed for release {RELEASE} in namespace {NAMESPACE}: Kubernetes cluster unreachable"
    )
    with pytest.raises(WorkerCreationError) as keyed:
        driver.helm(FailingReads(cluster).snapshot(RELEASE), "actor")
    assert (keyed.value.worker_key, keyed.value.reason) == ("actor", "helm failed")


# --- adoption ------------------------------------------------------------------------------------------------


def test_a_restarted_controller_adopts_the_recorded_ready_revision(cluster, loop):
    first = make_driver(cluster, loop)
    first.apply(values(actor=ACTOR), "create actor", "actor")
    first.confirm_ready("actor", [])
    first.apply(values(actor=ACTOR, critic=CRITIC), "create critic", "critic")
    again = make_driver(cluster, loop)
    model = again.adopt()
    assert (model.revision, again.good_revision, again.pending()) == (2, 1, {"critic"})


def test_a_deployed_release_without_a_record_counts_as_good_when_adopted(cluster, loop):
    make_driver(cluster, loop).apply(values(actor=ACTOR), "create actor", "actor")
    driver = make_driver(cluster, loop)
    driver.adopt()
    assert driver.good_revision == 1


def test_an_external_release_without_a_helm_record_is_adopted_from_its_topology(cluster, loop):
    make_driver(cluster, loop).apply(values(actor=ACTOR), "create actor", "actor")
    cluster.helm_record = False  # what Argo CD's sync leaves
    model = make_driver(cluster, loop, ownership="external").adopt()
    assert model.installed and model.revision is None and model.replicas("actor") == 2


def test_the_shared_storage_warning_comes_once_per_release_with_the_change_that_makes_it(
    cluster, loop, caplog, monkeypatch
):
    """It came at every command's first read (up, rollback, down, doctor); now with the install and with a
    revision that changes the paths, never when a release is adopted."""
    paths = ["cluster.fileroot /tmp/areal"]
    rendered = cluster.topology
    monkeypatch.setattr(
        cluster, "topology", lambda: {**rendered(), "unshared_paths": list(paths)} if rendered() else {}
    )

    def warned() -> list[str]:
        return [r.getMessage() for r in caplog.records if "no volume every worker mounts" in r.getMessage()]

    with caplog.at_level(logging.WARNING, logger="areal_workers"):
        make_driver(cluster, loop).apply(values(actor=ACTOR), "create actor", "actor")
        assert len(warned()) == 1  # the install
        again = make_driver(cluster, loop)
        again.adopt()  # what every command does first
        again.apply(values(actor=ACTOR, critic=CRITIC), "create critic", "critic")  # the same paths
        assert len(warned()) == 1
        paths.append("cluster.nameResolve.nfsRecordRoot /tmp/areal/name_resolve")
        again.apply(values(actor={**ACTOR, "replicas": 3}, critic=CRITIC), "scale actor", "actor")
    assert len(warned()) == 2 and "nfsRecordRoot" in warned()[1]


def test_a_release_of_another_chart_is_refused_before_anything_touches_it(cluster, loop):
    cluster.write(values(actor=ACTOR), "installed by someone else")
    cluster.chart = "postgresql"
    before = copy.deepcopy(cluster.revisions)
    with pytest.raises(InvalidSchedulerSetupError) as raised:
        make_driver(cluster, loop).adopt()
    message = str(raised.value)
    assert f"release {RELEASE} in namespace {NAMESPACE}" in message and "'postgresql'" in message
    assert "nothing was changed" in message and "AREAL_K8S_RELEASE_NAME" in message
    assert cluster.revisions == before and cluster.installed


def test_an_external_release_that_is_not_there_names_what_to_install(cluster, loop):
    with pytest.raises(SchedulerError, match=f"release '{RELEASE}' not found in namespace '{NAMESPACE}'"):
        make_driver(cluster, loop, ownership="external").adopt()


# --- rollback ------------------------------------------------------------------------------------------------


def test_a_failed_change_rolls_back_to_the_last_all_ready_revision(cluster, loop):
    driver = make_driver(cluster, loop)
    driver.apply(values(actor=ACTOR), "create actor", "actor")
    driver.confirm_ready("actor", [])
    driver.apply(values(actor={**ACTOR, "image": {"repository": "broken", "tag": "1"}}), "update actor", "actor")
    error = RuntimeError("actor/0 crashed")
    driver.roll_back(error)
    assert cluster.current().values == values(actor=ACTOR)
    assert driver.good_revision == 3 and cluster.ready_revision == 3
    assert error.__notes__ == [f"rolled back release {RELEASE} to revision 1"]


def test_the_rollback_is_logged_with_the_errors_first_line_marked_as_in_the_error(cluster, loop, caplog):
    driver = make_driver(cluster, loop)
    driver.apply(values(actor=ACTOR), "create actor", "actor")
    driver.confirm_ready("actor", [])
    driver.apply(values(actor={**ACTOR, "image": {"repository": "broken", "tag": "1"}}), "update actor", "actor")
    with caplog.at_level("WARNING", logger="areal_workers.orchestration.driver"):
        driver.roll_back(RuntimeError("actor/0 failed\nStderr output:\nthe diagnosis"))
    (record,) = caplog.records
    assert record.getMessage() == f"rolled back release {RELEASE} to revision 1 after: actor/0 failed"
    assert record.in_raised_error  # the caller that prints the error (areal-workers up) leaves it out


def test_a_release_that_was_never_all_ready_is_uninstalled_instead(cluster, loop):
    driver = make_driver(cluster, loop)
    driver.apply(values(actor={**ACTOR, "image": {"repository": "broken", "tag": "1"}}), "create actor", "actor")
    error = RuntimeError("actor/0 crashed")
    driver.roll_back(error)
    assert not cluster.installed and driver.good_revision is None
    assert error.__notes__ == [f"uninstalled release {RELEASE}: no revision ever had all workers ready"]


# --- StatefulSets --------------------------------------------------------------------------------------------


def statefulset(
    name: str, role: str, update_revision: str = "r2", replicas: int = 2, chart_labels: dict[str, str] = OWN
) -> client.V1StatefulSet:
    labels = {**chart_labels, naming.LABEL_ROLE: role}
    return client.V1StatefulSet(
        metadata=client.V1ObjectMeta(name=name, generation=2, labels=labels),
        spec=client.V1StatefulSetSpec(
            replicas=replicas,
            selector=client.V1LabelSelector(match_labels=labels),
            service_name=name,
            template=client.V1PodTemplateSpec(),
        ),
        status=client.V1StatefulSetStatus(replicas=replicas, observed_generation=2, update_revision=update_revision),
    )


class StatefulSets:
    """AppsV1Api's StatefulSet calls over a dict, recording deletes and scales."""

    def __init__(self, *items: client.V1StatefulSet) -> None:
        self.items = {item.metadata.name: item for item in items}
        self.deleted: list[str] = []
        self.scaled: list[tuple[str, int]] = []

    def list_namespaced_stateful_set(self, namespace: str, label_selector: str = "", **kwargs: Any) -> Any:
        wanted = dict(term.split("=", 1) for term in label_selector.split(",") if term)
        return client.V1StatefulSetList(
            items=[copy.deepcopy(s) for s in self.items.values() if wanted.items() <= s.metadata.labels.items()]
        )

    def read_namespaced_stateful_set(self, name: str, namespace: str, **kwargs: Any) -> Any:
        if name not in self.items:
            raise ApiException(status=404, reason="NotFound")
        return copy.deepcopy(self.items[name])

    def patch_namespaced_stateful_set_scale(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        self.scaled.append((name, body["spec"]["replicas"]))

    def delete_namespaced_stateful_set(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.deleted.append(name)
        del self.items[name]


def pod(
    name: str, role: str, index: int, revision: str, ready: bool, chart_labels: dict[str, str] = OWN
) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name,
            labels={
                **chart_labels,
                naming.LABEL_ROLE: role,
                naming.LABEL_POD_INDEX: str(index),
                "controller-revision-hash": revision,
            },
            annotations={"spec": ""},
        ),
        status=client.V1PodStatus(
            phase="Running",
            pod_ip=f"10.0.0.{index + 1}",
            conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
        ),
    )


def test_after_a_rollback_only_pods_stuck_not_ready_on_another_revision_are_replaced(cluster, loop):
    cluster.pods = {
        p.metadata.name: p
        for p in (
            pod("stuck", "actor", 0, "r1", ready=False),
            pod("ready-old", "actor", 1, "r1", ready=True),
            pod("starting-new", "actor", 2, "r2", ready=False),
        )
    }
    driver = make_driver(cluster, loop, statefulsets=StatefulSets(statefulset("actor-sts", "actor")))
    driver.model = ReleaseModel(topology={"selector": OWN})
    assert driver.replace_stuck_pods() == ["stuck"]
    assert sorted(cluster.pods) == ["ready-old", "starting-new"]


def test_another_charts_statefulset_with_the_same_instance_label_keeps_its_stuck_pods(cluster, loop):
    """Argo CD labels what it syncs with app.kubernetes.io/instance too: only the chart's own labels select."""
    cluster.pods = {"theirs-0": pod("theirs-0", "actor", 0, "r1", ready=False, chart_labels=FOREIGN)}
    foreign = statefulset("theirs", "actor", chart_labels=FOREIGN)
    driver = make_driver(cluster, loop, statefulsets=StatefulSets(foreign))
    driver.model = ReleaseModel(topology={"selector": OWN})
    assert driver.replace_stuck_pods() == [] and list(cluster.pods) == ["theirs-0"]


def test_without_the_charts_selector_labels_no_pod_is_replaced(cluster, loop):
    cluster.pods = {"stuck": pod("stuck", "actor", 0, "r1", ready=False)}
    driver = make_driver(cluster, loop, statefulsets=StatefulSets(statefulset("actor-sts", "actor")))
    assert driver.replace_stuck_pods() == [] and list(cluster.pods) == ["stuck"]


def test_scaling_down_to_rank_zero_leaves_one_worker_per_statefulset(cluster, loop):
    statefulsets = StatefulSets(
        statefulset("actor-sts", "actor", replicas=4),
        statefulset("one", "actor", replicas=1),
        statefulset("theirs", "actor", replicas=3, chart_labels=FOREIGN),
    )
    cluster.pods = {"a0": pod("a0", "actor", 0, "r2", ready=True)}
    driver = make_driver(cluster, loop, statefulsets=statefulsets)
    driver.model = ReleaseModel(topology={"selector": OWN})
    driver.scale_down_to_rank_zero("actor")
    assert statefulsets.scaled == [("actor-sts", 1)]


def test_a_queued_workload_that_changes_is_deleted_before_the_revision_that_recreates_it(cluster, loop):
    """Kueue fixes a queued workload's shape while its StatefulSet exists: it is re-created, not updated."""
    queued = {**ACTOR, "kueue": {"queueName": "rl"}}
    statefulsets = StatefulSets(
        statefulset("actor-sts", "actor"),
        statefulset("critic-sts", "critic"),
        statefulset("theirs", "actor", chart_labels=FOREIGN),
    )
    driver = make_driver(cluster, loop, statefulsets=statefulsets, kueue_queue="rl")
    driver.apply(values(actor=queued, critic=CRITIC), "create", "actor")
    assert driver.requeue(values(actor={**queued, "replicas": 3}, critic=CRITIC)) == ["actor"]
    assert statefulsets.deleted == ["actor-sts"]
    assert cluster.waits[-1] == naming.selector(OWN, "actor")


def label_revision(cluster: MemoryCluster, role: str, revision: str) -> None:
    for each in cluster.pods.values():
        if each.metadata.labels[naming.LABEL_ROLE] == role:
            each.metadata.labels["controller-revision-hash"] = revision


def test_another_workloads_ready_pods_of_the_template_before_the_change_do_not_make_it_good(cluster, loop):
    """Two workloads changed and the trainer waited for one: the other's pods stay Ready on the earlier template
    until its rolling update replaces them, and they are not its workers yet."""
    statefulsets = StatefulSets(statefulset("critic-sts", "critic", update_revision="r2", replicas=1))
    driver = make_driver(cluster, loop, statefulsets=statefulsets)
    driver.apply(values(actor=ACTOR, critic=CRITIC), "create", "actor")
    label_revision(cluster, "critic", "r1")
    driver.confirm_ready("actor", [pod("a0", "actor", 0, "r2", ready=True)])
    assert driver.good_revision is None and cluster.ready_revision is None
    assert list(cluster.ready_pods) == ["actor"] and cluster.record_writes == 1  # the held pods alone
    label_revision(cluster, "critic", "r2")
    driver.confirm_ready("actor", [])
    assert driver.good_revision == 1 and cluster.ready_revision == 1


def test_a_statefulset_whose_controller_has_yet_to_see_its_spec_is_not_ready_and_is_not_waited_for(cluster, loop):
    """confirm_ready runs under the scheduler's lock: it reads the StatefulSet once and does not wait for its
    controller (an updateRevision of an unobserved spec may still name the earlier template)."""
    unobserved = statefulset("critic-sts", "critic", update_revision="r2", replicas=1)
    unobserved.status.observed_generation = 1
    statefulsets = StatefulSets(unobserved)
    driver = make_driver(cluster, loop, statefulsets=statefulsets)
    driver.apply(values(actor=ACTOR, critic=CRITIC), "create", "actor")
    label_revision(cluster, "critic", "r2")
    statefulsets.read_namespaced_stateful_set = lambda *_, **__: pytest.fail("confirm_ready waited for a controller")
    driver.confirm_ready("actor", [])
    assert driver.good_revision is None
    statefulsets.items["critic-sts"].status.observed_generation = 2
    driver.confirm_ready("actor", [])
    assert driver.good_revision == 1
