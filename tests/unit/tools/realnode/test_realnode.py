"""The real node's pure parts: its configuration files as data, the values that place workers on it, the image
archive format, and podrunner leaving its pods alone. The node itself runs in tests/integration/test_real_node.py."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import socket
import tarfile
from pathlib import Path

import pytest
from kubernetes import client

import realnode.netpol as netpol
from localkube.settings import Ports
from podrunner.pods import pod_kind
from realnode.config import (
    BRIDGE,
    NODE_IP,
    NODE_TAINT,
    NodePaths,
    NodePorts,
    cni_network,
    containerd_config,
    corefile,
    kubelet_config,
)
from realnode.host import sockets_on
from realnode.images import Layer, docker_archive, gzipped
from realnode.node import RealNode
from realnode.values import interpreter_home, worker_values


@pytest.fixture
def paths(tmp_path: Path) -> NodePaths:
    return NodePaths(tmp_path / "cluster", 16440)


def test_containerd_keeps_its_own_root_state_and_socket(paths: NodePaths) -> None:
    config = containerd_config(paths, "docker.io/local/pause:dev")
    assert f'root = "{paths.containerd_root}"' in config
    assert f'address = "{paths.containerd_socket}"' in config
    assert "/var/lib/containerd" not in config and "/run/containerd" not in config
    assert 'sandbox_image = "docker.io/local/pause:dev"' in config
    # What these VMs need: no negative oom_score_adj (no CAP_SYS_RESOURCE), no AppArmor; cgroupfs on cgroup v1.
    assert "restrict_oom_score_adj = true" in config and "disable_apparmor = true" in config
    assert "SystemdCgroup = false" in config
    assert f'conf_dir = "{paths.cni_conf_dir}"' in config


def test_the_pod_network_stays_on_the_bridge_without_masquerade(paths: NodePaths) -> None:
    bridge = cni_network(paths)["plugins"][0]
    assert bridge["bridge"] == BRIDGE and bridge["ipMasq"] is False and bridge["isGateway"] is True
    (pool,) = bridge["ipam"]["ranges"][0]
    assert pool["subnet"] == "198.18.0.0/24" and pool["gateway"] == NODE_IP
    assert bridge["ipam"]["dataDir"] == str(paths.cni_ipam_dir)  # not the host's /var/lib/cni


def test_the_kubelet_serves_on_the_node_ip_with_webhook_auth_and_registers_tainted(paths: NodePaths) -> None:
    ports = NodePorts(Ports(16440))
    config = kubelet_config(paths, ports, Path("/pki"))
    assert config["address"] == NODE_IP and config["port"] == ports.kubelet and config["readOnlyPort"] == 0
    assert config["healthzBindAddress"] == "127.0.0.1"
    assert config["authentication"]["anonymous"]["enabled"] is False
    assert config["authorization"]["mode"] == "Webhook"
    assert config["clusterDNS"] == [NODE_IP] and config["cgroupDriver"] == "cgroupfs"
    assert config["registerWithTaints"] == [{"key": NODE_TAINT[0], "value": NODE_TAINT[1], "effect": NODE_TAINT[2]}]
    assert config["containerRuntimeEndpoint"] == f"unix://{paths.containerd_socket}"
    assert config["cpuCFSQuota"] is False  # requests weigh the pods; no quota caps them (L11)


def test_node_ports_follow_the_cluster_port_base() -> None:
    first, second = NodePorts(Ports(16440)), NodePorts(Ports(18440))
    assert second.kubelet - first.kubelet == 2000
    own = Ports(16440).all().values()
    assert not {first.kubelet, first.kubelet_healthz, first.coredns_health, first.coredns_ready} & {p for _, p in own}


def test_coredns_answers_the_cluster_domain_on_the_node_ip_only() -> None:
    text = corefile(NodePorts(Ports(16440)), Path("/state/kubeconfig"))
    assert text.startswith("cluster.local:53 {") and f"bind {NODE_IP}" in text
    assert "kubeconfig /state/kubeconfig" in text and "forward" not in text


def test_worker_values_place_pods_on_the_node_and_mount_the_environment(tmp_path: Path) -> None:
    home = tmp_path / "python" / "3.11.7"
    (home / "bin").mkdir(parents=True)
    environment = tmp_path / "env"
    environment.mkdir()
    (environment / "pyvenv.cfg").write_text(f"home = {home / 'bin'}\nversion = 3.11.7\n")
    shared = tmp_path / "fileroot"
    values = worker_values(environment, shared)
    assert values["image"] == {"repository": "local/areal-worker", "tag": "dev", "pullPolicy": "Never"}
    defaults = values["workerDefaults"]
    assert defaults["nodeSelector"] == {"areal-workers.dev/node": "real"}
    assert defaults["tolerations"][0]["key"] == NODE_TAINT[0]
    mounts = {m["mountPath"]: m["readOnly"] for m in defaults["extraVolumeMounts"]}
    assert mounts == {str(environment): True, str(home): True, str(shared): False}
    assert values["tests"]["nodeSelector"] == defaults["nodeSelector"]  # the helm test Pod needs the image too


def test_a_virtualenv_without_home_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pyvenv.cfg").write_text("version = 3.11.7\n")
    with pytest.raises(ValueError, match="not a virtualenv"):
        interpreter_home(tmp_path)


def test_a_docker_archive_holds_gzipped_layers_named_by_the_digest_of_their_tar(tmp_path: Path) -> None:
    layer_tar = tmp_path / "layer.tar"
    with tarfile.open(layer_tar, "w") as layer:
        data = b"#!/bin/sh\n"
        info = tarfile.TarInfo("entrypoint")
        info.size = len(data)
        layer.addfile(info, io.BytesIO(data))
    digest = hashlib.sha256(layer_tar.read_bytes()).hexdigest()
    blob = gzipped(layer_tar)
    assert gzipped(layer_tar) == blob and blob.read_bytes() == gzipped(layer_tar).read_bytes()
    layers = [Layer(layer_tar, digest, blob)]
    out = docker_archive(tmp_path / "image.tar", "local/x:dev", layers, {"Cmd": ["/entrypoint"]})
    with tarfile.open(out) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))
        config = json.load(archive.extractfile(manifest[0]["Config"]))
        stored = archive.extractfile(manifest[0]["Layers"][0]).read()
    assert manifest[0]["RepoTags"] == ["local/x:dev"] and stored == blob.read_bytes()
    assert config["rootfs"]["diff_ids"] == [f"sha256:{digest}"]
    assert hashlib.sha256(gzip.decompress(stored)).hexdigest() == digest
    assert stored[4:8] == b"\0\0\0\0"  # no time in the header: the same tar gives the same blob digest
    assert config["config"] == {"Cmd": ["/entrypoint"]} and config["os"] == "linux"
    assert manifest[0]["Config"] == hashlib.sha256(archive_bytes(out, manifest[0]["Config"])).hexdigest() + ".json"


def archive_bytes(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as opened:
        return opened.extractfile(name).read()


def _pod(node: str | None) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="p", namespace="n", annotations={}),
        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="c", command=["x"])]),
    )


def test_podrunner_leaves_the_real_nodes_pods_to_its_kubelet() -> None:
    assert pod_kind(_pod("kwok-node-0")) == "worker"
    assert pod_kind(_pod("kwok-fault")) == "worker"  # any KWOK node, the fault tests' own included
    assert pod_kind(_pod("real-node-0")) is None  # the real kubelet runs it
    assert pod_kind(_pod(None)) is None


@pytest.mark.parametrize("kind", [socket.SOCK_STREAM, socket.SOCK_DGRAM])
def test_a_live_node_is_told_by_the_sockets_on_its_ip(kind: int) -> None:
    """A killed run's bridge is reclaimed only when nothing is bound to the node's IP: the check must see a
    listener of either protocol on an address, and not one on another address."""
    with socket.socket(socket.AF_INET, kind) as bound:
        bound.bind(("127.0.0.1", 0))
        if kind == socket.SOCK_STREAM:
            bound.listen()
        port = bound.getsockname()[1]
        proto = "tcp" if kind == socket.SOCK_STREAM else "udp"
        assert f"{proto} 127.0.0.1:{port}" in sockets_on("127.0.0.1")
        assert not [s for s in sockets_on("127.0.0.2") if s.endswith(f":{port}")]


def test_the_queue_rules_exempt_only_roots_host_sockets_and_come_before_their_jumps() -> None:
    rules = netpol.queue_rules()
    jumps = [i for i, rule in enumerate(rules) if rule[0] == "-I"]
    assert jumps == [len(rules) - 2, len(rules) - 1]  # chains complete before any packet enters them
    owner = [rule for rule in rules if "owner" in rule]
    assert owner == [["-A", netpol.HOST_CHAIN, "-m", "owner", "--uid-owner", "0", "-j", "RETURN"]]
    # The owner match is valid on POSTROUTING only: INPUT jumps straight to the queue chain.
    assert ["-I", "INPUT", "1", "-j", netpol.CHAIN] in rules
    assert ["-I", "POSTROUTING", "1", "-j", netpol.HOST_CHAIN] in rules
    queued = [rule for rule in rules if "NFQUEUE" in rule]
    assert {rule[2] for rule in queued} == {"-s", "-d"} and all("--queue-bypass" not in rule for rule in queued)


def test_the_enforcer_fails_closed_on_loopback_for_the_real_node(tmp_path: Path) -> None:
    component = netpol.enforcer("/bin/kube-network-policies", tmp_path / "kubeconfig", 16474, tmp_path)
    assert "--fail-open=false" in component.argv and "--hostname-override=real-node-0" in component.argv
    assert "--metrics-bind-address=127.0.0.1:16474" in component.argv
    assert component.health_url == "http://127.0.0.1:16474/metrics"


def test_a_bound_queue_is_read_from_the_kernels_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "nfnetlink_queue"
    monkeypatch.setattr(netpol, "QUEUES", table)
    assert not netpol.queue_bound()  # no table: netfilter's queue support is missing
    table.write_text("    7  1234     0 2   128     0     0        0  1\n")
    assert not netpol.queue_bound()
    table.write_text(
        "    7  1234     0 2   128     0     0        0  1\n  100  12711     0 2   128     0     0        0  1\n"
    )
    assert netpol.queue_bound()


def test_connections_a_stopped_node_left_in_time_wait_do_not_count_as_a_live_node() -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client_side = socket.create_connection(("127.0.0.1", port))
        accepted, _ = listener.accept()
        assert [s for s in sockets_on("127.0.0.1") if s.endswith(f":{port}")] == [f"tcp 127.0.0.1:{port}"]
        accepted.close()  # the node's side closes first: its end, on the node's address, waits in TIME_WAIT
        client_side.close()
    assert not [s for s in sockets_on("127.0.0.1") if s.endswith(f":{port}")]


def test_a_missing_node_is_explained_with_the_command_that_starts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the tests that need the node say when it does not run (tests/integration/conftest.py)."""
    node = RealNode(tmp_path / "cluster", tmp_path / "pki", Ports(), "https://127.0.0.1:16443", tmp_path, tmp_path)
    monkeypatch.setattr(RealNode, "missing", lambda self: "the real node needs root")
    never = node.absence()
    assert never.startswith("the local cluster runs no real node (it was started without one, e.g. NODE=kwok): ")
    assert "`make cluster-up NODE=real`" in never
    assert never.endswith("; this machine cannot run it now: the real node needs root")
    monkeypatch.setattr(RealNode, "missing", lambda self: "")
    assert node.absence().endswith("(root on Debian; docs/en/real-node.md)")
    node.paths.root.mkdir(parents=True)
    stopped = node.absence()
    assert "was started but has stopped (node-mounts, containerd, kubelet, coredns," in stopped
    assert "`make cluster-up NODE=real`" in stopped
    monkeypatch.setattr(RealNode, "is_running", lambda self: True)
    assert node.absence() == ""
