"""Trials on a shared GPU cluster under Kueue: the local cluster's Kueue (`localcluster.py up --kueue`)
admits each queued role as one group; the scheduler reports where a role waits, fails a role that never fits, names
a preemption, and re-creates a queued role to resize or update it.

Each test gets a namespace labelled for Kueue (its webhooks act nowhere else), a ResourceFlavor, a ClusterQueue with
8 GPUs (the two KWOK nodes have 16: the quota binds, not the nodes) and a LocalQueue `lq`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from areal_workers import WorkerCreationError, WorkerFailedError, WorkerTimeoutError
from areal_workers.pods.admission import ADMISSION_GATE, GROUP, POD_GROUP_LABEL, VERSION
from clusterlib import job, spec, wait_for

# It loads or changes what every test shares: `make test` runs it alone (tools/test_lanes.py).
pytestmark = pytest.mark.serial_cluster

GPU = "nvidia.com/gpu"
QUEUE = "lq"
QUOTA_GPUS = 8


@pytest.fixture(scope="module")
def kueue(kubeconfig) -> None:
    """Kueue on the local cluster (started once; `make test` starts it with the cluster)."""
    if os.environ.get("AREAL_WORKERS_KUBECONFIG"):
        pytest.skip("needs the local cluster's Kueue (localcluster.py up --kueue)")
    from localkube.cluster import LocalCluster

    LocalCluster().up(kueue=True)


@pytest.fixture
def identity() -> str:
    """The schedulers run as the controller of rbac/: it must cover what the adapter does under Kueue."""
    return "rbac"


@pytest.fixture
def namespace(make_namespace, kueue) -> str:
    from localkube.addons.kueue import MANAGED_NAMESPACE_LABEL

    return make_namespace(labels={MANAGED_NAMESPACE_LABEL: "true"})


@pytest.fixture
def custom(kube_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)


@pytest.fixture
def quota(custom, namespace) -> Iterator[dict[str, str]]:
    """A ResourceFlavor, a ClusterQueue of QUOTA_GPUS GPUs (preempting lower priorities), its LocalQueue `lq`, and
    WorkloadPriorityClasses `low`/`high` (names made unique: cluster-scoped objects outlive the namespace)."""
    suffix = uuid.uuid4().hex[:6]
    names = {"flavor": f"gpu-{suffix}", "cq": f"cq-{suffix}", "low": f"low-{suffix}", "high": f"high-{suffix}"}
    quotas = {"cpu": "64", "memory": "512Gi", GPU: str(QUOTA_GPUS)}
    cluster_objects = [
        ("resourceflavors", {"metadata": {"name": names["flavor"]}, "spec": {}}),
        ("workloadpriorityclasses", {"metadata": {"name": names["low"]}, "value": 100}),
        ("workloadpriorityclasses", {"metadata": {"name": names["high"]}, "value": 1000}),
        (
            "clusterqueues",
            {
                "metadata": {"name": names["cq"]},
                "spec": {
                    "namespaceSelector": {},
                    "queueingStrategy": "BestEffortFIFO",
                    "preemption": {"withinClusterQueue": "LowerPriority"},
                    "resourceGroups": [
                        {
                            "coveredResources": list(quotas),
                            "flavors": [
                                {
                                    "name": names["flavor"],
                                    "resources": [
                                        {"name": name, "nominalQuota": value} for name, value in quotas.items()
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
        ),
    ]
    for plural, body in cluster_objects:
        custom.create_cluster_custom_object(
            GROUP, VERSION, plural, {"apiVersion": f"{GROUP}/{VERSION}", "kind": _kind(plural), **body}
        )
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "localqueues",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "LocalQueue",
            "metadata": {"name": QUEUE},
            "spec": {"clusterQueue": names["cq"]},
        },
    )
    yield names
    for plural, body in reversed(cluster_objects):  # the ClusterQueue's finalizer waits for its workloads to go
        custom.delete_cluster_custom_object(GROUP, VERSION, plural, body["metadata"]["name"])


def _kind(plural: str) -> str:
    return {
        "resourceflavors": "ResourceFlavor",
        "workloadpriorityclasses": "WorkloadPriorityClass",
        "clusterqueues": "ClusterQueue",
    }[plural]


def role_pods(core: client.CoreV1Api, namespace: str, trial: str, role: str = "actor") -> list[client.V1Pod]:
    return [
        pod
        for pod in core.list_namespaced_pod(namespace).items
        if (pod.metadata.labels or {}).get("areal.io/role") == role
        and f"-{trial}" in (pod.metadata.labels or {}).get("app.kubernetes.io/instance", "")
    ]


def gpu_holders(core: client.CoreV1Api, namespace: str, trial: str) -> list[str]:
    """Pods of the trial bound to a node (holding their GPUs there)."""
    return [pod.metadata.name for pod in role_pods(core, namespace, trial) if pod.spec.node_name]


def gpu_job(replicas: int, gpus: int):
    return job("actor", replicas, [spec(gpu=gpus)])


def test_two_trials_compete_for_gpus_the_second_waits_whole_then_is_admitted(make_scheduler, quota, core, namespace):
    first = make_scheduler("first", kueue_queue=QUEUE)
    first.create_workers(gpu_job(2, 4))
    assert len(first.get_workers("actor", timeout=120)) == 2  # admitted whole: 8 GPUs

    second = make_scheduler("second", kueue_queue=QUEUE)
    second.create_workers(gpu_job(2, 4))
    with pytest.raises(WorkerTimeoutError) as waited:
        second.get_workers("actor", timeout=6)
    diagnosis = waited.value.diagnosis
    assert f"queued in {QUEUE} (position 1 of 1, pending quota:" in diagnosis, diagnosis
    assert f"insufficient unused quota for {GPU}" in diagnosis, diagnosis
    pods = role_pods(core, namespace, "second")
    assert len(pods) == 2 and gpu_holders(core, namespace, "second") == []  # none holds a GPU while it waits
    assert all(ADMISSION_GATE in [gate.name for gate in pod.spec.scheduling_gates or []] for pod in pods)

    first.delete_workers()
    workers = second.get_workers("actor", timeout=120)
    assert len(workers) == 2 and len(gpu_holders(core, namespace, "second")) == 2


def test_a_role_larger_than_the_quota_fails_at_once_naming_the_quota(make_scheduler, quota, core, namespace):
    scheduler = make_scheduler("huge", kueue_queue=QUEUE)
    scheduler.create_workers(gpu_job(3, 4))  # 12 GPUs > the ClusterQueue's 8: never admissible
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("actor", timeout=300)  # fails long before this time-out
    message = str(failed.value)
    assert f"never admitted by {QUEUE}" in message and "maximum capacity (8)" in message, message
    assert "nominalQuota" in message  # says what to change
    # Nothing half-done: the change was rolled back (here: the release uninstalled), no pod left waiting.
    wait_for(lambda: not role_pods(core, namespace, "huge"), what="the huge trial's pods gone")


def test_an_unknown_local_queue_is_refused_before_anything_is_installed(make_scheduler, quota, core, namespace):
    scheduler = make_scheduler("lost", kueue_queue="no-such-queue")
    with pytest.raises(WorkerCreationError) as refused:
        scheduler.create_workers(gpu_job(1, 1))
    assert "LocalQueue 'no-such-queue' not found" in str(refused.value)
    assert not scheduler.driver.model.installed and not role_pods(core, namespace, "lost")


def test_a_higher_priority_trial_preempts_a_lower_one_and_the_adapter_says_preempted(
    make_scheduler, quota, core, namespace, custom
):
    low = make_scheduler("low", kueue_queue=QUEUE, kueue_priority_class=quota["low"])
    low.create_workers(gpu_job(2, 4))
    low_workers = low.get_workers("actor", timeout=120)

    high = make_scheduler("high", kueue_queue=QUEUE, kueue_priority_class=quota["high"])
    high.create_workers(gpu_job(2, 4))
    assert len(high.get_workers("actor", timeout=120)) == 2

    with pytest.raises(WorkerFailedError) as failed:
        low._check_alive(low_workers[0])  # what an engine call does before it retries
    assert "preempted by Kueue" in str(failed.value), str(failed.value)
    with pytest.raises(WorkerFailedError) as failed_again:
        low.get_workers("actor", timeout=60)
    assert "preempted by Kueue" in str(failed_again.value), str(failed_again.value)
    assert "exit code" not in str(failed_again.value).split("Stderr output:", 1)[-1]  # not reported as a crash


def test_scale_update_and_pod_fork_of_a_queued_role_recreate_it(make_scheduler, quota, core, namespace):
    scheduler = make_scheduler("resize", kueue_queue=QUEUE, fork_mode="pod")
    scheduler.create_workers(gpu_job(1, 2))
    scheduler.get_workers("actor", timeout=120)
    first_pod = {pod.metadata.uid for pod in role_pods(core, namespace, "resize")}

    scheduler.scale_workers("actor", 2)  # Kueue refuses a replica change of an admitted group: re-created
    assert len(scheduler.get_workers("actor", timeout=120)) == 2
    scaled = {pod.metadata.uid for pod in role_pods(core, namespace, "resize")}
    assert len(scaled) == 2 and not scaled & first_pod  # fresh workers, admitted together

    scheduler.update_workers(job("actor", 2, [spec(gpu=4, env_vars={"STEP": "2"})]))  # a new pod shape
    updated = scheduler.get_workers("actor", timeout=120)
    pods = role_pods(core, namespace, "resize")
    assert len(updated) == 2 and all(pod.spec.containers[0].resources.limits[GPU] == "4" for pod in pods)

    forked = scheduler.fork_workers("ref", "actor")  # a sibling StatefulSet: a group of its own in the same queue
    assert len(forked) == 2
    statefulsets = client.AppsV1Api(core.api_client).list_namespaced_stateful_set(namespace).items
    assert {s.metadata.labels.get("kueue.x-k8s.io/queue-name") for s in statefulsets} == {QUEUE}

    scheduler.update_workers(job("actor", 2, [spec(gpu=8)]))  # 16 GPUs: never fits; rolled back to 2 x 4
    with pytest.raises(WorkerFailedError, match="maximum capacity"):
        scheduler.get_workers("actor", timeout=300)
    assert len(scheduler.get_workers("actor", timeout=120)) == 2


def test_workload_of_a_queued_role_is_one_group(make_scheduler, quota, custom, core, namespace):
    scheduler = make_scheduler("group", kueue_queue=QUEUE)
    scheduler.create_workers(gpu_job(3, 2))
    scheduler.get_workers("actor", timeout=120)
    names = {pod.metadata.labels[POD_GROUP_LABEL] for pod in role_pods(core, namespace, "group")}
    assert len(names) == 1
    workload = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "workloads", names.pop())
    assert [p["count"] for p in workload["spec"]["podSets"]] == [3]


def test_without_the_workloads_rule_a_queued_role_waits_without_its_position(
    make_scheduler, quota, kube_client, namespace
):
    """The `workloads` rule of rbac/role.yaml (test_rbac_rules.py's TESTED_IN_TEST_KUEUE): without it the wait still
    works and times out, but no longer says where the role stands in its queue."""
    import yaml

    from repo_paths import REPO

    blocker = make_scheduler("blocker", kueue_queue=QUEUE)
    blocker.create_workers(gpu_job(2, 4))
    blocker.get_workers("actor", timeout=120)
    rules = yaml.safe_load((REPO / "rbac" / "role.yaml").read_text())["rules"]
    rbac = client.RbacAuthorizationV1Api(kube_client)
    role = rbac.read_namespaced_role("areal-controller", namespace)
    role.rules = [
        client.V1PolicyRule(api_groups=r["apiGroups"], resources=r["resources"], verbs=r["verbs"])
        for r in rules
        if "workloads" not in r["resources"]
    ]
    rbac.replace_namespaced_role("areal-controller", namespace, role)
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{namespace}:areal-controller",
            groups=["system:serviceaccounts", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, group=GROUP, resource="workloads", verb="get"
            ),
        )
    )
    wait_for(
        lambda: not client.AuthorizationV1Api(kube_client).create_subject_access_review(review).status.allowed,
        10,
        "the authorizer denying workloads",
    )

    waiting = make_scheduler("waiting", kueue_queue=QUEUE)
    waiting.create_workers(gpu_job(2, 4))
    with pytest.raises(WorkerTimeoutError) as waited:
        waiting.get_workers("actor", timeout=6)
    assert "queued in" not in waited.value.diagnosis and "SchedulingGated" in waited.value.diagnosis


def test_the_documented_queue_example_admits_a_role(make_scheduler, custom, namespace):
    """examples/kueue-queue.yaml (docs/*/kueue.md) on the real Kueue, its cluster-scoped names made unique and its
    LocalQueue moved into the test's namespace."""
    import yaml

    from repo_paths import REPO

    suffix = uuid.uuid4().hex[:6]
    documents = list(yaml.safe_load_all((REPO / "examples" / "kueue-queue.yaml").read_text()))
    kinds = {doc["kind"]: doc for doc in documents}
    assert set(kinds) == {"ResourceFlavor", "ClusterQueue", "LocalQueue"}
    flavor = kinds["ResourceFlavor"]["metadata"]["name"]
    kinds["ResourceFlavor"]["metadata"]["name"] = f"{flavor}-{suffix}"
    kinds["ClusterQueue"]["metadata"]["name"] += f"-{suffix}"
    for group in kinds["ClusterQueue"]["spec"]["resourceGroups"]:
        for entry in group["flavors"]:
            entry["name"] = f"{entry['name']}-{suffix}"
    kinds["LocalQueue"]["metadata"]["namespace"] = namespace
    kinds["LocalQueue"]["spec"]["clusterQueue"] = kinds["ClusterQueue"]["metadata"]["name"]
    plurals = {"ResourceFlavor": "resourceflavors", "ClusterQueue": "clusterqueues"}
    for kind in ("ResourceFlavor", "ClusterQueue"):
        custom.create_cluster_custom_object(GROUP, VERSION, plurals[kind], kinds[kind])
    try:
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", kinds["LocalQueue"])
        scheduler = make_scheduler("example", kueue_queue=kinds["LocalQueue"]["metadata"]["name"])
        scheduler.create_workers(gpu_job(2, 8))
        assert len(scheduler.get_workers("actor", timeout=120)) == 2
        scheduler.delete_workers()
    finally:
        for kind in ("ClusterQueue", "ResourceFlavor"):
            custom.delete_cluster_custom_object(GROUP, VERSION, plurals[kind], kinds[kind]["metadata"]["name"])


def test_stopping_kueue_takes_its_fail_closed_webhooks_away_first(namespace, core, kube_client):
    """With Kueue's webhook configurations left behind, a stopped Kueue would block every pod of a labelled
    namespace; `down` (stop_kueue) deletes them before it stops the process."""
    from localkube.addons.kueue import WEBHOOK_CONFIGURATIONS
    from localkube.cluster import LocalCluster

    cluster = LocalCluster()
    admission = client.AdmissionregistrationV1Api(kube_client)
    assert {c.metadata.name for c in admission.list_mutating_webhook_configuration().items} >= {
        name for kind, name in WEBHOOK_CONFIGURATIONS if kind.startswith("Mutating")
    }
    cluster.stop_kueue()
    try:
        assert cluster.kueue().pid() is None
        names = {c.metadata.name for c in admission.list_mutating_webhook_configuration().items} | {
            c.metadata.name for c in admission.list_validating_webhook_configuration().items
        }
        assert not names & {name for _, name in WEBHOOK_CONFIGURATIONS}
        pod = core.create_namespaced_pod(
            namespace,
            client.V1Pod(
                metadata=client.V1ObjectMeta(name="plain", labels={"kueue.x-k8s.io/queue-name": QUEUE}),
                spec=client.V1PodSpec(containers=[client.V1Container(name="c", image="x")]),
            ),
        )
        assert not pod.spec.scheduling_gates  # created, and not held by a Kueue that is gone
    finally:
        cluster.up(kueue=True)
