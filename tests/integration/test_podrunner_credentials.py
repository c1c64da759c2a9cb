"""A pod run by podrunner talks to the apiserver as its ServiceAccount, and finds helm on its PATH.

A kubelet mounts a ServiceAccount token into a pod; podrunner, which runs pods as processes of one host, hands the
process a kubeconfig of the pod's own instead (tools/podrunner/credentials.py): the token of a TokenRequest bound to
the pod, the apiserver's URL and CA, the pod's namespace. The process meets the real RBAC authorizer with it: a
ServiceAccount allowed to list configmaps lists them and is refused secrets. A pod that mounts no token (the pod's
or its ServiceAccount's automountServiceAccountToken false) gets no cluster access, not even the host's. The
kubeconfig goes with the pod, and the apiserver refuses its token once the pod is gone.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from podrunner.pods import ManagedPod
from podrunner.watch import PodRunner
from repo_paths import TOOLS_BIN
from test_podrunner_component import LOCAL_ONLY, wait_until

# What a trainer does: in-cluster config first, then KUBECONFIG (the adapter's kube_client), and helm. No `$(`
# in it: podrunner expands those in a container's command as the kubelet does.
READER = """
import os, shutil, subprocess, time
from kubernetes import client, config
try:
    config.load_incluster_config()
    print("incluster: loaded")
except config.ConfigException as error:
    print("incluster:", error)
    config.load_kube_config()
namespace = config.list_kube_config_contexts()[1]["context"]["namespace"]
core = client.CoreV1Api()
print("namespace:", namespace)
print("configmaps: listed", len(core.list_namespaced_config_map(namespace).items))
try:
    core.list_namespaced_secret(namespace)
    print("secrets: listed")
except client.ApiException as error:
    print("secrets:", error.status)
helm = subprocess.run(["helm", "version", "--short"], capture_output=True, text=True, check=True)
print("helm:", shutil.which("helm"), helm.stdout.strip())
print("service:", os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT"))
print("done", flush=True)
time.sleep(3600)
"""
ENVIRONMENT = """
import os, time
for name in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
    print(name, "=", os.environ.get(name))
print("done", flush=True)
time.sleep(3600)
"""


def program_pod(
    name: str, program: str, service_account: str | None = None, automount: bool | None = None
) -> client.V1Pod:
    """A plain pod (not a worker of the chart) whose command is a python program; it stays up once done."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels={"app": "program"}),
        spec=client.V1PodSpec(
            service_account_name=service_account,
            automount_service_account_token=automount,
            termination_grace_period_seconds=2,
            containers=[
                client.V1Container(
                    name="main", image="example.invalid/trainer:1", command=["python3", "-u", "-c", program]
                )
            ],
        ),
    )


def pod_output(core: client.CoreV1Api, namespace: str, name: str, timeout: float = 90.0) -> str:
    """The pod's log (through the apiserver's pods/log) once its program printed "done"."""
    seen = {"log": ""}

    def done() -> bool:
        try:
            seen["log"] = core.read_namespaced_pod_log(name, namespace) or ""  # None while the log is empty
        except ApiException as error:
            if error.status not in (400, 404):  # no Logs object (or container) yet
                raise
        return "done" in seen["log"].splitlines()

    try:
        wait_until(done, timeout=timeout, what=f"{namespace}/{name} printing done")
    except AssertionError as error:
        raise AssertionError(f"{error}; its log so far:\n{seen['log']}") from None
    return seen["log"]


def lines_by_key(output: str) -> dict[str, str]:
    return {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in output.splitlines() if ":" in line}


def managed(runner: PodRunner, core: client.CoreV1Api, namespace: str, name: str) -> ManagedPod:
    uid = core.read_namespaced_pod(name, namespace).metadata.uid
    return wait_until(lambda: runner.pods.get(uid), what=f"{namespace}/{name} run by the runner")


@pytest.fixture
def program_runner(kubeconfig, tmp_path, monkeypatch) -> Iterator:
    """A private PodRunner whose `python3` is this interpreter (it has the kubernetes client), started in a host
    environment that has cluster access of its own and no .tools/bin on PATH: neither must reach the pods."""
    if os.environ.get("AREAL_WORKERS_KUBECONFIG"):
        pytest.skip("runs pods as processes of this machine: local cluster only")
    monkeypatch.setenv(
        "PATH",
        os.pathsep.join(
            p for p in os.environ.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != TOOLS_BIN.resolve()
        ),
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))  # the host's (admin) access
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "192.0.2.1")  # as if the host were a pod of another cluster
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    runners: list[PodRunner] = []

    def start(namespace: str) -> PodRunner:
        runner = PodRunner(
            kubeconfig, namespace, tmp_path / f"pods-{namespace}", module_map={}, python=sys.executable
        ).start()
        runners.append(runner)
        return runner

    yield start
    for runner in runners:
        runner.stop()
        assert runner.errors == [], runner.errors
        assert not any((runner.log_dir / "credentials").glob("*")), "credentials left after the runner stopped"


def grant_configmap_listing(kube_client: client.ApiClient, namespace: str, account: str) -> None:
    """A ServiceAccount bound to a Role that allows `list configmaps` in its namespace, and nothing else."""
    client.CoreV1Api(kube_client).create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=account))
    )
    rbac = client.RbacAuthorizationV1Api(kube_client)
    rbac.create_namespaced_role(
        namespace,
        client.V1Role(
            metadata=client.V1ObjectMeta(name="list-configmaps"),
            rules=[client.V1PolicyRule(api_groups=[""], resources=["configmaps"], verbs=["list"])],
        ),
    )
    rbac.create_namespaced_role_binding(
        namespace,
        client.V1RoleBinding(
            metadata=client.V1ObjectMeta(name="list-configmaps"),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="Role", name="list-configmaps"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=account, namespace=namespace)],
        ),
    )


def token_refused(kubeconfig: dict, namespace: str) -> bool:
    api = client.CoreV1Api(config.new_client_from_config_dict(kubeconfig))
    try:
        api.list_namespaced_config_map(namespace)
    except ApiException as error:
        if error.status == 401:
            return True
        raise
    return False


@LOCAL_ONLY
def test_a_pod_talks_to_the_apiserver_as_its_service_account_and_finds_helm(
    make_namespace, core, kube_client, program_runner, kubeconfig
):
    namespace = make_namespace()
    grant_configmap_listing(kube_client, namespace, "reader")
    runner = program_runner(namespace)
    core.create_namespaced_pod(namespace, program_pod("reader", READER, service_account="reader"))

    output = lines_by_key(pod_output(core, namespace, "reader"))
    # KUBERNETES_SERVICE_* set and no token file: the in-cluster loader raises, the client falls back to KUBECONFIG.
    assert output["incluster"] == "Service token file does not exist.", output
    assert output["namespace"] == namespace  # the kubeconfig's context namespace
    assert int(output["configmaps"].removeprefix("listed ")) >= 1, output  # kube-root-ca.crt at least
    assert output["secrets"] == "403", output  # the Role allows configmaps only: the real RBAC authorizer
    helm_path, helm_version = output["helm"].split(" ", 1)
    assert Path(helm_path) == TOOLS_BIN / "helm" and helm_version.startswith("v"), output
    server = config.new_client_from_config(config_file=str(kubeconfig)).configuration.host
    assert f"https://{output['service'].replace(' ', ':')}" == server, output

    pod = managed(runner, core, namespace, "reader")
    path = pod.credentials / "kubeconfig"
    assert pod.kubelet_env["KUBECONFIG"] == str(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(pod.credentials.stat().st_mode) == 0o700
    issued = yaml.safe_load(path.read_text())
    assert issued["users"][0]["name"] == f"system:serviceaccount:{namespace}:reader"

    core.delete_namespaced_pod("reader", namespace)
    wait_until(lambda: not pod.credentials.exists(), what="the deleted pod's kubeconfig removed")
    # The token is bound to the pod, as a kubelet's is: once the pod is gone the apiserver refuses it.
    wait_until(lambda: token_refused(issued, namespace), what="the deleted pod's token refused")


@LOCAL_ONLY
def test_a_pod_that_mounts_no_token_gets_no_cluster_access(make_namespace, core, program_runner):
    namespace = make_namespace()
    core.create_namespaced_service_account(
        namespace,
        client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="quiet"), automount_service_account_token=False),
    )
    runner = program_runner(namespace)
    core.create_namespaced_pod(namespace, program_pod("sealed", ENVIRONMENT, automount=False))
    core.create_namespaced_pod(namespace, program_pod("quiet", ENVIRONMENT, service_account="quiet"))

    for name in ("sealed", "quiet"):
        output = pod_output(core, namespace, name)
        for variable in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"):
            assert f"{variable} = None" in output.splitlines(), output  # neither its own nor the host's
        pod = managed(runner, core, namespace, name)
        assert pod.credentials is None and pod.kubelet_env == {}
    assert not any((runner.log_dir / "credentials").glob("*"))
