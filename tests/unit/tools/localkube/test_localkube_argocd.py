"""Argo CD's processes and settings for the local cluster (tools/localkube/addons/argocd.py), as data: loopback only,
ports derived from the cluster's base, and the objects an install would create. tests/integration/test_argocd.py
runs them."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from localkube.addons.argocd import CLUSTER_NAME, NAMESPACE, components, settings_manifests
from localkube.settings import Ports


def listen_addresses(argv: list[str]) -> list[str]:
    """Every address a command line asks to listen on."""
    flags = dict(arg.split("=", 1) for arg in argv if arg.startswith("--") and "=" in arg)
    pairs = dict(zip(argv, argv[1:]))
    return [value for name, value in {**flags, **pairs}.items() if name in ("--bind", "--address", "--metrics-address")]


def test_every_process_binds_loopback_on_ports_of_its_cluster(tmp_path):
    ports = Ports(base=30000)
    processes = components(tmp_path, ports, tmp_path / "kubeconfig")
    assert [c.name for c in processes] == ["argocd-redis", "argocd-repo-server", "argocd-application-controller"]
    for process in processes:
        assert set(listen_addresses(process.argv)) <= {"127.0.0.1"}, process.argv
        assert process.health_url and "127.0.0.1" in process.health_url
    assert listen_addresses(processes[0].argv) and listen_addresses(processes[1].argv)
    used = [host_port[1] for host_port in ports.all().values()]
    assert len(used) == len(set(used)), "two components share a port"
    other = {port for _, port in Ports(base=30100).all().values()}
    assert not other & set(used), "two clusters 100 ports apart collide"


def test_repo_server_finds_its_tools_and_keeps_its_files_in_the_cluster_state(tmp_path):
    repo_server = components(tmp_path, Ports(base=30000), tmp_path / "kubeconfig")[1]
    assert repo_server.env["TMPDIR"].startswith(str(tmp_path))
    assert repo_server.env["ARGOCD_GPG_ENABLED"] == "false"
    assert "--disable-tls" in repo_server.argv and "--client-ca-path=" in repo_server.argv


def test_the_cluster_secret_names_the_apiserver_and_its_credentials(tmp_path: Path):
    for name in ("ca.crt", "admin.crt", "admin.key"):
        (tmp_path / name).write_text(f"pem of {name}")
    manifests = settings_manifests("https://127.0.0.1:30003", tmp_path)
    by_name = {m["metadata"]["name"]: m for m in manifests}
    assert {m["metadata"].get("namespace", NAMESPACE) for m in manifests} == {NAMESPACE}
    secret = by_name[f"cluster-{CLUSTER_NAME}"]
    assert secret["metadata"]["labels"]["argocd.argoproj.io/secret-type"] == "cluster"
    assert secret["stringData"]["server"] == "https://127.0.0.1:30003"
    tls = json.loads(secret["stringData"]["config"])["tlsClientConfig"]
    assert base64.b64decode(tls["keyData"]).decode() == "pem of admin.key"
    assert {"argocd-cm", "argocd-secret", "default"} <= set(by_name)
