"""The local cluster's OCI registry (`localcluster.py up --registry`): the distribution project's registry on
127.0.0.1, serving TLS with a certificate of the cluster's CA and asking for a password (htpasswd, bcrypt), its blobs
in the cluster's state directory. `make release REGISTRY=...` pushes the chart and the images there; helm installs
the chart from it and the real node's containerd pulls the images from it, both trusting the cluster's CA.

The one account is `areal` with a random password made at the first start (`credentials()`; the tests read it from
there, and `localcluster.py registry` prints how to log in).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

import localkube.processes as processes
from localkube.addons import Cluster
from localkube.pki import issue_cert
from localkube.processes import Component, say
from localkube.settings import Ports, binary

USER = "areal"
CERT_NAME = "registry"  # registry.crt / registry.key in the cluster's pki directory


@dataclass(frozen=True)
class Credentials:
    address: str  # host:port, as image references and `helm registry login` name it
    username: str
    password: str
    ca_file: Path  # the cluster's CA, which signed the registry's certificate


def registry_dir(state: Path) -> Path:
    return state / "registry"


def address(ports: Ports) -> str:
    return f"127.0.0.1:{ports.registry}"


def configuration(state: Path, pki: Path, ports: Ports) -> dict:
    """The registry's config.yml: loopback only, TLS, htpasswd, deletes allowed (tests move and remove tags)."""
    directory = registry_dir(state)
    return {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(directory / "data")}, "delete": {"enabled": True}},
        "http": {
            "addr": address(ports),
            "tls": {"certificate": str(pki / f"{CERT_NAME}.crt"), "key": str(pki / f"{CERT_NAME}.key")},
        },
        "auth": {"htpasswd": {"realm": "areal-workers local registry", "path": str(directory / "htpasswd")}},
    }


def component(state: Path, pki: Path, ports: Ports) -> Component:
    return Component(
        "registry",
        [binary("registry"), "serve", str(registry_dir(state) / "config.yml")],
        state,
        health_url=f"tcp://{address(ports)}",
    )


def credentials(state: Path, pki: Path, ports: Ports) -> Credentials:
    password = (registry_dir(state) / "password").read_text().strip()
    return Credentials(address(ports), USER, password, pki / "ca.crt")


def _write_files(state: Path, pki: Path, ports: Ports) -> None:
    # Imported here: localkube.cluster is also imported by AReaL's interpreter (the demo), which has no bcrypt.
    import bcrypt

    directory = registry_dir(state)
    (directory / "data").mkdir(parents=True, exist_ok=True)
    password_file = directory / "password"
    if not password_file.exists():
        password_file.write_text(secrets.token_urlsafe(18) + "\n")
        password_file.chmod(0o600)
    password = password_file.read_text().strip().encode()
    hashed = bcrypt.hashpw(password, bcrypt.gensalt(rounds=10)).decode()
    (directory / "htpasswd").write_text(f"{USER}:{hashed}\n")
    if not (pki / f"{CERT_NAME}.crt").exists():
        issue_cert(pki, CERT_NAME, "/CN=areal-workers-registry", sans="IP:127.0.0.1,DNS:localhost")
    (directory / "config.yml").write_text(yaml.safe_dump(configuration(state, pki, ports), sort_keys=False))


def ensure(cluster: Cluster, timeout: float) -> None:
    """Starts the registry unless it answers already."""
    registry = component(cluster.state, cluster.pki, cluster.ports)
    if registry.pid() is not None and cluster.healthy(registry):
        say("registry already running")
        return
    processes.stop([registry])
    _write_files(cluster.state, cluster.pki, cluster.ports)
    started = time.monotonic()
    processes.start(registry)
    cluster.wait_healthy(registry, started + timeout)
    say(f"registry ready at {address(cluster.ports)} ({time.monotonic() - started:.1f}s)")
