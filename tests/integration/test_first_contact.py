"""What a newcomer meets first: a scheduler built for a namespace that does not exist yet, as an administrator and
as the controller identity of rbac/, an API server that does not answer, credentials it rejects; and a namespace
that exists, where building a scheduler creates nothing until the first create_workers takes the Lease."""

from __future__ import annotations

import json
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from areal_workers import ClusterAccessError, KubernetesScheduler, KubernetesSchedulerConfig
from areal_workers.runtime.lease import lease_name
from clusterlib import controller_kubeconfig, edited_kubeconfig, job
from repo_paths import REPO


def scheduler_for(namespace: str, kubeconfig: Path | str, helm_executable: str, **settings) -> KubernetesScheduler:
    config = KubernetesSchedulerConfig(
        namespace=namespace, kubeconfig=str(kubeconfig), helm_executable=helm_executable, **settings
    )
    return KubernetesScheduler(config=config, experiment_name="exp", trial_name="first")


def missing_namespace() -> str:
    return f"t-missing-{uuid.uuid4().hex[:6]}"


def exists(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespace(namespace)
    except ApiException as error:
        assert error.status == 404
        return False
    return True


def test_an_administrator_is_told_the_namespace_does_not_exist_and_nothing_is_created(
    kubeconfig, helm_executable, core
):
    namespace = missing_namespace()
    with pytest.raises(ClusterAccessError) as raised:
        scheduler_for(namespace, kubeconfig, helm_executable)
    assert raised.value.cause == "namespace-missing"
    assert str(raised.value).startswith(
        f"namespace {namespace} does not exist: create it (kubectl create namespace {namespace})"
    )
    assert "rbac/ (leases" not in str(raised.value)
    assert not exists(core, namespace)


def test_the_rbac_identity_is_told_both_causes_then_works_once_the_namespace_and_its_binding_exist(
    namespace, kubeconfig, helm_executable, core, tmp_path
):
    """The identity of rbac/ lives in one namespace; for another that does not exist the apiserver says
    'forbidden' (its RoleBinding cannot exist either), so the message names both causes and the user."""
    credentials = controller_kubeconfig(kubeconfig, namespace, tmp_path / "controller.yaml")
    target = missing_namespace()
    with pytest.raises(ClusterAccessError) as raised:
        scheduler_for(target, credentials, helm_executable)
    text = str(raised.value)
    assert raised.value.cause == "forbidden"
    assert text.startswith(
        f"user system:serviceaccount:{namespace}:areal-controller may not list pods in namespace {target}"
    )
    assert "the namespace does not exist" in text and f"kubectl create namespace {target}" in text
    assert not exists(core, target)

    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=target)))
    try:
        rbac = client.RbacAuthorizationV1Api(core.api_client)
        role = yaml.safe_load((REPO / "rbac" / "role.yaml").read_text())
        rbac.create_namespaced_role(target, role)
        rbac.create_namespaced_role_binding(
            target,
            client.V1RoleBinding(
                metadata=client.V1ObjectMeta(name="areal-controller"),
                role_ref=client.V1RoleRef(
                    api_group="rbac.authorization.k8s.io", kind="Role", name=role["metadata"]["name"]
                ),
                subjects=[client.RbacV1Subject(kind="ServiceAccount", name="areal-controller", namespace=namespace)],
            ),
        )
        scheduler = scheduler_for(target, credentials, helm_executable)
        scheduler.close()
        leases = client.CoordinationV1Api(core.api_client).list_namespaced_lease(target).items
        assert leases == []  # built and closed: nothing was written
    finally:
        core.delete_namespace(target)


def test_a_scheduler_holds_its_lease_only_while_there_is_a_release(make_scheduler, namespace, core):
    coordination = client.CoordinationV1Api(core.api_client)
    scheduler = make_scheduler("first")
    assert coordination.list_namespaced_lease(namespace).items == []
    scheduler.create_workers(job("actor", 1))
    assert [lease.metadata.name for lease in coordination.list_namespaced_lease(namespace).items] == [
        lease_name(scheduler.release)
    ]
    scheduler.delete_workers()
    assert coordination.list_namespaced_lease(namespace).items == []


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_an_api_server_that_does_not_answer_is_named_not_blamed_on_rbac(kubeconfig, helm_executable, tmp_path):
    server = f"https://127.0.0.1:{free_port()}"
    with pytest.raises(ClusterAccessError) as raised:
        scheduler_for("default", edited_kubeconfig(kubeconfig, tmp_path / "away.yaml", server=server), helm_executable)
    assert raised.value.cause == "unreachable"
    assert str(raised.value).startswith(f"cannot reach the Kubernetes API server at {server}: ")


def test_rejected_credentials_are_named(kubeconfig, helm_executable, tmp_path):
    with pytest.raises(ClusterAccessError) as raised:
        scheduler_for(
            "default", edited_kubeconfig(kubeconfig, tmp_path / "bad.yaml", token="not-a-token"), helm_executable
        )
    assert raised.value.cause == "unauthorized"
    assert "rejected the credentials (401 Unauthorized)" in str(raised.value)


def test_the_checkouts_command_finds_its_helm_without_the_tools_on_path(kubeconfig, make_namespace):
    """`make tools` links helm and kubectl into .venv/bin and the package looks for helm beside its interpreter, so
    `.venv/bin/areal-workers doctor` passes with neither .tools/bin nor .venv/bin on PATH (a newcomer's shell)."""
    assert (REPO / ".venv" / "bin" / "helm").resolve() == (REPO / ".tools" / "bin" / "helm").resolve()
    namespace = make_namespace({"pod-security.kubernetes.io/enforce": "restricted"})  # else doctor warns of it
    result = subprocess.run(
        [str(REPO / ".venv" / "bin" / "areal-workers"), "--kubeconfig", str(kubeconfig), "-n", namespace]
        + ["-o", "json", "doctor", "--no-probe"],
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "HOME": str(Path.home())},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    checks = json.loads(result.stdout)["checks"]
    assert [c for c in checks if c["status"] not in ("pass", "skip")] == [], checks
    assert any(c["name"] == "chart renders" and c["status"] == "pass" for c in checks), checks
