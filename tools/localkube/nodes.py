"""The fake nodes of a local cluster: their capacity and the Node objects KWOK manages."""

from __future__ import annotations

from dataclasses import dataclass

from localkube.settings import KUBELET_IP, KWOK_NODE_ANNOTATION, NODE_NAME_PREFIX, default_pod_octet


@dataclass(frozen=True)
class NodeShape:
    """Capacity of each fake node."""

    cpu: str = "64"
    memory: str = "512Gi"
    gpus: int = 8
    pods: int = 110
    gpu_resource: str = "nvidia.com/gpu"

    def capacity(self) -> dict[str, str]:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        if self.gpus:
            capacity[self.gpu_resource] = str(self.gpus)
        return capacity


def node_manifest(index: int, shape: NodeShape, kubelet_port: int, pod_octet: int | None = None) -> dict:
    """A KWOK-managed Node with its own loopback pod CIDR 127.<pod_octet>.<index>.0/24; its kubelet endpoint is
    KWOK's server."""
    name = f"{NODE_NAME_PREFIX}{index}"
    cidr = f"127.{default_pod_octet() if pod_octet is None else pod_octet}.{index}.0/24"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {KWOK_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {
            "capacity": shape.capacity(),
            "allocatable": shape.capacity(),
            "addresses": [
                {"type": "InternalIP", "address": KUBELET_IP},
                {"type": "Hostname", "address": name},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        },
    }
