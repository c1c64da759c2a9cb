"""Where a local cluster lives and how it is addressed: paths, ports, loopback addresses, the environment variables
that place a second cluster beside the first, and the choice of worker server."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from repo_paths import AREAL_WORKER_PYTHON, REPO, TOOLS_BIN

STATE_DIR = REPO / ".tools" / "cluster"
ADMIN_KUBECONFIG = REPO / ".tools" / "kubeconfig"
KWOK_STAGES = Path(__file__).resolve().parent / "kwok-stages.yaml"
PORT_BASE_VARIABLE = "AREAL_WORKERS_CLUSTER_PORT_BASE"
STATE_DIR_VARIABLE = "AREAL_WORKERS_CLUSTER_DIR"
POD_OCTET_VARIABLE = "AREAL_WORKERS_CLUSTER_POD_OCTET"
WORKERS_VARIABLE = "AREAL_WORKERS_WORKER"
WORKER_SERVERS = ("auto", "areal", "reference")

# Loopback only (see docs): the Service range must never be a routable private range.
SERVICE_CIDR = "127.96.0.0/16"
KUBERNETES_SERVICE_IP = "127.96.0.1"
NODE_NAME_PREFIX = "kwok-node-"
# Every fake node's InternalIP: KWOK serves the kubelet API (container logs) there, so the apiserver reaches it.
KUBELET_IP = "127.19.0.1"
KWOK_CRDS = REPO / ".tools" / "etc" / "kwok"
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"


class ClusterError(RuntimeError):
    """The local cluster could not be started, checked or stopped; the message says what to do."""


@dataclass(frozen=True)
class Ports:
    base: int = field(default_factory=lambda: int(os.environ.get(PORT_BASE_VARIABLE, "16440")))

    @property
    def apiserver(self) -> int:
        return self.base + 3

    @property
    def etcd_client(self) -> int:
        return self.base

    @property
    def etcd_peer(self) -> int:
        return self.base + 1

    @property
    def second_apiserver(self) -> int:
        return self.base + 8

    @property
    def controller_manager(self) -> int:
        return self.base + 4

    @property
    def scheduler(self) -> int:
        return self.base + 5

    @property
    def kwok(self) -> int:
        return self.base + 6

    @property
    def podrunner(self) -> int:
        return self.base + 7

    # Kueue (`up --kueue`, localkube/addons/kueue.py): well above the control plane's, so other additions fit below.
    @property
    def kueue_webhook(self) -> int:
        return self.base + 20

    @property
    def kueue_health(self) -> int:
        return self.base + 21

    @property
    def kueue_metrics(self) -> int:
        return self.base + 22

    # Argo CD (`up --argocd`, localkube/addons/argocd.py), well above the control plane's ports.
    @property
    def argocd_redis(self) -> int:
        return self.base + 40

    @property
    def argocd_repo_server(self) -> int:
        return self.base + 41

    @property
    def argocd_repo_server_metrics(self) -> int:
        return self.base + 42

    @property
    def argocd_controller_metrics(self) -> int:
        return self.base + 43

    # The OCI registry (`up --registry`, localkube/addons/registry.py).
    @property
    def registry(self) -> int:
        return self.base + 50

    def all(self) -> dict[str, tuple[str, int]]:
        """Component -> (address, port) it listens on."""
        return {
            "etcd": ("127.0.0.1", self.etcd_client),
            "etcd-peer": ("127.0.0.1", self.etcd_peer),
            "kube-apiserver": ("127.0.0.1", self.apiserver),
            "kube-apiserver-second": ("127.0.0.1", self.second_apiserver),
            "kube-controller-manager": ("127.0.0.1", self.controller_manager),
            "kube-scheduler": ("127.0.0.1", self.scheduler),
            "kwok": (KUBELET_IP, self.kwok),
            "podrunner": ("127.0.0.1", self.podrunner),
            "kueue-webhook": ("127.0.0.1", self.kueue_webhook),
            "kueue-health": ("127.0.0.1", self.kueue_health),
            "kueue-metrics": ("127.0.0.1", self.kueue_metrics),
            "argocd-redis": ("127.0.0.1", self.argocd_redis),
            "argocd-repo-server": ("127.0.0.1", self.argocd_repo_server),
            "argocd-repo-server-metrics": ("127.0.0.1", self.argocd_repo_server_metrics),
            "argocd-application-controller-metrics": ("127.0.0.1", self.argocd_controller_metrics),
            "registry": ("127.0.0.1", self.registry),
        }


def default_state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_VARIABLE) or STATE_DIR).resolve()


def default_pod_octet() -> int:
    octet = int(os.environ.get(POD_OCTET_VARIABLE, "20"))
    if not 20 <= octet <= 95:  # 127.19: node addresses, 127.96: Services
        raise ValueError(f"{POD_OCTET_VARIABLE}={octet}: expected 20..95")
    return octet


def resolve_worker_server(choice: str | None) -> str:
    """ "areal" or "reference" for `choice` (default $AREAL_WORKERS_WORKER, else auto): auto is AReaL's real
    rpc_server when `make areal-worker` installed it, else the reference guard."""
    choice = choice or os.environ.get(WORKERS_VARIABLE) or "auto"
    if choice not in WORKER_SERVERS:
        raise ClusterError(f"worker server {choice!r}: expected one of {', '.join(WORKER_SERVERS)}")
    if choice == "auto":
        return "areal" if AREAL_WORKER_PYTHON.exists() else "reference"
    if choice == "areal" and not AREAL_WORKER_PYTHON.exists():
        raise ClusterError(f"{AREAL_WORKER_PYTHON} is missing: run `make areal-worker` (or use --workers reference)")
    return choice


def binary(name: str) -> str:
    """The path of a tool `make tools` installed (etcd, kube-apiserver, kubectl, kwok, ...)."""
    path = TOOLS_BIN / name
    if not os.access(path, os.X_OK):
        raise ClusterError(f"{path} is missing: run `make tools` first")
    return str(path)
