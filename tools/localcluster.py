"""A real Kubernetes control plane on 127.0.0.1 for the tests and the demo.

etcd, kube-apiserver (RBAC + PodSecurity admission), kube-controller-manager and kube-scheduler run as
local processes built by `make tools`; KWOK plays the kubelet of fake nodes whose pods get loopback IPs
(127.20.<node>.x), so nothing ever connects off the machine. State lives under .tools/cluster/ and is
wiped by `down`, so every `up` after a `down` starts from an empty etcd.

    python tools/localcluster.py up [--nodes 2 --cpu 64 --memory 512Gi --gpus 8 --pods 110]
    python tools/localcluster.py down
    python tools/localcluster.py status
    python tools/localcluster.py sa-kubeconfig NAMESPACE SERVICEACCOUNT OUT
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
    base: int = int(os.environ.get("AREAL_WORKERS_CLUSTER_PORT_BASE", "16440"))

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

    def all(self) -> dict[str, tuple[str, int]]:
        """Component -> (address, port) it listens on."""
        return {
            "etcd": ("127.0.0.1", self.etcd_client),
            "etcd-peer": ("127.0.0.1", self.etcd_peer),
            "kube-apiserver": ("127.0.0.1", self.apiserver),
            "kube-controller-manager": ("127.0.0.1", self.controller_manager),
            "kube-scheduler": ("127.0.0.1", self.scheduler),
            "kwok": (KUBELET_IP, self.kwok),
        }


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


def node_manifest(index: int, shape: NodeShape, kubelet_port: int) -> dict:
    """A KWOK-managed Node with its own loopback pod CIDR; its kubelet endpoint is KWOK's server."""
    name = f"{NODE_NAME_PREFIX}{index}"
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
        "spec": {"podCIDR": f"127.20.{index}.0/24", "podCIDRs": [f"127.20.{index}.0/24"]},
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
    health_url: str | None = None
    log: Path = field(init=False)
    pidfile: Path = field(init=False)

    def __post_init__(self) -> None:
        self.log = STATE_DIR / "logs" / f"{self.name}.log"
        self.pidfile = STATE_DIR / "pids" / f"{self.name}.pid"

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


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=STATE_DIR / "pki")


APISERVER_SANS = (f"IP:127.0.0.1,IP:{KUBERNETES_SERVICE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,"
                  "DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local")


def _issue_cert(name: str, subject: str, *, sans: str | None = None) -> None:
    """A key and a certificate signed by the cluster CA: a serving certificate for `sans`, else a client one."""
    ext = STATE_DIR / "pki" / f"{name}.ext"
    if sans:
        ext.write_text(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
    else:
        ext.write_text("extendedKeyUsage=clientAuth\nkeyUsage=digitalSignature,keyEncipherment\n")
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-subj", subject, "-out", f"{name}.csr")
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "365", "-extfile", ext.name, "-out", f"{name}.crt")


def _ensure_pki() -> None:
    pki = STATE_DIR / "pki"
    if (pki / "done").exists():
        return
    pki.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.crt",
             "-days", "365", "-subj", "/CN=areal-workers-local-ca")
    _issue_cert("apiserver", "/CN=kube-apiserver", sans=APISERVER_SANS)
    _issue_cert("kubelet", "/CN=kwok-kubelet", sans=f"IP:{KUBELET_IP}")
    _issue_cert("admin", "/O=system:masters/CN=areal-workers-admin")
    _issue_cert("controller-manager", "/CN=system:kube-controller-manager")
    _issue_cert("scheduler", "/CN=system:kube-scheduler")
    # KWOK updates status of nodes and pods it does not own: it acts as every fake kubelet at once.
    _issue_cert("kwok", "/O=system:masters/CN=kwok-controller")
    _openssl("genrsa", "-out", "sa.key", "2048")
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")
    (pki / "done").write_text("")


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def _kubeconfig(user: str, credentials: dict, server: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "areal-workers-local", "cluster": {
            "server": server, "certificate-authority-data": _b64(STATE_DIR / "pki" / "ca.crt")}}],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": f"{user}@areal-workers-local",
                      "context": {"cluster": "areal-workers-local", "user": user}}],
        "current-context": f"{user}@areal-workers-local",
    }


def _cert_kubeconfig(cert: str, path: Path, server: str) -> Path:
    pki = STATE_DIR / "pki"
    credentials = {"client-certificate-data": _b64(pki / f"{cert}.crt"), "client-key-data": _b64(pki / f"{cert}.key")}
    path.write_text(yaml.safe_dump(_kubeconfig(cert, credentials, server)))
    path.chmod(0o600)
    return path


class LocalCluster:
    """Starts, checks and stops the local control plane; safe to start twice."""

    def __init__(self, ports: Ports | None = None) -> None:
        self.ports = ports or Ports()
        self.server = f"https://127.0.0.1:{self.ports.apiserver}"
        self.kubeconfig = ADMIN_KUBECONFIG

    # --- lifecycle -------------------------------------------------------------------------------

    def components(self) -> list[Component]:
        pki = STATE_DIR / "pki"
        p = self.ports
        kubeconfigs = STATE_DIR / "kubeconfigs"
        etcd_url = f"http://127.0.0.1:{p.etcd_client}"
        return [
            Component("etcd", [
                _binary("etcd"), "--name=local", f"--data-dir={STATE_DIR / 'etcd'}",
                f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{p.etcd_peer}",
                f"--initial-cluster=local=http://127.0.0.1:{p.etcd_peer}",
                # Test clusters are thrown away: durability buys nothing and fsync costs seconds per test.
                "--unsafe-no-fsync=true", "--quota-backend-bytes=8589934592", "--log-level=warn",
            ], health_url=f"{etcd_url}/health"),
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
            ], health_url=f"{self.server}/readyz"),
            Component("kube-controller-manager", [
                _binary("kube-controller-manager"),
                f"--kubeconfig={kubeconfigs / 'controller-manager.yaml'}",
                f"--authentication-kubeconfig={kubeconfigs / 'controller-manager.yaml'}",
                f"--authorization-kubeconfig={kubeconfigs / 'controller-manager.yaml'}",
                "--bind-address=127.0.0.1", f"--secure-port={p.controller_manager}",
                f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=true", "--leader-elect=false",
                f"--service-cluster-ip-range={SERVICE_CIDR}", "--profiling=false", "--v=1",
            ], health_url=f"https://127.0.0.1:{p.controller_manager}/healthz"),
            Component("kube-scheduler", [
                _binary("kube-scheduler"),
                f"--kubeconfig={kubeconfigs / 'scheduler.yaml'}",
                f"--authentication-kubeconfig={kubeconfigs / 'scheduler.yaml'}",
                f"--authorization-kubeconfig={kubeconfigs / 'scheduler.yaml'}",
                "--bind-address=127.0.0.1", f"--secure-port={p.scheduler}", "--leader-elect=false",
                "--profiling=false", "--v=1",
            ], health_url=f"https://127.0.0.1:{p.scheduler}/healthz"),
            Component("kwok", [
                _binary("kwok"), f"--kubeconfig={kubeconfigs / 'kwok.yaml'}", f"--config={KWOK_STAGES}",
                f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
                f"--node-ip={KUBELET_IP}", "--cidr=127.21.0.0/16",
                f"--server-address={KUBELET_IP}:{p.kwok}", "--node-lease-duration-seconds=40",
                f"--tls-cert-file={pki / 'kubelet.crt'}", f"--tls-private-key-file={pki / 'kubelet.key'}",
                # Logs objects map a pod's containers to log files (tools/podrunner.py writes them).
                "--enable-crds=Logs",
            ], health_url=f"http://{KUBELET_IP}:{p.kwok}/healthz"),
        ]

    def is_running(self) -> bool:
        return all(c.pid() is not None for c in self.components()) and self._healthy(self.components()[1])

    def up(self, nodes: int = 2, shape: NodeShape | None = None, timeout: float = 120.0) -> None:
        shape = shape or NodeShape()
        components = self.components()
        if self.is_running():
            _say("local cluster already running")
        else:
            self._stop_processes(components)
            self._check_ports_free()
            for sub in ("logs", "pids", "kubeconfigs"):
                (STATE_DIR / sub).mkdir(parents=True, exist_ok=True)
            _ensure_pki()
            kubeconfigs = STATE_DIR / "kubeconfigs"
            for cert in ("controller-manager", "scheduler", "kwok"):
                _cert_kubeconfig(cert, kubeconfigs / f"{cert}.yaml", self.server)
            _cert_kubeconfig("admin", self.kubeconfig, self.server)
            deadline = time.monotonic() + timeout
            for component in components:
                if component.name == "kwok":
                    self._install_kwok_crds()
                started = time.monotonic()
                self._start(component)
                self._wait_healthy(component, deadline)
                _say(f"{component.name} ready ({time.monotonic() - started:.1f}s)")
        self.ensure_nodes(nodes, shape, timeout)
        _say(f"kubeconfig: {self.kubeconfig}")

    def down(self) -> None:
        self._stop_processes(self.components())
        busy = [f"{name} ({host}:{port})" for name, (host, port) in self.ports.all().items()
                if not _port_free(host, port)]
        if busy:
            raise ClusterError(f"ports still in use after stopping: {', '.join(busy)}")
        shutil.rmtree(STATE_DIR, ignore_errors=True)
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
        manifests = [node_manifest(i, shape, self.ports.kwok) for i in range(count) if f"node/{NODE_NAME_PREFIX}{i}" not in existing]
        if manifests:
            # Status must be sent on create: that is how a kubelet registers its capacity.
            self.kubectl("create", "-f", "-", input=yaml.safe_dump_all(manifests))
        names = [f"node/{NODE_NAME_PREFIX}{i}" for i in range(count)]
        self.kubectl("wait", "--for=condition=Ready", f"--timeout={int(timeout)}s", *names)
        _say(f"{count} KWOK node(s) Ready ({', '.join(f'{k}={v}' for k, v in shape.capacity().items())} each)")

    # --- processes -------------------------------------------------------------------------------

    def _start(self, component: Component) -> None:
        with open(component.log, "ab") as log:
            process = subprocess.Popen(component.argv, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        component.pidfile.write_text(str(process.pid))

    def _healthy(self, component: Component) -> bool:
        if component.health_url is None:
            return True
        context = ssl.create_default_context(cafile=str(STATE_DIR / "pki" / "ca.crt"))
        if component.name == "kube-apiserver":
            pki = STATE_DIR / "pki"
            context.load_cert_chain(pki / "admin.crt", pki / "admin.key")
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

    def _stop_processes(self, components: list[Component], grace: float = 10.0) -> None:
        for component in reversed(components):
            pid = component.pid()
            if pid is None:
                continue
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
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
                f"AREAL_WORKERS_CLUSTER_PORT_BASE (now {self.ports.base})")


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
    up = commands.add_parser("up", help="start the control plane (no-op when running) and ensure the nodes")
    up.add_argument("--nodes", type=int, default=2)
    up.add_argument("--cpu", default=NodeShape.cpu)
    up.add_argument("--memory", default=NodeShape.memory)
    up.add_argument("--gpus", type=int, default=NodeShape.gpus)
    up.add_argument("--pods", type=int, default=NodeShape.pods)
    up.add_argument("--gpu-resource", default=NodeShape.gpu_resource)
    commands.add_parser("down", help="stop every process and remove the cluster state")
    commands.add_parser("status", help="exit 0 when the control plane answers")
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
            cluster.up(args.nodes, shape)
        elif args.command == "down":
            cluster.down()
        elif args.command == "status":
            running = cluster.is_running()
            _say("running" if running else "not running")
            return 0 if running else 1
        elif args.command == "sa-kubeconfig":
            path = service_account_kubeconfig(cluster.kubeconfig, args.namespace, args.service_account, args.out)
            _say(f"wrote {path}")
    except ClusterError as error:
        print(f"localcluster: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
