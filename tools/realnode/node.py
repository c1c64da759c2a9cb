"""A real node beside the KWOK nodes: kubelet, containerd, runc and CNI run real containers of locally built images.

`localcluster.py up --real-node` starts it after the control plane; `down` stops it first. Its processes and what
they change on the host:
- a bridge (config.BRIDGE) on 198.18.0.1/24, created first: the node's IP, the pods' gateway and the DNS
  server; pods live in network namespaces the CNI bridge plugin creates, so the controller on the host reaches each
  pod at its own IP;
- a private mount namespace held open by one process: containerd (with its shims and containers) and the kubelet run
  inside it, so their overlay, volume and bind mounts vanish with it;
- containerd with its own root, state and socket, the images of images.py imported;
- the kubelet (built from the cluster's Kubernetes release), registered as config.NODE_NAME, tainted so only
  pods that ask for it (values.py) land there, with a client and a serving certificate of the cluster CA;
- CoreDNS on the node IP, answering the cluster domain from the apiserver;
- a relay on the node IP to the apiserver (relay.py), which pods reach as KUBERNETES_SERVICE_HOST;
- kube-network-policies with NFQUEUE rules in iptables' mangle table (netpol.py): the cluster's NetworkPolicies are
  enforced on the node's pods before the kubelet starts any.
`down` kills every process of the mount namespace (the containers' too), then removes the kubelet's cgroups, the
network namespaces' files, the bridge and the iptables chains the kubelet and netpol.py made, and restores the
sysctls it changed.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

import localkube.processes as processes
import realnode.host as host
import realnode.netpol as netpol
from localkube.addons.registry import address as registry_address
from localkube.pki import cert_kubeconfig, issue_cert
from localkube.processes import Component
from localkube.settings import ClusterError, Ports, binary
from realnode.config import (
    BRIDGE,
    NETWORK,
    NODE_IP,
    NODE_NAME,
    NodePaths,
    NodePorts,
    cni_network,
    containerd_config,
    corefile,
    kubelet_argv,
    kubelet_config,
    registry_hosts,
)
from realnode.images import PAUSE_IMAGE, pause_image, worker_image
from realnode.values import trainer_submit, worker_values
from repo_paths import TOOLS_BIN

NODE_CHOICES = ("kwok", "real", "auto")  # `localcluster.py up --real-node` and `make ... NODE=`
API_RELAY = "apiserver-relay"


class RealNode:
    """The real node of one local cluster (one per machine: the bridge and 198.18.0.0/24 are fixed;
    host.live_node() tells)."""

    def __init__(self, state: Path, pki: Path, ports: Ports, server: str, kubeconfig: Path, environment: Path) -> None:
        self.paths = NodePaths(state, ports.base)
        self.ports = NodePorts(ports)
        self.pki = pki
        self.server = server
        self.kubeconfig = kubeconfig
        self.environment = environment  # AReaL's virtualenv, mounted into worker pods

    @property
    def _namespace_file(self) -> Path:
        return self.paths.root / "mount-namespace"

    # --- components ------------------------------------------------------------------------------

    def components(self) -> list[Component]:
        """The mount namespace's holder, containerd, the kubelet, CoreDNS, the NetworkPolicy enforcer, the API
        relay."""
        state = self.paths.root
        holder = Component(
            "node-mounts", ["unshare", "--mount", "--propagation", "private", "sleep", "infinity"], state
        )
        inside = ["nsenter", f"--mount=/proc/{holder.pid() or 'self'}/ns/mnt", "--"]
        return [
            holder,
            Component(
                "containerd", [*inside, "containerd", f"--config={self.paths.containerd_config}"], state, grace=15.0
            ),
            Component(
                "kubelet",
                [*inside, *kubelet_argv(str(TOOLS_BIN / "kubelet"), self.paths)],
                state,
                health_url=f"http://127.0.0.1:{self.ports.kubelet_healthz}/healthz",
                grace=15.0,
            ),
            Component(
                "coredns",
                [str(TOOLS_BIN / "coredns"), "-conf", str(self.paths.corefile)],
                state,
                health_url=f"http://127.0.0.1:{self.ports.coredns_health}/health",
            ),
            netpol.enforcer(
                str(TOOLS_BIN / "kube-network-policies"), self.kubeconfig, self.ports.network_policies_metrics, state
            ),
            Component(
                API_RELAY,
                [
                    sys.executable,
                    "-m",
                    "realnode.relay",
                    NODE_IP,
                    str(self.ports.apiserver_relay),
                    "127.0.0.1",
                    str(self.ports.ports.apiserver),
                ],
                state,
                # Verified against the cluster CA: proves the relay and that the certificate names NODE_IP.
                health_url=f"https://{NODE_IP}:{self.ports.apiserver_relay}/readyz",
            ),
        ]

    def missing(self) -> str:
        """What this machine lacks to run the node ("" when nothing, or when it runs)."""
        if self.is_running():
            return ""
        try:
            self._preflight()
        except ClusterError as error:
            return str(error)
        return ""

    def _preflight(self) -> None:
        host.preflight(self.paths)
        for name in ("containerd", "runc", "ctr", "debootstrap", "unshare", "nsenter", "iptables"):
            _system_binary(name)
        binary("kubelet"), binary("coredns"), binary("kubectl"), binary("kube-network-policies")

    def is_running(self) -> bool:
        return all(c.pid() is not None for c in self.components())

    def absence(self) -> str:
        """Why no worker can run on the node now, and how to start it ("" when it runs): what a test that needs
        the node says when the cluster was started without it (`make cluster-up NODE=kwok`) or it stopped."""
        if self.is_running():
            return ""
        start = "start it with `make cluster-up NODE=real` (root on Debian; docs/en/real-node.md)"
        if self.paths.root.exists():
            stopped = ", ".join(c.name for c in self.components() if c.pid() is None)
            return f"the real node {NODE_NAME} was started but has stopped ({stopped} not running): {start}"
        missing = self.missing()
        return f"the local cluster runs no real node (it was started without one, e.g. NODE=kwok): {start}" + (
            f"; this machine cannot run it now: {missing}" if missing else ""
        )

    def status(self) -> dict[str, str]:
        return {f"real node: {c.name}": "running" if c.pid() is not None else "not running" for c in self.components()}

    # --- start -----------------------------------------------------------------------------------

    def up(self, timeout: float, say: Callable[[str], None]) -> None:
        """Starts the node (no-op when running); `timeout` counts after the images are built."""
        if self.is_running():
            say(f"real node {NODE_NAME} already running")
            return
        started = time.monotonic()
        self._preflight()
        removed = host.reclaim_leftovers()
        if netpol.remove_leftover_rules():
            removed.append(f"iptables chain {netpol.CHAIN}")
        if removed:
            say(f"real node: removed what a killed run left behind: {', '.join(removed)}")
        self.paths.root.mkdir(parents=True, exist_ok=True)
        host.save(self.paths)
        host.create_bridge()
        self._write_configs()
        images = [pause_image(), worker_image(self.environment)]
        say(f"real node: images ready ({time.monotonic() - started:.1f}s)")
        deadline = time.monotonic() + timeout
        holder, containerd, kubelet, coredns, enforcer, relay = self.components()
        processes.start(holder)
        holder, containerd, kubelet, coredns, enforcer, relay = self.components()  # nsenter needs the holder's pid
        # Kept for `down`: the namespace's processes are found by it even if the holder died first.
        self._namespace_file.write_text(host.mount_namespace(holder.pid()) or "")
        processes.start(containerd)
        self._wait_containerd(containerd, deadline)
        for archive in images:
            self._ctr("images", "import", "--no-unpack=false", str(archive))
        say(f"real node: containerd ready, images imported ({time.monotonic() - started:.1f}s)")
        processes.start(coredns)
        processes.wait_healthy(coredns, self.pki, deadline)
        processes.start(relay)
        processes.wait_healthy(relay, self.pki, deadline)
        # Before any pod: a pod that starts unfiltered keeps its connections once the rules appear.
        processes.start(enforcer)
        netpol.wait_bound(enforcer, deadline)
        netpol.install_rules()
        say(f"real node: NetworkPolicy enforced (kube-network-policies on NFQUEUE {netpol.QUEUE})")
        processes.start(kubelet)
        processes.wait_healthy(kubelet, self.pki, deadline)
        self._wait_node_ready(deadline)
        self.paths.worker_values.write_text(yaml.safe_dump(worker_values(self.environment)))
        self.paths.trainer_submit.write_text(
            yaml.safe_dump(trainer_submit(self.environment, NODE_IP, self.ports.apiserver_relay))
        )
        say(
            f"real node {NODE_NAME} Ready at {NODE_IP} ({time.monotonic() - started:.1f}s; pods on {NETWORK} "
            f"behind {BRIDGE}; worker values: {self.paths.worker_values}; trainer submit file: "
            f"{self.paths.trainer_submit})"
        )

    def _write_configs(self) -> None:
        paths = self.paths
        for directory in (paths.cni_conf_dir, paths.cni_ipam_dir, paths.kubelet_root, paths.containerd_root):
            directory.mkdir(parents=True, exist_ok=True)
        paths.containerd_config.write_text(containerd_config(paths, f"docker.io/{PAUSE_IMAGE}"))
        (paths.cni_conf_dir / "10-areal-workers.conflist").write_text(json.dumps(cni_network(paths), indent=2))
        registry = registry_address(self.ports.ports)
        (paths.registry_hosts / registry).mkdir(parents=True, exist_ok=True)
        (paths.registry_hosts / registry / "hosts.toml").write_text(registry_hosts(registry, self.pki / "ca.crt"))
        if not (self.pki / "real-node.crt").exists():
            issue_cert(self.pki, "real-node", f"/O=system:nodes/CN=system:node:{NODE_NAME}")
            issue_cert(
                self.pki, "real-node-serving", f"/CN={NODE_NAME}", sans=f"IP:{NODE_IP},IP:127.0.0.1,DNS:{NODE_NAME}"
            )
        cert_kubeconfig(self.pki, "real-node", paths.kubelet_kubeconfig, self.server)
        paths.kubelet_config.write_text(
            yaml.safe_dump({**kubelet_config(paths, self.ports, self.pki), "podLogsDir": str(paths.root / "pod-logs")})
        )
        paths.corefile.write_text(corefile(self.ports, self.kubeconfig))

    def remove_images(self, repository: str) -> list[str]:
        """Removes the node's image references of `repository` (its tags and digests) and returns them. containerd
        keeps one image under every name it was pulled by, and the kubelet reports a container's image ID by any of
        them: a test that pulls the same content under a repository of its own removes it after it."""
        references = [
            reference
            for reference in self._ctr("images", "ls", "-q").split()
            if reference.startswith((f"{repository}:", f"{repository}@"))
        ]
        if references:
            self._ctr("images", "rm", *references)
        return references

    def _ctr(self, *args: str) -> str:
        result = subprocess.run(
            [_system_binary("ctr"), f"--address={self.paths.containerd_socket}", "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
        )
        if result.returncode != 0:
            raise ClusterError(f"ctr {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def _wait_containerd(self, containerd: Component, deadline: float) -> None:
        while time.monotonic() < deadline:
            if containerd.pid() is None:
                raise ClusterError(f"containerd exited during start-up; last log lines:\n{containerd.log_tail()}")
            if self.paths.containerd_socket.exists():
                try:
                    self._ctr("version")
                    return
                except ClusterError:
                    pass
            time.sleep(0.2)
        raise ClusterError(f"containerd did not answer in time; last log lines:\n{containerd.log_tail()}")

    def _wait_node_ready(self, deadline: float) -> None:
        kubectl = [binary("kubectl"), f"--kubeconfig={self.kubeconfig}"]
        while time.monotonic() < deadline:
            result = subprocess.run(
                [*kubectl, "get", "node", NODE_NAME, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status}"],
                capture_output=True,
                text=True,
            )
            if result.stdout.strip() == "True":
                return
            time.sleep(0.5)
        kubelet = self.components()[2]
        raise ClusterError(f"node {NODE_NAME} not Ready in time; kubelet's last log lines:\n{kubelet.log_tail()}")

    # --- stop ------------------------------------------------------------------------------------

    def down(self, say: Callable[[str], None]) -> None:
        """Stops everything `up` started and puts the host back; safe when the node never started."""
        if not self.paths.root.exists():
            return
        holder, containerd, kubelet, coredns, enforcer, relay = self.components()
        processes.stop([relay, enforcer, kubelet, coredns])
        namespace = host.mount_namespace(holder.pid()) or (
            self._namespace_file.read_text() if self._namespace_file.exists() else None
        )
        killed = host.kill_namespace_processes(namespace, keep=holder.pid()) if namespace else 0
        processes.stop([containerd, holder])
        host.restore(self.paths)
        netpol.remove_upstream_table()
        shutil.rmtree(self.paths.containerd_state.parent, ignore_errors=True)
        left = host.leftovers(self.paths)
        if left:
            raise ClusterError("the real node left behind: " + "; ".join(left))
        say(
            f"real node stopped ({killed} container process(es) killed; mounts, cgroups, network namespaces, "
            f"bridge, iptables chains and sysctls restored)"
        )


def _system_binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ClusterError(f"{name} is missing: `make tools` installs Debian's containerd, runc and CNI plugins")
    return path
