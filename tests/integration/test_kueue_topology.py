"""Kueue's Topology Aware Scheduling through the chart's kueue.requiredTopology: the local cluster's Kueue places a
queued role's workers in one rack of a Topology, and the capacity check refuses a role no rack could ever hold.

The racks are KWOK nodes of the test's own (fault_nodes.rack_nodes: two in rack a, one in rack b, 8 GPUs each), a
Topology of two levels (rack, then host) and a ResourceFlavor on those nodes naming it; a ClusterQueue with room for
every GPU of them and the LocalQueue `lq` in a namespace Kueue manages. The scheduler runs as the cluster's admin:
the capacity check reads the nodes, which rbac/'s namespaced controller may not list.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client

from areal_workers import WorkerCreationError
from areal_workers.pods.admission import GROUP, VERSION
from clusterlib import job, spec
from fault_nodes import RACK_MARK, rack_nodes

pytestmark = pytest.mark.serial_cluster

RACK = "topology.areal-workers.dev/kueue-rack"
QUEUE = "lq"


@pytest.fixture
def namespace(make_namespace, kubeconfig) -> str:
    if os.environ.get("AREAL_WORKERS_KUBECONFIG"):
        pytest.skip("needs the local cluster's Kueue (localcluster.py up --kueue)")
    from localkube.addons.kueue import MANAGED_NAMESPACE_LABEL
    from localkube.cluster import LocalCluster

    LocalCluster().up(kueue=True)
    return make_namespace(labels={MANAGED_NAMESPACE_LABEL: "true"})


@pytest.fixture
def custom(kube_client) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_client)


@pytest.fixture
def racks(core):
    with rack_nodes(core, {"a1": "a", "a2": "a", "b1": "b"}, RACK, first_index=244) as made:
        yield made


@pytest.fixture
def topology_queue(custom, namespace, racks) -> Iterator[None]:
    layout, pinned = racks
    suffix = uuid.uuid4().hex[:6]
    mark = pinned["nodeSelector"][RACK_MARK]
    objects = [
        (
            "topologies",
            "Topology",
            {
                "metadata": {"name": f"racks-{suffix}"},
                "spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]},
            },
        ),
        (
            "resourceflavors",
            "ResourceFlavor",
            {
                "metadata": {"name": f"racks-{suffix}"},
                "spec": {
                    "nodeLabels": {RACK_MARK: mark},
                    "topologyName": f"racks-{suffix}",
                    "tolerations": pinned["tolerations"],
                },
            },
        ),
        (
            "clusterqueues",
            "ClusterQueue",
            {
                "metadata": {"name": f"tas-{suffix}"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": f"racks-{suffix}",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": "192"},
                                        {"name": "memory", "nominalQuota": "1536Gi"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": "24"},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
        ),
    ]
    for plural, kind, body in objects:
        custom.create_cluster_custom_object(
            GROUP, VERSION, plural, {"apiVersion": f"{GROUP}/{VERSION}", "kind": kind, **body}
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
            "spec": {"clusterQueue": f"tas-{suffix}"},
        },
    )
    yield
    for plural, _, body in reversed(objects):
        custom.delete_cluster_custom_object(GROUP, VERSION, plural, body["metadata"]["name"])


def test_kueue_places_a_queued_role_in_the_one_rack_that_holds_it(
    make_scheduler, core, custom, namespace, racks, topology_queue
):
    layout, pinned = racks
    queued = {**pinned, "kueue": {"queueName": QUEUE, "requiredTopology": RACK}}
    scheduler = make_scheduler(extra_values={"roles": {"actor": queued}})

    with pytest.raises(WorkerCreationError) as refused:
        scheduler.create_workers(job("actor", 3, [spec(gpu=8)]))
    assert (
        f"role actor must run its 3 workers in one domain of node label {RACK} (kueue.requiredTopology), but no "
        "domain could ever hold more than 2"
    ) in str(refused.value)

    scheduler.create_workers(job("actor", 2, [spec(gpu=8)]))
    workers = scheduler.get_workers("actor", timeout=180)
    assert len(workers) == 2
    pods = [
        p
        for p in core.list_namespaced_pod(namespace).items
        if (p.metadata.labels or {}).get("areal.io/role") == "actor"
    ]
    assert sorted(layout[pod.spec.node_name] for pod in pods) == ["a", "a"]  # rack b holds one: Kueue chose rack a
    # Kueue placed them (the chart pins them to the test's nodes only): ungating, it gave each pod the node selector
    # of the domain it assigned, and the role's Workload records the assignment.
    assert all(set(pod.spec.node_selector) - {RACK_MARK} for pod in pods), [pod.spec.node_selector for pod in pods]
    workloads = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["items"]
    assignments = [a for w in workloads for a in w["status"]["admission"]["podSetAssignments"]]
    assert all(a.get("topologyAssignment") for a in assignments), assignments
