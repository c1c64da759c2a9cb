"""The real node's configuration as plain data: where it lives and is addressed, and the files its processes read
(containerd's config, the CNI network, the kubelet's config, CoreDNS's Corefile). Pure functions; node.py writes
them and runs the processes."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from localkube.settings import Ports

NODE_NAME = "real-node-0"
NODE_LABEL = ("areal-workers.dev/node", "real")
NODE_TAINT = ("areal-workers.dev/real-node", "true", "NoSchedule")
# The pod network: a bridge this run creates, on a range reserved for benchmarking (RFC 2544) that never leaves the
# machine; its first address is the node's IP, the pods' gateway and the cluster DNS server.
BRIDGE = "areal-br0"
NETWORK = "198.18.0.0/24"
NODE_IP = "198.18.0.1"
POD_RANGE = ("198.18.0.10", "198.18.0.250")
CNI_BIN = Path("/usr/lib/cni")
CLUSTER_DOMAIN = "cluster.local"
# Host settings the kubelet (and the bridge plugin) change; `down` puts back what it found.
SYSCTLS = (
    "vm.overcommit_memory",
    "kernel.panic",
    "kernel.panic_on_oops",
    "net.ipv4.ip_forward",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
)
CGROUP_ROOT = Path("/sys/fs/cgroup")
KUBEPODS = "kubepods"


@dataclass(frozen=True)
class NodePorts:
    """The node's listeners, after the cluster's own (localkube.settings.Ports) in its port range."""

    ports: Ports

    @property
    def kubelet(self) -> int:
        return self.ports.base + 30

    @property
    def kubelet_healthz(self) -> int:
        return self.ports.base + 31

    @property
    def coredns_health(self) -> int:
        return self.ports.base + 32

    @property
    def coredns_ready(self) -> int:
        return self.ports.base + 33

    @property
    def network_policies_metrics(self) -> int:
        return self.ports.base + 34

    @property
    def apiserver_relay(self) -> int:
        """On the node's address: the API server's own port number (realnode/relay.py)."""
        return self.ports.apiserver


@dataclass(frozen=True)
class NodePaths:
    """Everything of the node on disk: under the cluster's state (wiped by `down`) but runc's state, which belongs
    on a tmpfs."""

    state: Path
    port_base: int

    @property
    def root(self) -> Path:
        return self.state / "node"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd"

    @property
    def containerd_state(self) -> Path:
        return Path("/run/areal-workers") / str(self.port_base) / "containerd"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd.sock"

    @property
    def registry_hosts(self) -> Path:
        """containerd's registry host directory (config_path): <host:port>/hosts.toml per registry it trusts."""
        return self.root / "containerd-certs.d"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_ipam_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def corefile(self) -> Path:
        return self.root / "Corefile"

    @property
    def saved_host(self) -> Path:
        """What `up` found on the host (sysctls, iptables chains), for `down` to restore."""
        return self.root / "host-before.json"

    @property
    def worker_values(self) -> Path:
        """Helm values that put a role's pods on this node (values.worker_values)."""
        return self.root / "worker-values.yaml"

    @property
    def trainer_submit(self) -> Path:
        """A submit file for `areal-workers submit` that runs the trainer on this node (values.trainer_submit)."""
        return self.root / "trainer-submit.yaml"


def containerd_config(paths: NodePaths, sandbox_image: str) -> str:
    """containerd 1.6's config: its own root, state and socket (not the host's /var/lib/containerd), the CRI plugin
    on runc with cgroupfs, and the two settings these VMs need: no negative oom_score_adj (no CAP_SYS_RESOURCE) and
    no AppArmor."""
    return f"""version = 2
root = "{paths.containerd_root}"
state = "{paths.containerd_state}"
disabled_plugins = ["io.containerd.internal.v1.opt", "io.containerd.snapshotter.v1.btrfs",
                    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
                    "io.containerd.snapshotter.v1.aufs"]

[grpc]
  address = "{paths.containerd_socket}"

[ttrpc]
  address = "{paths.containerd_socket}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{sandbox_image}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_BIN}"
    conf_dir = "{paths.cni_conf_dir}"
    max_conf_num = 1
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{paths.registry_hosts}"
"""


def registry_hosts(address: str, ca_file: Path) -> str:
    """hosts.toml of the local registry at `address` (host:port): pulls over TLS verified against the cluster's CA;
    the kubelet passes the credentials of a pod's imagePullSecrets with each pull. The CA is given twice: containerd
    tries the `[host]` entry, then the `server` itself after a "not found", and without the CA on both that last try
    hides the registry's answer (a missing tag) under an x509 error."""
    return f"""server = "https://{address}"
ca = "{ca_file}"

[host."https://{address}"]
  capabilities = ["pull", "resolve"]
  ca = "{ca_file}"
"""


def cni_network(paths: NodePaths) -> dict:
    """A bridge network on BRIDGE with host-local addresses, no masquerade (nothing leaves the machine)."""
    return {
        "cniVersion": "0.4.0",
        "name": "areal-workers",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(paths.cni_ipam_dir),
                    "ranges": [
                        [{"subnet": NETWORK, "rangeStart": POD_RANGE[0], "rangeEnd": POD_RANGE[1], "gateway": NODE_IP}]
                    ],
                    "routes": [{"dst": NETWORK}],
                },
            },
            {"type": "loopback"},
        ],
    }


def kubelet_config(paths: NodePaths, ports: NodePorts, pki: Path) -> dict:
    """KubeletConfiguration: serving on the node IP with webhook authentication and authorization (so `kubectl
    logs/exec` go through the apiserver's identity), cgroup v1 with cgroupfs, CoreDNS on the node IP, and eviction
    and image GC thresholds low enough that a busy developer disk does not evict the tests' pods."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports.kubelet_healthz,
        "tlsCertFile": str(pki / "real-node-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "real-node-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "failSwapOn": False,
        "clusterDNS": [NODE_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "maxPods": 40,
        # Requests schedule and weigh the pods, but no CFS quota caps them: podrunner's KWOK pods run unlimited on the
        # same cores, and a worker capped at its quarter CPU took 40 s to import torch on an idle machine
        # (docs/en/decisions-local-cluster.md, L11).
        "cpuCFSQuota": False,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "syncFrequency": "5s",
        "fileCheckFrequency": "5s",
        "nodeStatusUpdateFrequency": "5s",
        "shutdownGracePeriod": "0s",
        "registerWithTaints": [{"key": NODE_TAINT[0], "value": NODE_TAINT[1], "effect": NODE_TAINT[2]}],
        "containerLogMaxSize": "10Mi",
    }


def kubelet_argv(kubelet: str, paths: NodePaths) -> list[str]:
    return [
        kubelet,
        f"--config={paths.kubelet_config}",
        f"--kubeconfig={paths.kubelet_kubeconfig}",
        f"--root-dir={paths.kubelet_root}",
        f"--cert-dir={paths.root / 'kubelet-pki'}",
        f"--hostname-override={NODE_NAME}",
        f"--node-ip={NODE_IP}",
        f"--node-labels={NODE_LABEL[0]}={NODE_LABEL[1]}",
        "--v=1",
    ]


def corefile(ports: NodePorts, kubeconfig: Path) -> str:
    """CoreDNS on the node IP: the cluster domain from the apiserver (headless Services give each StatefulSet pod a
    name), every other name refused at once (nothing outside the machine is reachable)."""
    return f"""{CLUSTER_DOMAIN}:53 {{
    bind {NODE_IP}
    errors
    health 127.0.0.1:{ports.coredns_health}
    ready 127.0.0.1:{ports.coredns_ready}
    kubernetes {CLUSTER_DOMAIN} {{
        kubeconfig {kubeconfig}
        pods verified
    }}
    cache 5
}}
"""
