"""What a local cluster runs on request, beside its own components: Kueue (`up --kueue`) and Argo CD
(`up --argocd`). Each add-on is its processes' command lines, the objects it needs in the cluster, and ensure()
(and, for Kueue, stop()), which reach the cluster through Cluster alone."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from localkube.processes import Component
from localkube.settings import Ports


class Cluster(Protocol):
    """The part of LocalCluster an add-on uses."""

    state: Path
    pki: Path
    ports: Ports
    server: str
    kubeconfig: Path

    def kubectl(self, *args: str, input: str | None = None) -> str: ...

    def healthy(self, component: Component) -> bool: ...

    def wait_healthy(self, component: Component, deadline: float) -> None: ...

    def apiserver_healthy(self) -> bool: ...
