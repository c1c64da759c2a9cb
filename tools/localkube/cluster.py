"""LocalCluster: starts, checks and stops a local cluster's components (the control plane, KWOK, podrunner) and, on
request, its real node and add-ons (Kueue, Argo CD)."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import yaml

import localkube.processes as processes
from localkube.addons import argocd, kueue as kueue_addon, registry as registry_addon
from localkube.components import apiserver_component, control_plane_components, etcd_client_url, podrunner_component
from localkube.nodes import NodeShape, node_manifest
from localkube.pki import cert_kubeconfig, ensure_pki
from localkube.processes import Component, port_free, say as _say
from localkube.settings import (
    ADMIN_KUBECONFIG,
    KWOK_CRDS,
    NODE_NAME_PREFIX,
    PORT_BASE_VARIABLE,
    STATE_DIR,
    ClusterError,
    Ports,
    binary,
    default_pod_octet,
    default_state_dir,
    resolve_worker_server,
)
from podrunner.processes import ProcessLedger
from realnode.node import RealNode
from repo_paths import AREAL_WORKER_ENV


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
        return control_plane_components(self.state, self.pki, self.ports)

    def second_apiserver(self) -> Component:
        """A second kube-apiserver on the cluster's etcd, serving the same cluster on its own port (`up` does not start
        it: start_second_apiserver): a client of it sees its API server restart while every other client, and the
        control plane, keep theirs."""
        return apiserver_component(
            self.state, self.pki, etcd_client_url(self.ports), "kube-apiserver-second", self.ports.second_apiserver
        )

    def start_second_apiserver(self, timeout: float = 60.0) -> str:
        """Starts the second kube-apiserver unless it runs; its URL once it is ready. stop_second_apiserver and `down`
        stop it."""
        component = self.second_apiserver()
        if component.pid() is None:
            processes.start(component)
        self.wait_healthy(component, time.monotonic() + timeout)
        return f"https://127.0.0.1:{self.ports.second_apiserver}"

    def stop_second_apiserver(self) -> None:
        processes.stop([self.second_apiserver()])

    def podrunner(self, workers: str = "reference") -> Component:
        """The kubelets' process side: one runner for every namespace not labelled private (tools/podrunner/)."""
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
        return kueue_addon.component(self.state, self.ports, self.kubeconfig)

    def components(self) -> list[Component]:
        """Everything `up` starts but the real node, in start order."""
        return [*self.control_plane(), self.podrunner(self.podrunner_workers() or "reference")]

    def argocd(self) -> list[Component]:
        """Argo CD's processes (`up --argocd`): redis, repo-server, application controller."""
        return argocd.components(self.state, self.ports, self.kubeconfig)

    def registry(self) -> Component:
        """The OCI registry (`up --registry`); not in components(): started on request, stopped by `down`."""
        return registry_addon.component(self.state, self.pki, self.ports)

    def registry_credentials(self) -> registry_addon.Credentials:
        """Address, account and CA of the running registry (ClusterError when `up --registry` never ran)."""
        if self.registry().pid() is None:
            raise ClusterError("the local registry is not running: start it with `localcluster.py up --registry`")
        return registry_addon.credentials(self.state, self.pki, self.ports)

    def podrunner_workers(self) -> str | None:
        """The worker server of the running podrunner ("areal" or "reference"), None when it does not run."""
        flags = [arg for arg in self.podrunner().running_argv() if arg.startswith("--workers=")]
        return flags[0].split("=", 1)[1] if flags else None

    # --- lifecycle -------------------------------------------------------------------------------

    def is_running(self) -> bool:
        components = self.components()
        return (
            all(c.pid() is not None for c in components)
            and self.healthy(components[1])
            and self.healthy(components[-1])
        )

    def status(self) -> dict[str, str]:
        """Component -> "running" / "not running" (podrunner: with its worker server)."""
        states = {}
        for component in self.components():
            running = component.pid() is not None and self.healthy(component)
            states[component.name] = "running" if running else "not running"
        if states.get("podrunner") == "running":
            states["podrunner"] += f" ({self.podrunner_workers()} worker server)"
        node = self.real_node()
        if node.paths.root.exists():
            states.update(node.status())
        kueue = self.kueue()
        if kueue.pid() is not None:
            states["kueue"] = "running" if self.healthy(kueue) else "not running"
        for component in [*self.argocd(), self.registry()]:
            if component.pid() is not None:
                states[component.name] = "running" if self.healthy(component) else "not running"
        return states

    def up(
        self,
        nodes: int = 2,
        shape: NodeShape | None = None,
        timeout: float = 120.0,
        workers: str | None = None,
        real_node: bool = False,
        kueue: bool = False,
        with_argocd: bool = False,
        with_registry: bool = False,
    ) -> None:
        """Starts what is not running. `workers` (auto, areal, reference) restarts a podrunner that runs another
        worker server; without it a running podrunner is kept and a new one takes $AREAL_WORKERS_WORKER or auto.
        `real_node` adds the real node (its first start builds its images: minutes). `kueue` also starts Kueue (a
        running one is kept either way). `with_argocd`: Argo CD too (ensure_argocd). `with_registry`: the OCI registry
        too (addons.registry)."""
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
        if with_registry:
            registry_addon.ensure(self, timeout)
        _say(f"kubeconfig: {self.kubeconfig}")

    def ensure_argocd(self, timeout: float = 120.0) -> None:
        """Starts Argo CD on the running control plane unless it answers already (addons.argocd.ensure)."""
        argocd.ensure(self, timeout)

    def down(self) -> None:
        self.stop_kueue()
        self.real_node().down(_say)
        processes.stop([*self.components(), self.second_apiserver(), *self.argocd(), self.registry()])
        self._kill_leftover_workers()
        busy = [
            f"{name} ({host}:{port})" for name, (host, port) in self.ports.all().items() if not port_free(host, port)
        ]
        if busy:
            raise ClusterError(f"ports still in use after stopping: {', '.join(busy)}")
        shutil.rmtree(self.state, ignore_errors=True)
        self.kubeconfig.unlink(missing_ok=True)
        _say("local cluster stopped")

    def restart(self, name: str, down_seconds: float = 0.0, timeout: float = 60.0) -> None:
        """Stops one component, waits `down_seconds`, starts it again (fault injection: apiserver restarts)."""
        known = [*self.components(), self.second_apiserver()]
        component = next((c for c in known if c.name == name), None)
        if component is None:
            raise ClusterError(f"no component {name!r}; known: {', '.join(c.name for c in known)}")
        processes.stop([component])
        time.sleep(down_seconds)
        processes.start(component)
        self.wait_healthy(component, time.monotonic() + timeout)

    def _ensure_kueue(self, deadline: float) -> None:
        kueue_addon.ensure(self, deadline)

    def stop_kueue(self) -> None:
        """Its webhook configurations first, then the process (addons.kueue.stop)."""
        kueue_addon.stop(self)

    def _control_plane_running(self) -> bool:
        control_plane = self.control_plane()
        return all(c.pid() is not None for c in control_plane) and self.healthy(control_plane[1])

    def _start_control_plane(self, deadline: float) -> None:
        processes.stop([self.kueue(), *self.components(), self.second_apiserver(), *self.argocd(), self.registry()])
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
            self.wait_healthy(component, deadline)
            _say(f"{component.name} ready ({time.monotonic() - started:.1f}s)")

    def _ensure_podrunner(self, workers: str | None, deadline: float) -> None:
        running = self.podrunner_workers()
        wanted = resolve_worker_server(workers) if workers or running is None else running
        if running == wanted:
            self.wait_healthy(self.podrunner(running), deadline)
            _say(f"podrunner already running ({running} worker server)")
            return
        if running is not None:
            _say(f"podrunner: switching from the {running} to the {wanted} worker server")
            processes.stop([self.podrunner(running)])
            self._kill_leftover_workers()
        component = self.podrunner(wanted)
        started = time.monotonic()
        processes.start(component)
        self.wait_healthy(component, deadline)
        _say(
            f"podrunner ready ({time.monotonic() - started:.1f}s; {wanted} worker server, pod logs in {self.pod_logs})"
        )

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
            input=input,
            capture_output=True,
            text=True,
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
        manifests = [
            node_manifest(i, shape, self.ports.kwok, self.pod_octet)
            for i in range(count)
            if f"node/{NODE_NAME_PREFIX}{i}" not in existing
        ]
        if manifests:
            # Status must be sent on create: that is how a kubelet registers its capacity.
            self.kubectl("create", "-f", "-", input=yaml.safe_dump_all(manifests))
        names = [f"node/{NODE_NAME_PREFIX}{i}" for i in range(count)]
        self.kubectl("wait", "--for=condition=Ready", f"--timeout={int(timeout)}s", *names)
        _say(f"{count} KWOK node(s) Ready ({', '.join(f'{k}={v}' for k, v in shape.capacity().items())} each)")

    # --- processes and ports ---------------------------------------------------------------------

    def healthy(self, component: Component) -> bool:
        return processes.healthy(component, self.pki)

    def wait_healthy(self, component: Component, deadline: float) -> None:
        processes.wait_healthy(component, self.pki, deadline)

    def apiserver_healthy(self) -> bool:
        return self.healthy(self.control_plane()[1])

    def _check_ports_free(self) -> None:
        busy = [
            f"{name} on {host}:{port}" for name, (host, port) in self.ports.all().items() if not port_free(host, port)
        ]
        if busy:
            raise ClusterError(
                f"ports in use: {', '.join(busy)}. Stop whatever holds them, or choose another range with "
                f"{PORT_BASE_VARIABLE} (now {self.ports.base})"
            )
