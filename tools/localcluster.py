"""A real Kubernetes control plane on 127.0.0.1 for the tests and the demo.

etcd, kube-apiserver (RBAC + PodSecurity admission), kube-controller-manager and kube-scheduler run as
local processes built by `make tools`; KWOK plays the kubelet of fake nodes whose pods get loopback IPs
(127.20.<node>.x), so nothing ever connects off the machine, and podrunner (tools/podrunner.py) plays the
kubelet's other half: it runs the pods' commands as local processes, for every namespace but those a test
runs itself. State lives under .tools/cluster/ and is wiped by `down`, so every `up` after a `down` starts
from an empty etcd and no process of the cluster or of its pods is left.

    python tools/localcluster.py up [--nodes 2 --cpu 64 --memory 512Gi --gpus 8 --pods 110]
                                    [--workers auto|areal|reference] [--real-node] [--kueue] [--argocd]
    python tools/localcluster.py down
    python tools/localcluster.py status
    python tools/localcluster.py kubeconfig
    python tools/localcluster.py sa-kubeconfig NAMESPACE SERVICEACCOUNT OUT

--real-node adds a real node beside the KWOK ones (tools/realnode.py: kubelet, containerd, runc, CNI, CoreDNS; root,
one per machine): pods that select it run as real containers of locally built images. `down` stops it too.

A second cluster beside the first: set AREAL_WORKERS_CLUSTER_PORT_BASE (ports), AREAL_WORKERS_CLUSTER_DIR
(state; its admin kubeconfig is written inside it) and AREAL_WORKERS_CLUSTER_POD_OCTET (pods get
127.<octet>.<node>.x; default 20) to values of its own.

`up --kueue` also runs Kueue's controller manager (tools/localcluster_kueue.py); its webhooks act only in namespaces
labelled areal-workers.local/kueue=true. A later `up` without it keeps a running Kueue; `down` stops it.
"""

# This module is LocalCluster and the command line (its docstring is `--help`). The rest: localcluster_settings
# (paths, ports, addresses, environment variables), localcluster_nodes (fake nodes), localcluster_pki (certificates,
# kubeconfigs), localcluster_components (each component's command line), localcluster_processes (starting,
# checking and stopping component processes).

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

import localcluster_argocd as argocd
import localcluster_kueue as kueue_setup
import localcluster_processes as processes
from localcluster_components import control_plane_components, podrunner_component
from localcluster_nodes import NodeShape, node_manifest
from localcluster_pki import cert_kubeconfig, ensure_pki, service_account_kubeconfig
from localcluster_processes import Component, port_free
from localcluster_processes import say as _say
from localcluster_settings import (
    ADMIN_KUBECONFIG,
    AREAL_WORKER_ENV,
    AREAL_WORKER_PYTHON,
    KWOK_CRDS,
    NODE_NAME_PREFIX,
    PORT_BASE_VARIABLE,
    REPO_ROOT,
    STATE_DIR,
    WORKER_SERVERS,
    WORKERS_VARIABLE,
    ClusterError,
    Ports,
    binary,
    default_pod_octet,
    default_state_dir,
    resolve_worker_server,
)
from podrunner_processes import ProcessLedger
from realnode import NODE_CHOICES, RealNode

# What tests, benchmarks and examples import from here.
__all__ = ["AREAL_WORKER_PYTHON", "REPO_ROOT", "ClusterError", "LocalCluster", "NodeShape", "Ports",
           "main", "node_manifest", "service_account_kubeconfig"]


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
        return control_plane_components(self.state, self.pki, self.ports, self.server)

    def podrunner(self, workers: str = "reference") -> Component:
        """The kubelets' process side: one runner for every namespace not labelled private (tools/podrunner.py)."""
        return podrunner_component(self.state, self.ports, self.pod_logs, workers)

    def real_node(self) -> RealNode:
        return RealNode(self.state, self.pki, self.ports, self.server, self.kubeconfig, AREAL_WORKER_ENV)

    def real_node_possible(self) -> bool:
        """This machine can run the real node; says why not when it cannot."""
        missing = self.real_node().missing()
        if missing:
            _say(f"no real node: {missing} (KWOK nodes only)")
        return not missing

    def kueue(self) -> Component:
        """Kueue's controller manager (`up --kueue`); not in components(): it starts last and stops first."""
        return kueue_setup.component(self.state, self.ports, self.kubeconfig)

    def components(self) -> list[Component]:
        """Everything `up` starts but the real node, in start order."""
        return [*self.control_plane(), self.podrunner(self.podrunner_workers() or "reference")]

    def argocd(self) -> list[Component]:
        """Argo CD's processes (`up --argocd`): redis, repo-server, application controller."""
        return argocd.components(self.state, self.ports, self.kubeconfig)

    def podrunner_workers(self) -> str | None:
        """The worker server of the running podrunner ("areal" or "reference"), None when it does not run."""
        flags = [arg for arg in self.podrunner().running_argv() if arg.startswith("--workers=")]
        return flags[0].split("=", 1)[1] if flags else None

    # --- lifecycle -------------------------------------------------------------------------------

    def is_running(self) -> bool:
        components = self.components()
        return (all(c.pid() is not None for c in components) and self._healthy(components[1])
                and self._healthy(components[-1]))

    def status(self) -> dict[str, str]:
        """Component -> "running" / "not running" (podrunner: with its worker server)."""
        states = {}
        for component in self.components():
            running = component.pid() is not None and self._healthy(component)
            states[component.name] = "running" if running else "not running"
        if states.get("podrunner") == "running":
            states["podrunner"] += f" ({self.podrunner_workers()} worker server)"
        node = self.real_node()
        if node.paths.root.exists():
            states.update(node.status())
        kueue = self.kueue()
        if kueue.pid() is not None:
            states["kueue"] = "running" if self._healthy(kueue) else "not running"
        for component in self.argocd():
            if component.pid() is not None:
                states[component.name] = "running" if self._healthy(component) else "not running"
        return states

    def up(self, nodes: int = 2, shape: NodeShape | None = None, timeout: float = 120.0,
           workers: str | None = None, real_node: bool = False, kueue: bool = False,
           with_argocd: bool = False) -> None:
        """Starts what is not running. `workers` (auto, areal, reference) restarts a podrunner that runs another
        worker server; without it a running podrunner is kept and a new one takes $AREAL_WORKERS_WORKER or auto.
        `real_node` adds the real node (its first start builds its images: minutes). `kueue` also starts Kueue (a
        running one is kept either way). `with_argocd`: Argo CD too (ensure_argocd)."""
        shape = shape or NodeShape()
        if self._control_plane_running():
            _say("control plane already running")
            if not self.kubeconfig.exists():  # a checkout that joins a cluster another one started
                cert_kubeconfig(self.pki, "admin", self.kubeconfig, self.server)
        else:
            self._start_control_plane(time.monotonic() + timeout)
        self.ensure_nodes(nodes, shape, timeout)
        self._ensure_podrunner(workers, time.monotonic() + timeout)
        if real_node:
            self.real_node().up(timeout, _say)
        if kueue:
            self._ensure_kueue(time.monotonic() + timeout)
        if with_argocd:
            self.ensure_argocd(timeout)
        _say(f"kubeconfig: {self.kubeconfig}")

    def ensure_argocd(self, timeout: float = 120.0) -> None:
        """Starts Argo CD on the running control plane unless it answers already (localcluster_argocd.ensure)."""
        argocd.ensure(self, timeout)

    def down(self) -> None:
        self.stop_kueue()
        self.real_node().down(_say)
        processes.stop([*self.components(), *self.argocd()])
        self._kill_leftover_workers()
        busy = [f"{name} ({host}:{port})" for name, (host, port) in self.ports.all().items()
                if not port_free(host, port)]
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
        processes.stop([component])
        time.sleep(down_seconds)
        processes.start(component)
        self._wait_healthy(component, time.monotonic() + timeout)

    def _ensure_kueue(self, deadline: float) -> None:
        kueue_setup.ensure(self, deadline)

    def stop_kueue(self) -> None:
        """Its webhook configurations first, then the process (localcluster_kueue.stop)."""
        kueue_setup.stop(self)

    def _control_plane_running(self) -> bool:
        control_plane = self.control_plane()
        return all(c.pid() is not None for c in control_plane) and self._healthy(control_plane[1])

    def _start_control_plane(self, deadline: float) -> None:
        processes.stop([self.kueue(), *self.components(), *self.argocd()])
        self._kill_leftover_workers()
        self._check_ports_free()
        for sub in ("logs", "pids", "kubeconfigs"):
            (self.state / sub).mkdir(parents=True, exist_ok=True)
        ensure_pki(self.pki)
        kubeconfigs = self.state / "kubeconfigs"
        for cert in ("controller-manager", "scheduler", "kwok"):
            cert_kubeconfig(self.pki, cert, kubeconfigs / f"{cert}.yaml", self.server)
        cert_kubeconfig(self.pki, "admin", self.kubeconfig, self.server)
        for component in self.control_plane():
            if component.name == "kwok":
                self._install_kwok_crds()
            started = time.monotonic()
            processes.start(component)
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
            processes.stop([self.podrunner(running)])
            self._kill_leftover_workers()
        component = self.podrunner(wanted)
        started = time.monotonic()
        processes.start(component)
        self._wait_healthy(component, deadline)
        _say(f"podrunner ready ({time.monotonic() - started:.1f}s; {wanted} worker server, "
             f"pod logs in {self.pod_logs})")

    def _kill_leftover_workers(self) -> None:
        """Worker processes a podrunner that did not stop cleanly left behind (its ledger names them)."""
        ledger = self.state / "podrunner"
        if not ledger.is_dir() or not any(ledger.iterdir()):
            return
        killed = ProcessLedger(ledger).kill_leftovers()
        if killed:
            _say(f"killed {len(killed)} worker process(es) podrunner left behind")

    # --- nodes and identities ----------------------------------------------------------------------

    def kubectl(self, *args: str, input: str | None = None) -> str:
        result = subprocess.run(
            [binary("kubectl"), f"--kubeconfig={self.kubeconfig}", *args],
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

    # --- processes and ports ---------------------------------------------------------------------

    def _healthy(self, component: Component) -> bool:
        return processes.healthy(component, self.pki)

    def _wait_healthy(self, component: Component, deadline: float) -> None:
        processes.wait_healthy(component, self.pki, deadline)

    def _check_ports_free(self) -> None:
        busy = [f"{name} on {host}:{port}" for name, (host, port) in self.ports.all().items()
                if not port_free(host, port)]
        if busy:
            raise ClusterError(
                f"ports in use: {', '.join(busy)}. Stop whatever holds them, or choose another range with "
                f"{PORT_BASE_VARIABLE} (now {self.ports.base})")




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
    up.add_argument("--real-node", nargs="?", const="real", choices=NODE_CHOICES, default="kwok",
                    help="real: also start the real node (kubelet + containerd running real containers; root; see "
                         "tools/realnode.py); auto: when this machine can run it; kwok (default): KWOK nodes only")
    up.add_argument("--kueue", action="store_true",
                    help="also run Kueue's controller manager (its webhooks act in namespaces labelled "
                         f"{kueue_setup.MANAGED_NAMESPACE_LABEL}=true)")
    up.add_argument("--argocd", action="store_true",
                    help="Argo CD too: redis, repo-server and application controller on 127.0.0.1 (`make tools` "
                         "builds argocd; redis-server is Debian's); `down` stops them")
    commands.add_parser("down", help="stop every process, the pods' and Argo CD's included, and remove the cluster "
                                     "state")
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
            real_node = args.real_node == "real" or (args.real_node == "auto" and cluster.real_node_possible())
            cluster.up(args.nodes, shape, workers=args.workers, real_node=real_node, kueue=args.kueue,
                       with_argocd=args.argocd)
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
