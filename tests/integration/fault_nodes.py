"""KWOK nodes of a test's own, for faults, drains and topology: tainted so only the roles pinned there run on them,
made NotReady as a silent kubelet's node would be, labelled as racks, and removed with their pods."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kubernetes.client.exceptions import ApiException

from clusterlib import HOLD


def fault_node(core, index: int, prefix: str) -> tuple[str, dict]:
    """A tainted KWOK node of its own, Ready, and the values that pin role "pinned" onto it."""
    from localkube.cluster import LocalCluster
    from localkube.nodes import NodeShape, node_manifest

    name = f"{prefix}-{os.getpid()}-{int(time.time() * 1000) % 100000}"
    manifest = node_manifest(index, NodeShape(), LocalCluster().ports.kwok)
    manifest["metadata"]["name"] = name
    manifest["metadata"]["labels"].update({"kubernetes.io/hostname": name, "areal-workers.dev/fault": name})
    manifest["spec"]["taints"] = [{"key": "areal-workers.dev/fault", "value": name, "effect": "NoSchedule"}]
    core.create_node(manifest)
    wait_node_ready(core, name)
    placement = {
        "roles": {
            "pinned": {
                "nodeSelector": {"areal-workers.dev/fault": name},
                "tolerations": [{"key": "areal-workers.dev/fault", "operator": "Exists", "effect": "NoSchedule"}],
            }
        }
    }
    return name, placement


RACK_MARK = "areal-workers.dev/topology-test"


@contextmanager
def rack_nodes(
    core, racks: dict[str, str], label: str, first_index: int, gpus: dict[str, int] | None = None
) -> Iterator[tuple[dict[str, str], dict]]:
    """KWOK nodes with 8 GPUs each (or `gpus`[suffix]), one per `racks` entry ({name suffix: rack}), labelled
    `label`=rack and tainted with a mark of their own; yields {node name: rack} and the role values that pin a role
    onto them (nodeSelector and toleration of the mark). The nodes and their pods are removed afterwards.
    `first_index` numbers the nodes' loopback pod ranges (127.20.INDEX.0/24): below 256, apart from the other tests'
    nodes (fault nodes: 250-253)."""
    assert first_index + len(racks) <= 250, "rack nodes take indexes below the fault nodes' 250-253"
    from localkube.cluster import LocalCluster
    from localkube.nodes import NodeShape, node_manifest

    mark = f"t{os.getpid()}-{int(time.time() * 1000) % 100000}"
    layout = {f"{mark}-{suffix}": rack for suffix, rack in racks.items()}
    shapes = [NodeShape(gpus=(gpus or {}).get(suffix, 8)) for suffix in racks]
    try:
        for index, (name, rack) in enumerate(layout.items()):
            manifest = node_manifest(first_index + index, shapes[index], LocalCluster().ports.kwok)
            manifest["metadata"]["name"] = name
            manifest["metadata"]["labels"].update({"kubernetes.io/hostname": name, label: rack, RACK_MARK: mark})
            manifest["spec"]["taints"] = [{"key": RACK_MARK, "value": mark, "effect": "NoSchedule"}]
            core.create_node(manifest)
        for name in layout:
            wait_node_ready(core, name)
        pinned = {
            "nodeSelector": {RACK_MARK: mark},
            "tolerations": [{"key": RACK_MARK, "operator": "Exists", "effect": "NoSchedule"}],
        }
        yield layout, pinned
    finally:
        for name in layout:
            remove_fault_node(core, name)


def remove_fault_node(core, name: str) -> None:
    """Deletes the node and force-deletes its pods: no kubelet is left to confirm their end, and Kubernetes' pod GC
    would take them only after its quarantine (the test's teardown would wait for it)."""
    pods = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={name}").items
    deletions = [lambda: core.delete_node(name)] + [
        lambda pod=pod: core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        for pod in pods
    ]
    for delete in deletions:
        try:
            delete()
        except ApiException as error:
            if error.status != 404:  # already gone
                raise


def make_node_not_ready(core, node_name: str) -> None:
    """KWOK stops managing the node (HOLD) and its status says what a node controller says of a silent kubelet.
    A heartbeat KWOK scheduled before HOLD landed still fires up to 20 s later (localkube/kwok-stages.yaml:
    node-heartbeat, 15 s + 5 s jitter) and reports Ready again, so the condition is written until it has read back
    Unknown for longer than that window."""
    core.patch_node(node_name, {"metadata": {"annotations": HOLD}})
    unknown_since, deadline = None, time.monotonic() + 120
    while unknown_since is None or time.monotonic() - unknown_since < 25:
        assert time.monotonic() < deadline, f"node {node_name} did not stay Ready=Unknown"
        ready = next(c for c in core.read_node_status(node_name).status.conditions if c.type == "Ready")
        if ready.status == "Unknown":
            unknown_since = unknown_since or time.monotonic()
        else:
            unknown_since = None
            core.patch_node_status(
                node_name,
                {
                    "status": {
                        "conditions": [
                            {
                                "type": "Ready",
                                "status": "Unknown",
                                "reason": "NodeStatusUnknown",
                                "message": "Kubelet stopped posting node status.",
                            }
                        ]
                    }
                },
            )
        time.sleep(0.5)


def wait_node_ready(core, name: str) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        node = core.read_node(name)
        if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or []):
            return
        time.sleep(0.2)
    raise AssertionError(f"node {name} not Ready")
