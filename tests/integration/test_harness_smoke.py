"""Proves the test harness is real: a real apiserver with RBAC and PodSecurity, real controllers and scheduler,
KWOK nodes giving pods loopback IPs, and real helm releases driven through pyhelm3."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from localkube.pki import service_account_kubeconfig
from repo_paths import REPO

pytestmark = pytest.mark.helm4
SMOKE_CHART = Path(__file__).parent / "charts" / "smoke"


def pinned_kubernetes_version() -> str:
    for line in (REPO / "tools" / "install" / "versions.env").read_text().splitlines():
        if line.startswith("KUBERNETES_VERSION="):
            return line.split("=", 1)[1]
    raise AssertionError("KUBERNETES_VERSION missing from tools/install/versions.env")


@pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="facts of the local cluster only")
def test_local_control_plane_is_the_pinned_release_with_loopback_networking(kube_client, core):
    version = client.VersionApi(kube_client).get_code()
    assert version.git_version == pinned_kubernetes_version()

    nodes = core.list_node(label_selector="type=kwok").items
    assert len(nodes) >= 2
    for node in nodes:
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["cpu"] == "64"
        assert ipaddress.ip_network(node.spec.pod_cidr).subnet_of(ipaddress.ip_network("127.0.0.0/8"))

    kubernetes_service = core.read_namespaced_service("kubernetes", "default")
    assert ipaddress.ip_address(kubernetes_service.spec.cluster_ip).is_loopback


def test_helm_release_install_upgrade_rollback(helm_client, namespace, core, ready_pods):
    async def scenario():
        chart = await helm_client.get_chart(SMOKE_CHART)
        first = await helm_client.install_or_upgrade_release("smoke", chart, namespace=namespace)
        assert first.revision == 1
        return chart

    chart = asyncio.run(scenario())
    pods = ready_pods(namespace, "app=smoke", 3)
    assert sorted(pods) == ["smoke-0", "smoke-1", "smoke-2"]
    for pod in pods.values():
        assert ipaddress.ip_address(pod.status.pod_ip).is_loopback, pod.status.pod_ip
    assert len({pod.status.pod_ip for pod in pods.values()}) == 3

    async def upgrade_and_roll_back():
        second = await helm_client.install_or_upgrade_release("smoke", chart, {"generation": "2"}, namespace=namespace)
        assert second.revision == 2
        await second.release.rollback(1)
        return sorted(await second.release.history(), key=lambda revision: revision.revision)

    history = asyncio.run(upgrade_and_roll_back())
    assert [revision.revision for revision in history] == [1, 2, 3]
    assert history[-1].status.value == "deployed"
    assert history[0].status.value == "superseded"

    statefulset = client.AppsV1Api(core.api_client).read_namespaced_stateful_set("smoke", namespace)
    assert statefulset.spec.template.metadata.annotations["smoke/generation"] == "1"


def test_namespaced_role_is_denied_in_another_namespace(kubeconfig, make_namespace, core, kube_client, tmp_path):
    home, elsewhere = make_namespace(), make_namespace()
    core.create_namespaced_service_account(home, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="reader")))
    rbac = client.RbacAuthorizationV1Api(kube_client)
    rbac.create_namespaced_role(
        home,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["pods"], verbs=["get", "list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        home,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="pod-reader"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="pod-reader"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="reader", namespace=home)],
        ),
    )

    from kubernetes import config

    reader_config = service_account_kubeconfig(kubeconfig, home, "reader", tmp_path / "reader.yaml")
    reader = client.CoreV1Api(config.new_client_from_config(config_file=str(reader_config)))
    assert reader.list_namespaced_pod(home).items == []
    with pytest.raises(ApiException) as denied:
        reader.list_namespaced_pod(elsewhere)
    assert denied.value.status == 403
    assert f"system:serviceaccount:{home}:reader" in denied.value.body
    with pytest.raises(ApiException) as denied_write:
        reader.create_namespaced_config_map(home, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="x")))
    assert denied_write.value.status == 403


def test_pod_security_admission_enforces_restricted(make_namespace, core):
    restricted = make_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
    privileged_pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="root"),
        spec=client.V1PodSpec(
            containers=[
                client.V1Container(
                    name="main", image="example.invalid/x:1", security_context=client.V1SecurityContext(privileged=True)
                )
            ]
        ),
    )
    with pytest.raises(ApiException) as rejected:
        core.create_namespaced_pod(restricted, privileged_pod)
    assert rejected.value.status == 403
    message = json.loads(rejected.value.body)["message"]
    assert 'violates PodSecurity "restricted:latest"' in message
    assert "privileged" in message
