"""Argo CD beside a local cluster (`localcluster.py up --argocd`): redis, the repo-server and the application
controller as local processes on 127.0.0.1 (one `argocd` binary from `make tools`, linked under the names it
dispatches on), plus what an install's manifests would otherwise create: the namespace, the two CRDs, argocd-cm,
argocd-secret, the default AppProject and the cluster Secret of the local apiserver (the controller runs outside
the cluster, so `https://kubernetes.default.svc` means nothing to it: Applications name the apiserver's URL)."""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import time
from pathlib import Path
from typing import Any

import yaml

import localkube.processes as processes
from localkube.addons import Cluster
from localkube.processes import Component, say
from localkube.settings import ClusterError, Ports
from repo_paths import REPO, TOOLS_BIN

NAMESPACE = "argocd"
ETC = REPO / ".tools" / "etc" / "argocd"  # CRDs and the wrapper scripts repo-server runs from PATH
CRDS = ("application-crd.yaml", "appproject-crd.yaml")
CLUSTER_NAME = "local"
PART_OF = {"app.kubernetes.io/part-of": "argocd"}


def redis_server() -> str:
    path = shutil.which("redis-server")
    if path is None:
        raise ClusterError(
            "redis-server is missing: install Debian's redis-server (apt-get install redis-server; "
            "`make tools` does it as root)"
        )
    return path


def components(state: Path, ports: Ports, kubeconfig: Path) -> list[Component]:
    """redis, repo-server, application controller, in start order. Paths are not checked here (`down` builds
    these to stop them on a machine without Argo CD); check_installed() is called before a start."""
    home = state / "argocd"
    redis = f"127.0.0.1:{ports.argocd_redis}"
    # repo-server runs git, helm and the wrappers from PATH; its checkouts go to TMPDIR, inside the state.
    tool_env = {
        "PATH": f"{ETC}:{TOOLS_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "TMPDIR": str(home / "tmp"),
        "HOME": str(home / "home"),
        "ARGOCD_GPG_ENABLED": "false",
    }
    return [
        Component(
            "argocd-redis",
            [
                shutil.which("redis-server") or "redis-server",
                "--bind",
                "127.0.0.1",
                "--port",
                str(ports.argocd_redis),
                "--dir",
                str(home),
                "--save",
                "",
                "--appendonly",
                "no",
                "--protected-mode",
                "yes",
            ],
            state,
            health_url=f"tcp://{redis}",
        ),
        Component(
            "argocd-repo-server",
            [
                str(TOOLS_BIN / "argocd-repo-server"),
                f"--redis={redis}",
                "--address=127.0.0.1",
                f"--port={ports.argocd_repo_server}",
                "--metrics-address=127.0.0.1",
                f"--metrics-port={ports.argocd_repo_server_metrics}",
                # Plain gRPC on loopback; an empty client CA path turns mTLS off.
                "--disable-tls",
                "--client-ca-path=",
                "--loglevel=warn",
            ],
            state,
            health_url=f"http://127.0.0.1:{ports.argocd_repo_server_metrics}/healthz",
            env=tool_env,
        ),
        Component(
            "argocd-application-controller",
            [
                str(TOOLS_BIN / "argocd-application-controller"),
                f"--kubeconfig={kubeconfig}",
                f"--namespace={NAMESPACE}",
                f"--redis={redis}",
                f"--repo-server=127.0.0.1:{ports.argocd_repo_server}",
                "--repo-server-plaintext",
                # Its metrics listener is patched to 127.0.0.1 at build time (tools/install/tools.sh).
                f"--metrics-port={ports.argocd_controller_metrics}",
                "--status-processors=2",
                "--operation-processors=2",
                "--loglevel=warn",
            ],
            state,
            health_url=f"http://127.0.0.1:{ports.argocd_controller_metrics}/healthz",
            env=tool_env,
        ),
    ]


def check_installed() -> None:
    missing = [
        str(path)
        for path in (
            TOOLS_BIN / "argocd-repo-server",
            TOOLS_BIN / "argocd-application-controller",
            *(ETC / crd for crd in CRDS),
        )
        if not path.exists()
    ]
    if missing:
        raise ClusterError(f"Argo CD is not installed ({', '.join(missing)} missing): run `make tools`")
    redis_server()


def crd_files() -> list[Path]:
    return [ETC / crd for crd in CRDS]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def settings_manifests(server: str, pki: Path) -> list[dict[str, Any]]:
    """What an Argo CD install creates besides its workloads: namespace, argocd-cm, argocd-secret, the default
    AppProject (any repository, any destination) and the cluster Secret holding the apiserver's URL and the admin
    client certificate."""
    tls = {
        "caData": _b64((pki / "ca.crt").read_bytes()),
        "certData": _b64((pki / "admin.crt").read_bytes()),
        "keyData": _b64((pki / "admin.key").read_bytes()),
    }
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "argocd-cm", "namespace": NAMESPACE, "labels": PART_OF},
            "data": {},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "argocd-secret", "namespace": NAMESPACE, "labels": PART_OF},
            "stringData": {"server.secretkey": secrets.token_urlsafe(32)},
        },
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "AppProject",
            "metadata": {"name": "default", "namespace": NAMESPACE},
            "spec": {
                "sourceRepos": ["*"],
                "destinations": [{"server": "*", "namespace": "*"}],
                "clusterResourceWhitelist": [{"group": "*", "kind": "*"}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": f"cluster-{CLUSTER_NAME}",
                "namespace": NAMESPACE,
                "labels": {**PART_OF, "argocd.argoproj.io/secret-type": "cluster"},
            },
            "stringData": {"name": CLUSTER_NAME, "server": server, "config": json.dumps({"tlsClientConfig": tls})},
        },
    ]


def ensure(cluster: Cluster, timeout: float = 120.0) -> None:
    """Starts Argo CD on the running control plane unless it answers already: its settings objects are applied
    first (idempotent), then redis, repo-server and the application controller."""
    argocd_components = components(cluster.state, cluster.ports, cluster.kubeconfig)
    if all(c.pid() is not None and cluster.healthy(c) for c in argocd_components):
        say("Argo CD already running")
        return
    check_installed()
    processes.stop(argocd_components)
    for directory in ("argocd/tmp", "argocd/home"):
        (cluster.state / directory).mkdir(parents=True, exist_ok=True)
    cluster.kubectl("apply", "--server-side", "--force-conflicts", *(f"--filename={crd}" for crd in crd_files()))
    _wait_established(cluster, ["applications.argoproj.io", "appprojects.argoproj.io"], time.monotonic() + 60)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(settings_manifests(cluster.server, cluster.pki)))
    deadline = time.monotonic() + timeout
    for component in argocd_components:
        started = time.monotonic()
        processes.start(component)
        cluster.wait_healthy(component, deadline)
        say(f"{component.name} ready ({time.monotonic() - started:.1f}s)")


def _wait_established(cluster: Cluster, crds: list[str], deadline: float) -> None:
    """(`kubectl wait` and a jsonpath filter fail outright on a CRD whose status has no conditions yet, as just
    after its creation.)"""

    def established(crd: str) -> bool:
        status = json.loads(cluster.kubectl("get", f"crd/{crd}", "-o=json")).get("status") or {}
        return any(c["type"] == "Established" and c["status"] == "True" for c in status.get("conditions") or [])

    while not all(established(crd) for crd in crds):
        if time.monotonic() > deadline:
            raise ClusterError(f"CRDs {', '.join(crds)} not Established in time")
        time.sleep(0.2)
