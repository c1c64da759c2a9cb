"""The processes of a local cluster's components: started in sessions of their own with a pidfile and a log,
checked through their health endpoints, stopped with SIGTERM and, after their grace period, SIGKILL."""

from __future__ import annotations

import os
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from localkube.settings import ClusterError


@dataclass
class Component:
    name: str
    argv: list[str]
    state: Path
    health_url: str | None = None  # http(s)://... answering 200, or tcp://host:port accepting connections
    grace: float = 10.0  # seconds between SIGTERM and SIGKILL on stop
    env: dict[str, str] = field(default_factory=dict)  # added to the environment of `up`
    log: Path = field(init=False)
    pidfile: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = self.state / "logs" / f"{self.name}.log"
        self.pidfile = self.state / "pids" / f"{self.name}.pid"

    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text())
        except (FileNotFoundError, ValueError):
            return None
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        return pid

    def running_argv(self) -> list[str]:
        """The command line of the running process ([] when not running)."""
        pid = self.pid()
        try:
            return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1] if pid else []
        except OSError:
            return []

    def log_tail(self, lines: int = 25) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except FileNotFoundError:
            return "(no log)"


def start(component: Component) -> None:
    for directory in (component.log.parent, component.pidfile.parent):
        directory.mkdir(parents=True, exist_ok=True)
    with open(component.log, "ab") as log:
        process = subprocess.Popen(
            component.argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **component.env},
        )
    component.pidfile.write_text(str(process.pid))


def healthy(component: Component, pki: Path) -> bool:
    """The component's health endpoint answers 200 (the apiserver's checked with the admin certificate of `pki`)."""
    if component.health_url is None:
        return True
    if component.health_url.startswith("tcp://"):
        host, _, port = component.health_url.removeprefix("tcp://").rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=2).close()
        except OSError:
            return False
        return True
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if component.name.startswith("kube-apiserver"):  # the cluster's, or a second one (LocalCluster)
        context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    elif component.name == "apiserver-relay":  # the API server's public /readyz through it, its certificate checked
        pass
    elif component.health_url.startswith("https"):
        # controller-manager and scheduler serve /healthz with a self-signed certificate of their own.
        context = ssl._create_unverified_context()  # noqa: S323 - loopback health probe only
    try:
        with urllib.request.urlopen(component.health_url, timeout=2, context=context) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
        return False


def wait_healthy(component: Component, pki: Path, deadline: float) -> None:
    while time.monotonic() < deadline:
        if component.pid() is None:
            raise ClusterError(f"{component.name} exited during start-up; last log lines:\n{component.log_tail()}")
        if healthy(component, pki):
            return
        time.sleep(0.2)
    raise ClusterError(
        f"{component.name} not healthy at {component.health_url} in time; last log lines:\n{component.log_tail()}"
    )


def stop(components: list[Component]) -> None:
    """Stops the components in reverse order, each within its grace period."""
    for component in reversed(components):
        pid = component.pid()
        if pid is None:
            continue
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + component.grace
        while component.pid() is not None and time.monotonic() < deadline:
            _reap(pid)
            time.sleep(0.1)
        if component.pid() is not None:
            os.killpg(pid, signal.SIGKILL)
            while component.pid() is not None:
                _reap(pid)
                time.sleep(0.05)
        component.pidfile.unlink(missing_ok=True)


def _reap(pid: int) -> None:
    """Collects our own exited child so that kill(pid, 0) stops seeing a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def say(message: str) -> None:
    print(f"[localcluster] {message}", flush=True)
