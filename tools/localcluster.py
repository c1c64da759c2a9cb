"""A real Kubernetes control plane on 127.0.0.1 for the tests and the demo.

etcd, kube-apiserver (RBAC + PodSecurity admission), kube-controller-manager and kube-scheduler run as
local processes built by `make tools`; KWOK plays the kubelet of fake nodes whose pods get loopback IPs
(127.20.<node>.x), so nothing ever connects off the machine, and podrunner (tools/podrunner.py) plays the
kubelet's other half: it runs the pods' commands as local processes, for every namespace but those a test
runs itself. State lives under .tools/cluster/ and is wiped by `down`, so every `up` after a `down` starts
from an empty etcd and no process of the cluster or of its pods is left.

    python tools/localcluster.py up [--nodes 2 --cpu 64 --memory 512Gi --gpus 8 --pods 110]
                                    [--workers auto|areal|reference]
    python tools/localcluster.py down
    python tools/localcluster.py status
    python tools/localcluster.py kubeconfig
    python tools/localcluster.py sa-kubeconfig NAMESPACE SERVICEACCOUNT OUT

A second cluster beside the first: set AREAL_WORKERS_CLUSTER_PORT_BASE (ports), AREAL_WORKERS_CLUSTER_DIR
(state; its admin kubeconfig is written inside it) and AREAL_WORKERS_CLUSTER_POD_OCTET (pods get
127.<octet>.<node>.x; default 20) to values of its own.
"""

from __future__ import annotations

import argparse
import base64
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
TOOLS_BIN = REPO_ROOT / ".tools" / "bin"
STATE_DIR = REPO_ROOT / ".tools" / "cluster"
ADMIN_KUBECONFIG = REPO_ROOT / ".tools" / "kubeconfig"
KWOK_STAGES = REPO_ROOT / "tools" / "kwok" / "stages.yaml"
PODRUNNER = REPO_ROOT / "tools" / "podrunner.py"
AREAL_WORKER_PYTHON = REPO_ROOT / ".tools" / "areal-worker" / "bin" / "python"
VENV_PYTHON = REPO_ROOT / ".venv" / "bin" / "python"
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
KWOK_CRDS = REPO_ROOT / ".tools" / "etc" / "kwok"
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

    def all(self) -> dict[str, tuple[str, int]]:
        """Component -> (address, port) it listens on."""
        return {
            "etcd": ("127.0.0.1", self.etcd_client),
            "etcd-peer": ("127.0.0.1", self.etcd_peer),
            "kube-apiserver": ("127.0.0.1", self.apiserver),
            "kube-controller-manager": ("127.0.0.1", self.controller_manager),
            "kube-scheduler": ("127.0.0.1", self.scheduler),
            "kwok": (KUBELET_IP, self.kwok),
            "podrunner": ("127.0.0.1", self.podrunner),
        }


def default_state_dir() -> Path:
    return Path(os.environ.get(STATE_DIR_VARIABLE) or STATE_DIR).resolve()


def default_pod_octet() -> int:
    octet = int(os.environ.get(POD_OCTET_VARIABLE, "20"))
    if not 20 <= octet <= 95:  # 127.19: node addresses, 127.96: Services
        raise ValueError(f"{POD_OCTET_VARIABLE}={octet}: expected 20..95")
    return octet


def resolve_worker_server(choice: str | None) -> str:
    """"areal" or "reference" for `choice` (default $AREAL_WORKERS_WORKER, else auto): auto is AReaL's real
    rpc_server when `make areal-worker` installed it, else the reference guard."""
    choice = choice or os.environ.get(WORKERS_VARIABLE) or "auto"
    if choice not in WORKER_SERVERS:
        raise ClusterError(f"worker server {choice!r}: expected one of {', '.join(WORKER_SERVERS)}")
    if choice == "auto":
        return "areal" if AREAL_WORKER_PYTHON.exists() else "reference"
    if choice == "areal" and not AREAL_WORKER_PYTHON.exists():
        raise ClusterError(f"{AREAL_WORKER_PYTHON} is missing: run `make areal-worker` (or use --workers reference)")
    return choice


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


@dataclass
class Component:
    name: str
    argv: list[str]
    state: Path
    health_url: str | None = None
    grace: float = 10.0  # seconds between SIGTERM and SIGKILL on stop
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


def _binary(name: str) -> str:
    path = TOOLS_BIN / name
    if not os.access(path, os.X_OK):
        raise ClusterError(f"{path} is missing: run `make tools` first")
    return str(path)


def _openssl(pki: Path, *args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=pki)


APISERVER_SANS = (f"IP:127.0.0.1,IP:{KUBERNETES_SERVICE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
                  "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")


def _issue_cert(pki: Path, name: str, subject: str, *, sans: str | None = None) -> None:
    """A key and a certificate signed by the cluster CA: a serving certificate for `sans`, else a client one."""
    ext = pki / f"{name}.ext"
    if sans:
        ext.write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
    else:
        ext.write_text("extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
    _openssl(pki, "req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-subj", subject,
             "-out", f"{name}.csr")
    _openssl(pki, "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "365", "-extfile", ext.name, "-out", f"{name}.crt")


def _ensure_pki(pki: Path) -> None:
    if (pki / "done").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    _openssl(pki, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "365", "-subj", "/CN=areal-workers-local-ca")
    _issue_cert(pki, "apiserver", "/CN=kube-apiserver", sans=APISERVER_SANS)
    _issue_cert(pki, "kubelet", "/CN=kwok-kubelet", sans=f"IP:{KUBELET_IP}")
    _issue_cert(pki, "admin", "/O=system:masters/CN=areal-workers-admin")
    _issue_cert(pki, "controller-manager", "/CN=system:kube-controller-manager")
    _issue_cert(pki, "scheduler", "/CN=system:kube-scheduler")
    # KWOK updates status of nodes and pods it does not own: it acts as every fake kubelet at once. podrunner,
    # the kubelets' other half, uses the same identity.
    _issue_cert(pki, "kwok", "/O=system:masters/CN=kwok-controller")
    _openssl(pki, "genrsa", "-out", "sa.key", "2048")
    _openssl(pki, "rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    (pki / "done").write_text("")


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _kubeconfig(ca: Path, user: str, credentials: dict, server: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "areal-workers-local", "cluster": {
            "server": server, "certificate-authority-data": _b64(ca)}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": f"{user}@areal-workers-local",
                      "context": {"cluster": "areal-workers-local", "user": user}}],
        "current-context": f"{user}@areal-workers-local",
    }


def _cert_kubeconfig(pki: Path, cert: str, path: Path, server: str) -> Path:
    credentials = {"client-certificate-data": _b64(pki / f"{cert}.crt"), "client-key-data": _b64(pki / f"{cert}.key")}
    path.write_text(yaml.safe_dump(_kubeconfig(pki / "ca.crt", cert, credentials, server)))
    path.chmod(0o600)
    return path


class LocalCluster:
    """Starts, checks and stops the local control plane and its podrunner; safe to start twice."""

    def __init__(self, ports: Ports | None = None, state_dir: Path | None = None, pod_octet: int | None = None) -> None:
        self.ports = ports or Ports()
        self.state = (state_dir or default_state_dir()).resolve()
        self.pod_octet = default_pod_octet() if pod_octet is None else pod_octet
        self.server = f"https://127.0.0.1:{self.ports.apiserver}"
        # The default cluster's kubeconfig is .tools/kubeconfig (Makefile, docs); another's lives in its state.
        self.kubeconfig = ADMIN_KUBECONFIG if self.state == STATE_DIR.resolve() else self.state / "kubeconfig"
        self.pki = self.state / "pki"
        self.pod_logs = self.state / "pods"

    # --- components ------------------------------------------------------------------------------

    def control_plane(self) -> list[Component]:
        pki = self.pki
        p = self.ports
        kubeconfigs = self.state / "kubeconfigs"
        etcd_url = f"http://127.0.0.1:{p.etcd_client}"
        return [
            Component("etcd", [
                _binary("etcd"), "--name=local", f"--data-dir={self.state / 'etcd'}",
                f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                f"--initial-cluster=local=http://127.0.0.1:{p.etcd_peer}",
                # Test clusters are thrown away: durability buys nothing and fsync costs seconds per test.
                "--unsafe-no-fsync=true", "--quota-backend-bytes=8589934592", "--log-level=warn",
            ], self.state, health_url=f"{etcd_url}/health"),
            Component("kube-apiserver", [
                _binary("kube-apiserver"), f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1", f"--secure-port={p.apiserver}",
                f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,PodSecurity,LimitRanger,"
                "ResourceQuota,DefaultStorageClass,DefaultTolerationSeconds,NodeRestriction,Priority",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # The Endpoints of the `kubernetes` Service would carry a loopback IP, which validation rejects.
                "--endpoint-reconciler-type=none",
                # Container logs come from KWOK's kubelet API on the nodes' InternalIP, over verified TLS.
                "--kubelet-preferred-address-types=InternalIP",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
                f"--kubelet-client-certificate={pki / 'admin.crt'}", f"--kubelet-client-key={pki / 'admin.key'}",
                "--allow-privileged=true", "--profiling=false", "--v=1",
            ], self.state, health_url=f"{self.server}/readyz"),
            Component("kube-controller-manager", [
                _binary("kube-controller-manager"),
                f"--kubeconfig={kubeconfigs / 'controller-manager.yaml'}",
                f"--authentication-kubeconfig={kubeconfigs / 'controller-manager.yaml'}",
                f"--authorization-kubeconfig={kubeconfigs / 'controller-manager.yaml'}",
                "--bind-address=127.0.0.1", f"--secure-port={p.controller_manager}",
                f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=true", "--leader-elect=false",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--profiling=false", "--v=1",
            ], self.state, health_url=f"https://127.0.0.1:{p.controller_manager}/healthz"),
            Component("kube-scheduler", [
                _binary("kube-scheduler"),
                f"--kubeconfig={kubeconfigs / 'scheduler.yaml'}",
                f"--authentication-kubeconfig={kubeconfigs / 'scheduler.yaml'}",
                f"--authorization-kubeconfig={kubeconfigs / 'scheduler.yaml'}",
                "--bind-address=127.0.0.1", f"--secure-port={p.scheduler}", "--leader-elect=false",
                "--profiling=false", "--v=1",
            ], self.state, health_url=f"https://127.0.0.1:{p.scheduler}/healthz"),
            Component("kwok", [
                _binary("kwok"), f"--kubeconfig={kubeconfigs / 'kwok.yaml'}", f"--config={KWOK_STAGES}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--node-ip={KUBELET_IP}", "--cidr=127.21.0.0/16",
                f"--server-address={KUBELET_IP}:{p.kwok}", "--node-lease-duration-seconds=40",
                f"--tls-cert-file={pki / 'kubelet.crt'}", f"--tls-private-key-file={pki / 'kubelet.key'}",
                # Logs objects map a pod's containers to log files (tools/podrunner.py writes them).
                "--enable-crds=Logs",
            ], self.state, health_url=f"http://{KUBELET_IP}:{p.kwok}/healthz"),
        ]

    def podrunner(self, workers: str = "reference") -> Component:
        """The kubelets' process side: one runner for every namespace not labelled private (tools/podrunner.py)."""
        python = VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable)
        return Component("podrunner", [
            str(python), str(PODRUNNER), f"--kubeconfig={self.state / 'kubeconfigs' / 'kwok.yaml'}",
            f"--log-dir={self.pod_logs}", f"--workers={workers}", f"--ledger={self.state / 'podrunner'}",
            f"--health=127.0.0.1:{self.ports.podrunner}",
        ], self.state, health_url=f"http://127.0.0.1:{self.ports.podrunner}/healthz", grace=30.0)

    def components(self) -> list[Component]:
        """Everything `up` starts, in start order."""
        return [*self.control_plane(), self.podrunner(self.podrunner_workers() or "reference")]

    def podrunner_workers(self) -> str | None:
        """The worker server of the running podrunner ("areal" or "reference"), None when it does not run."""
        flags = [arg for arg in self.podrunner().running_argv() if arg.startswith("--workers=")]
        return flags[0].split("=", 1)[1] if flags else None

    # --- lifecycle -------------------------------------------------------------------------------

    def is_running(self) -> bool:
        components = self.components()
        return (all(c.pid() is not None for c in components) and self._healthy(components[1])
                and self._healthy(components[-1]))

    def up(self, nodes: int = 2, shape: NodeShape | None = None, timeout: float = 120.0,
           workers: str | None = None) -> None:
        """Starts what is not running. `workers` (auto, areal, reference) restarts a podrunner that runs another
        worker server; without it a running podrunner is kept and a new one takes $AREAL_WORKERS_WORKER or auto."""
        shape = shape or NodeShape()
        if self._control_plane_running():
            _say("control plane already running")
        else:
            self._start_control_plane(time.monotonic() + timeout)
        self.ensure_nodes(nodes, shape, timeout)
        self._ensure_podrunner(workers, time.monotonic() + timeout)
        _say(f"kubeconfig: {self.kubeconfig}")

    def down(self) -> None:
        self._stop_processes(self.components())
        self._kill_leftover_workers()
        busy = [f"{name} ({host}:{port})" for name, (host, port) in self.ports.all().items()
                if not _port_free(host, port)]
        if busy:
            raise ClusterError(f"ports still in use after stopping: {', '.join(busy)}")
        shutil.rmtree(self.state, ignore_errors=True)
        self.kubeconfig.unlink(missing_ok=True)
        _say("local cluster stopped")

    def restart(self, name: str, down_seconds: float = 0.0, timeout: float = 60.0) -> None:
        """Stops one component, waits `down_seconds`, starts it again (fault injection: apiserver restarts)."""
        component = next((c for c in self.components() if c.name == name), None)
        if component is None:
            raise ClusterError(f"no component {name!r}; known: {', '.join(c.name for c in self.components())}")
        self._stop_processes([component])
        time.sleep(down_seconds)
        self._start(component)
        self._wait_healthy(component, time.monotonic() + timeout)

    def _control_plane_running(self) -> bool:
        control_plane = self.control_plane()
        return all(c.pid() is not None for c in control_plane) and self._healthy(control_plane[1])

    def _start_control_plane(self, deadline: float) -> None:
        self._stop_processes(self.components())
        self._kill_leftover_workers()
        self._check_ports_free()
        for sub in ("logs", "pids", "kubeconfigs"):
            (self.state / sub).mkdir(parents=True, exist_ok=True)
        _ensure_pki(self.pki)
        kubeconfigs = self.state / "kubeconfigs"
        for cert in ("controller-manager", "scheduler", "kwok"):
            _cert_kubeconfig(self.pki, cert, kubeconfigs / f"{cert}.yaml", self.server)
        _cert_kubeconfig(self.pki, "admin", self.kubeconfig, self.server)
        for component in self.control_plane():
            if component.name == "kwok":
                self._install_kwok_crds()
            started = time.monotonic()
            self._start(component)
            self._wait_healthy(component, deadline)
            _say(f"{component.name} ready ({time.monotonic() - started:.1f}s)")

    def _ensure_podrunner(self, workers: str | None, deadline: float) -> None:
        running = self.podrunner_workers()
        wanted = resolve_worker_server(workers) if workers or running is None else running
        if running == wanted:
            self._wait_healthy(self.podrunner(running), deadline)
            _say(f"podrunner already running ({running} worker server)")
            return
        if running is not None:
            _say(f"podrunner: switching from the {running} to the {wanted} worker server")
            self._stop_processes([self.podrunner(running)])
            self._kill_leftover_workers()
        component = self.podrunner(wanted)
        started = time.monotonic()
        self._start(component)
        self._wait_healthy(component, deadline)
        _say(f"podrunner ready ({time.monotonic() - started:.1f}s; {wanted} worker server, "
             f"pod logs in {self.pod_logs})")

    def _kill_leftover_workers(self) -> None:
        """Worker processes a podrunner that did not stop cleanly left behind (its ledger names them)."""
        ledger = self.state / "podrunner"
        if not ledger.is_dir() or not any(ledger.iterdir()):
            return
        from podrunner import ProcessLedger  # noqa: PLC0415 - needs the kubernetes client only here

        killed = ProcessLedger(ledger).kill_leftovers()
        if killed:
            _say(f"killed {len(killed)} worker process(es) podrunner left behind")

    # --- nodes and identities ----------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None) -> str:
        result = subprocess.run(
            [_binary("kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
            input=input, capture_output=True, text=True,
        )
        if result.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def _install_kwok_crds(self) -> None:
        crds = sorted(KWOK_CRDS.glob("*.yaml"))
        if not crds:
            raise ClusterError(f"no KWOK CRDs in {KWOK_CRDS}: run `make tools`")
        self.kubectl("apply", *(f"--filename={crd}" for crd in crds))
        self.kubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/logs.kwok.x-k8s.io")

    def ensure_nodes(self, count: int, shape: NodeShape, timeout: float = 60.0) -> None:
        """Creates missing fake nodes kwok-node-0..count-1 (existing ones keep their shape) and waits Ready."""
        existing = set(self.kubectl("get", "nodes", "-o", "name").split())
        manifests = [node_manifest(i, shape, self.ports.kwok, self.pod_octet) for i in range(count)
                     if f"node/{NODE_NAME_PREFIX}{i}" not in existing]
        if manifests:
            # Status must be sent on create: that is how a kubelet registers its capacity.
            self.kubectl("create", "-f", "-", input=yaml.safe_dump_all(manifests))
        names = [f"node/{NODE_NAME_PREFIX}{i}" for i in range(count)]
        self.kubectl("wait", "--for=condition=Ready", f"--timeout={int(timeout)}s", *names)
        _say(f"{count} KWOK node(s) Ready ({', '.join(f'{k}={v}' for k, v in shape.capacity().items())} each)")

    # --- processes -------------------------------------------------------------------------------

    def _start(self, component: Component) -> None:
        for directory in (component.log.parent, component.pidfile.parent):
            directory.mkdir(parents=True, exist_ok=True)
        with open(component.log, "ab") as log:
            process = subprocess.Popen(component.argv, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        component.pidfile.write_text(str(process.pid))

    def _healthy(self, component: Component) -> bool:
        if component.health_url is None:
            return True
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        if component.name == "kube-apiserver":
            context.load_cert_chain(self.pki / "admin.crt", self.pki / "admin.key")
        elif component.health_url.startswith("https"):
            # controller-manager and scheduler serve /healthz with a self-signed certificate of their own.
            context = ssl._create_unverified_context()  # noqa: S323 - loopback health probe only
        try:
            with urllib.request.urlopen(component.health_url, timeout=2, context=context) as response:
                return response.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError, ssl.SSLError):
            return False

    def _wait_healthy(self, component: Component, deadline: float) -> None:
        while time.monotonic() < deadline:
            if component.pid() is None:
                raise ClusterError(f"{component.name} exited during start-up; last log lines:\n{component.log_tail()}")
            if self._healthy(component):
                return
            time.sleep(0.2)
        raise ClusterError(f"{component.name} not healthy at {component.health_url} in time; "
                           f"last log lines:\n{component.log_tail()}")

    def _stop_processes(self, components: list[Component]) -> None:
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

    def _check_ports_free(self) -> None:
        busy = [f"{name} on {host}:{port}" for name, (host, port) in self.ports.all().items()
                if not _port_free(host, port)]
        if busy:
            raise ClusterError(
                f"ports in use: {', '.join(busy)}. Stop whatever holds them, or choose another range with "
                f"{PORT_BASE_VARIABLE} (now {self.ports.base})")

    def status(self) -> dict[str, str]:
        """Component -> "running" / "not running" (podrunner: with its worker server)."""
        states = {}
        for component in self.components():
            running = component.pid() is not None and self._healthy(component)
            states[component.name] = "running" if running else "not running"
        if states.get("podrunner") == "running":
            states["podrunner"] += f" ({self.podrunner_workers()} worker server)"
        return states


def service_account_kubeconfig(admin_kubeconfig: Path, namespace: str, service_account: str, out: Path,
                               duration: str = "24h") -> Path:
    """A kubeconfig for any cluster that authenticates as the ServiceAccount with a TokenRequest token."""
    admin = yaml.safe_load(admin_kubeconfig.read_text())
    context_name = admin["current-context"]
    context = next(c["context"] for c in admin["contexts"] if c["name"] == context_name)
    cluster = next(c["cluster"] for c in admin["clusters"] if c["name"] == context["cluster"])
    result = subprocess.run(
        [_binary("kubectl"), f"--kubeconfig={admin_kubeconfig}", "create", "token", service_account,
         "-n", namespace, f"--duration={duration}"], capture_output=True, text=True)
    if result.returncode != 0:
        raise ClusterError(f"cannot mint a token for {namespace}/{service_account}: {result.stderr.strip()}")
    user = f"{namespace}-{service_account}"
    config = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "cluster", "cluster": cluster}],
        "users": [{"name": user, "user": {"token": result.stdout.strip()}}],
        "contexts": [{"name": user, "context": {"cluster": "cluster", "user": user, "namespace": namespace}}],
        "current-context": user,
    }
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out


def _reap(pid: int) -> None:
    """Collects our own exited child so that kill(pid, 0) stops seeing a zombie."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _say(message: str) -> None:
    print(f"[localcluster] {message}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the control plane and podrunner (no-op when running), ensure the nodes")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--cpu", default=NodeShape.cpu)
    up.add_argument("--memory", default=NodeShape.memory)
    up.add_argument("--gpus", type=int, default=NodeShape.gpus)
    up.add_argument("--pods", type=int, default=NodeShape.pods)
    up.add_argument("--gpu-resource", default=NodeShape.gpu_resource)
    up.add_argument("--workers", choices=WORKER_SERVERS, default=None,
                    help="the server worker pods run: AReaL's rpc_server (areal, from `make areal-worker`), our "
                         "stand-in areal_workers_testing.reference_guard (reference), or areal when installed (auto). "
                         f"Default ${WORKERS_VARIABLE} or auto; given, it restarts a podrunner running another")
    commands.add_parser("down", help="stop every process, the pods' included, and remove the cluster state")
    commands.add_parser("status", help="exit 0 when the control plane and podrunner answer")
    commands.add_parser("kubeconfig", help="print the path of the admin kubeconfig")
    sa = commands.add_parser("sa-kubeconfig", help="write a kubeconfig for a ServiceAccount token")
    sa.add_argument("namespace")
    sa.add_argument("service_account")
    sa.add_argument("out", type=Path)
    args = parser.parse_args(argv)

    cluster = LocalCluster()
    try:
        if args.command == "up":
            if args.nodes < 1:
                raise ClusterError("--nodes must be at least 1")
            shape = NodeShape(cpu=args.cpu, memory=args.memory, gpus=args.gpus, pods=args.pods,
                              gpu_resource=args.gpu_resource)
            cluster.up(args.nodes, shape, workers=args.workers)
        elif args.command == "down":
            cluster.down()
        elif args.command == "status":
            for name, state in cluster.status().items():
                _say(f"{name}: {state}")
            running = cluster.is_running()
            _say("running" if running else "not running")
            return 0 if running else 1
        elif args.command == "kubeconfig":
            print(cluster.kubeconfig)
        elif args.command == "sa-kubeconfig":
            path = service_account_kubeconfig(cluster.kubeconfig, args.namespace, args.service_account, args.out)
            _say(f"wrote {path}")
    except ClusterError as error:
        print(f"localcluster: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
