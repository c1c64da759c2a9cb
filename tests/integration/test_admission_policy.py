"""rbac/cluster/admission-policy.yaml on the real API server: what RBAC cannot refuse the controller's identity, the
policy does, with a message that says what to change, and it leaves everyone else alone; removing one namespace as the
deployment guide does leaves it in force for the others.

Each test's namespace gets rbac/ and its own copy of the policy, bound to that namespace alone (localkube/rbac.py):
the policy's bindings are cluster-scoped, and other tests on the shared cluster must not run under a copy they did
not ask for. The whole scheduler suite runs under it too: the `rbac` identity of tests/integration/conftest.py
applies rbac/ the same way.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import subprocess
import time
import uuid

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.config import kube_config

from areal_workers import SchedulerError
from clusterlib import controller_kubeconfig, job, wait_for
from docs_pages import page_commands
from localkube.pki import service_account_kubeconfig
from localkube.rbac import (
    POLICY_FILE as POLICY_PATH,
    RBAC,
    policy_supported,
    refused_as_controller,
    scoped_policy,
    wait_in_force,
)
from repo_paths import REPO, TOOLS_BIN

CHART = REPO / "charts" / "areal-workers"
POLICY_FILE = "rbac/cluster/admission-policy.yaml"


@pytest.fixture(autouse=True)
def _needs_the_api(kubeconfig):
    if policy_supported(kubeconfig):
        return
    message = "the API server does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicies"
    if os.environ.get("AREAL_WORKERS_KUBECONFIG"):  # another cluster may predate them; the local one (1.34) may not
        pytest.skip(message)
    pytest.fail(message)


@pytest.fixture
def identity() -> str:
    """Schedulers run as the controller ServiceAccount of rbac/, under the policy."""
    return "rbac"


@pytest.fixture
def controller(kubeconfig, namespace, tmp_path):
    """A CoreV1Api of the controller's ServiceAccount in the test's namespace, rbac/ and the policy in force."""
    api = kube_config.new_client_from_config(
        config_file=controller_kubeconfig(kubeconfig, namespace, tmp_path / "controller.yaml")
    )
    yield client.CoreV1Api(api)
    api.close()


def token_secret(name: str, service_account: str) -> client.V1Secret:
    """A Secret the token controller fills with a token of `service_account`."""
    return client.V1Secret(
        metadata=client.V1ObjectMeta(name=name, annotations={"kubernetes.io/service-account.name": service_account}),
        type="kubernetes.io/service-account-token",
    )


def refusal(call) -> ApiException:
    with pytest.raises(ApiException) as caught:
        call()
    return caught.value


def message(error: ApiException) -> str:
    return json.loads(error.body)["message"]


def filled_token(core: client.CoreV1Api, namespace: str, name: str) -> str:
    return wait_for(
        lambda: (core.read_namespaced_secret(name, namespace).data or {}).get("token"),
        timeout=30,
        what=f"the token controller filling Secret {name}",
    )


def test_without_the_policy_the_controller_can_mint_and_read_another_service_accounts_token(
    kubeconfig, core, make_namespace, tmp_path
):
    """What the policy is for: the Role's create and get on Secrets alone let the controller act as any
    ServiceAccount of its namespace."""
    namespace = make_namespace()
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="ops")))
    api = kube_config.new_client_from_config(
        config_file=controller_kubeconfig(kubeconfig, namespace, tmp_path / "controller.yaml", policy=False)
    )
    try:
        as_controller = client.CoreV1Api(api)
        as_controller.create_namespaced_secret(namespace, token_secret("ops-token", "ops"))
        assert filled_token(as_controller, namespace, "ops-token")
    finally:
        api.close()


def test_the_controller_cannot_create_a_token_secret_for_another_service_account(controller, core, namespace):
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="ops")))
    error = refusal(lambda: controller.create_namespaced_secret(namespace, token_secret("ops-token", "ops")))
    assert error.status == 403, error
    text = message(error)
    assert "ValidatingAdmissionPolicy 'areal-controller-secrets-" in text, text
    assert (
        "the areal-workers controller may write and delete only Helm release Secrets (type helm.sh/release.v1), "
        "not Secret ops-token of type kubernetes.io/service-account-token" in text
    ), text
    assert POLICY_FILE in text, text
    # Nor any other Secret that is not Helm's.
    opaque = client.V1Secret(metadata=client.V1ObjectMeta(name="notes"), string_data={"a": "b"})
    assert refusal(lambda: controller.create_namespaced_secret(namespace, opaque)).status == 403


def test_the_controller_cannot_delete_or_overwrite_a_secret_that_is_not_helms(controller, core, namespace):
    core.create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="database"), string_data={"password": "x"})
    )
    secret = controller.read_namespaced_secret("database", namespace)  # reading stays: Helm lists every Secret
    secret.string_data = {"password": "mine"}
    assert refusal(lambda: controller.replace_namespaced_secret("database", namespace, secret)).status == 403
    error = refusal(lambda: controller.delete_namespaced_secret("database", namespace))
    assert error.status == 403 and "not Secret database of type Opaque" in message(error), message(error)
    assert core.read_namespaced_secret("database", namespace).data["password"] == "eA=="


def test_administrators_are_not_matched(controller, core, namespace):
    """The policy picks the controller's requests by user name: the admin creating the same Secret is admitted."""
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="ops")))
    core.create_namespaced_secret(namespace, token_secret("ops-token", "ops"))
    assert filled_token(core, namespace, "ops-token")


def service_account_client(kubeconfig, namespace: str, account: str, out) -> client.CoreV1Api:
    """A CoreV1Api that authenticates with a token of `account`, as its pod would (not impersonation)."""
    return client.CoreV1Api(
        kube_config.new_client_from_config(
            config_file=str(service_account_kubeconfig(kubeconfig, namespace, account, out))
        )
    )


def test_the_chart_rendered_identities_of_a_release_named_like_the_chart_are_under_the_policy(
    controller, kubeconfig, helm_executable, core, namespace, tmp_path
):
    """Release areal-workers-infra with controllerRbac.create: its ServiceAccounts (named by the chart, read back from
    the cluster) are matched by the policy, so the controller's token cannot mint another ServiceAccount's token
    and the reaper's cannot delete a Secret that is not Helm's. (Its fullname is the release name; the chart used to
    name them areal-workers-infra-controller and -reaper, which the policy did not match.)"""
    installed = subprocess.run(
        [
            helm_executable,
            "--kubeconfig",
            str(kubeconfig),
            "install",
            "areal-workers-infra",
            str(CHART),
            "-n",
            namespace,
            "--set",
            "controllerRbac.create=true",
            "--set",
            "reaper.enabled=true",
            "--set",
            "reaper.image.repository=registry.invalid/areal-workers/reaper",
            "--set",
            "reaper.schedule=0 0 1 1 *",  # never during the test
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert installed.returncode == 0, installed.stderr
    accounts = {
        account.metadata.labels["app.kubernetes.io/component"]: account.metadata.name
        for account in core.list_namespaced_service_account(
            namespace, label_selector="app.kubernetes.io/instance=areal-workers-infra"
        ).items
        if account.metadata.labels.get("app.kubernetes.io/component") in ("controller", "reaper")
    }
    assert set(accounts) == {"controller", "reaper"}, accounts

    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="ops")))
    as_controller = service_account_client(kubeconfig, namespace, accounts["controller"], tmp_path / "controller.yaml")
    error = refusal(lambda: as_controller.create_namespaced_secret(namespace, token_secret("ops-token", "ops")))
    assert error.status == 403, (accounts["controller"], error)
    text = message(error)
    assert "ValidatingAdmissionPolicy 'areal-controller-secrets-" in text, text
    assert "not Secret ops-token of type kubernetes.io/service-account-token" in text, text
    assert as_controller.list_namespaced_secret(namespace).items is not None  # its Role is in force: reading stays

    core.create_namespaced_secret(
        namespace, client.V1Secret(metadata=client.V1ObjectMeta(name="database"), string_data={"password": "x"})
    )
    as_reaper = service_account_client(kubeconfig, namespace, accounts["reaper"], tmp_path / "reaper.yaml")
    error = refusal(lambda: as_reaper.delete_namespaced_secret("database", namespace))
    assert error.status == 403, (accounts["reaper"], error)
    assert "not Secret database of type Opaque" in message(error), message(error)
    assert core.read_namespaced_secret("database", namespace)


def test_the_controller_cannot_expose_workers_outside_the_cluster(controller, namespace):
    service = client.V1Service(
        metadata=client.V1ObjectMeta(name="open"),
        spec=client.V1ServiceSpec(type="NodePort", ports=[client.V1ServicePort(port=8000)]),
    )
    error = refusal(lambda: controller.create_namespaced_service(namespace, service))
    assert error.status == 403 and "Service open (type NodePort)" in message(error), message(error)


# --- StatefulSets, through the scheduler: the policy's message reaches the error the adapter raises ----------------


def create_refused(make_scheduler, trial: str, **settings) -> str:
    """The text of the SchedulerError that create_workers raises for a scheduler with `settings`."""
    scheduler = make_scheduler(trial, **settings)
    with pytest.raises(SchedulerError) as caught:
        scheduler.create_workers(job("actor", 1))
    text = str(caught.value)
    assert "ValidatingAdmissionPolicy 'areal-controller-statefulsets-" in text, text
    assert POLICY_FILE in text, text
    return text


PRIVILEGED = {"workerDefaults": {"containerSecurityContext": {"privileged": True, "allowPrivilegeEscalation": None}}}
HOST_PATH = {"workerDefaults": {"extraVolumes": [{"name": "node-root", "hostPath": {"path": "/"}}]}}


def test_a_privileged_role_is_refused(make_scheduler):
    text = create_refused(make_scheduler, "privileged", extra_values=PRIVILEGED)
    assert "privileged containers (worker) are refused for the areal-workers controller" in text, text
    assert "remove privileged from containerSecurityContext" in text, text


def test_a_privileged_release_installed_with_helm_as_the_controller_is_refused(
    kubeconfig, helm_executable, namespace, tmp_path
):
    credentials = controller_kubeconfig(kubeconfig, namespace, tmp_path / "controller.yaml")
    result = subprocess.run(
        [
            helm_executable,
            "--kubeconfig",
            credentials,
            "install",
            "demo",
            str(CHART),
            "-n",
            namespace,
            "--set",
            "roles.actor.replicas=1",
            "--set",
            "tests.enabled=false",
            "--set",
            "workerDefaults.containerSecurityContext.privileged=true",
            "--set",
            "workerDefaults.containerSecurityContext.allowPrivilegeEscalation=null",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "privileged containers (worker) are refused" in result.stderr, result.stderr


def test_escalation_and_added_capabilities_are_refused_but_ipc_lock_is_not(make_scheduler):
    escalating = {"workerDefaults": {"containerSecurityContext": {"allowPrivilegeEscalation": True}}}
    text = create_refused(make_scheduler, "escalating", extra_values=escalating)
    assert "allowPrivilegeEscalation true (worker) is refused" in text, text
    adding = {"workerDefaults": {"containerSecurityContext": {"capabilities": {"add": ["SYS_ADMIN", "IPC_LOCK"]}}}}
    text = create_refused(make_scheduler, "adding", extra_values=adding)
    assert "added capabilities (worker: SYS_ADMIN) are refused" in text, text
    # IPC_LOCK is what rdma.enabled adds.
    ipc_lock = {"workerDefaults": {"containerSecurityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}}
    assert make_scheduler("ipc-lock", extra_values=ipc_lock).create_workers(job("actor", 1)) == ["actor/0"]


def wait_admitted_as_controller(kubeconfig, namespace: str, values: dict, tmp_path) -> None:
    """Until a server-side dry run of the chart's StatefulSet with `values`, as the controller, is admitted: the
    policy reads the namespace from the API server's informer, which sees a new label a moment later."""
    values_file = tmp_path / "dry-run.json"
    values_file.write_text(json.dumps({"roles": {"actor": {"replicas": 1}}, **values}))
    rendered = subprocess.run(
        [str(TOOLS_BIN / "helm"), "template", "probe", str(CHART), "-n", namespace, "-f", str(values_file)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    statefulset = next(d for d in rendered.split("\n---") if "kind: StatefulSet" in d)

    def admitted() -> bool:
        return (
            subprocess.run(
                [
                    str(TOOLS_BIN / "kubectl"),
                    "--kubeconfig",
                    str(kubeconfig),
                    "create",
                    "-n",
                    namespace,
                    "--dry-run=server",
                    f"--as=system:serviceaccount:{namespace}:areal-controller",
                    "-f",
                    "-",
                ],
                input=statefulset,
                capture_output=True,
                text=True,
            ).returncode
            == 0
        )

    wait_for(admitted, timeout=30, what="the namespace's exception in force")


def test_a_host_path_volume_is_refused_unless_the_namespace_allows_it(
    make_scheduler, core, namespace, kubeconfig, tmp_path
):
    text = create_refused(make_scheduler, "host-path", extra_values=HOST_PATH)
    assert "hostPath volumes (node-root (/)) are refused" in text, text
    assert "label the namespace areal-workers.dev/allow-host-path=true" in text, text

    core.patch_namespace(namespace, {"metadata": {"labels": {"areal-workers.dev/allow-host-path": "true"}}})
    wait_admitted_as_controller(kubeconfig, namespace, HOST_PATH, tmp_path)
    assert make_scheduler("host-path-allowed", extra_values=HOST_PATH).create_workers(job("actor", 1)) == ["actor/0"]


def test_host_network_is_refused_unless_the_namespace_allows_it(make_scheduler, core, namespace, kubeconfig, tmp_path):
    host_network = {"workerDefaults": {"hostNetwork": True}}
    text = create_refused(make_scheduler, "host-network", extra_values=host_network)
    assert "hostNetwork is refused for the areal-workers controller" in text, text
    assert "areal-workers.dev/allow-host-network=true" in text, text
    # The other exception, in force, does not allow it.
    core.patch_namespace(namespace, {"metadata": {"labels": {"areal-workers.dev/allow-host-path": "true"}}})
    wait_admitted_as_controller(kubeconfig, namespace, HOST_PATH, tmp_path)
    create_refused(make_scheduler, "host-network-2", extra_values=host_network)


def test_workers_running_as_another_service_account_are_refused_unless_the_namespace_lists_it(
    make_scheduler, core, namespace, kubeconfig, tmp_path
):
    core.create_namespaced_service_account(namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="ops")))
    text = create_refused(make_scheduler, "other-account", service_account="ops")
    assert "runs as ServiceAccount ops, but the areal-workers controller may run workers only as their " in text, text
    assert "KubernetesSchedulerConfig.service_account=None" in text, text
    assert "areal-workers.dev/worker-service-accounts" in text, text

    core.patch_namespace(namespace, {"metadata": {"annotations": {"areal-workers.dev/worker-service-accounts": "ops"}}})
    wait_admitted_as_controller(kubeconfig, namespace, {"serviceAccount": {"create": False, "name": "ops"}}, tmp_path)
    scheduler = make_scheduler("other-account-listed", service_account="ops")
    assert scheduler.create_workers(job("actor", 1)) == ["actor/0"]


def test_the_policy_in_force_is_the_files_bound_to_the_namespace_alone(controller, kube_client, namespace):
    """Each test's copy: named after the namespace, selecting it alone, owned by it (deleted with it)."""
    admission = client.AdmissionregistrationV1Api(kube_client)
    uid = client.CoreV1Api(kube_client).read_namespace(namespace).metadata.uid
    for kind in ("secrets", "statefulsets", "services"):
        name = f"areal-controller-{kind}-{namespace}"
        policy = admission.read_validating_admission_policy(name)
        binding = admission.read_validating_admission_policy_binding(name)
        assert binding.spec.policy_name == name
        assert binding.spec.match_resources.namespace_selector.match_labels == {
            "kubernetes.io/metadata.name": namespace
        }
        assert [(o.kind, o.name, o.uid) for o in policy.metadata.owner_references] == [("Namespace", namespace, uid)]
        assert not (policy.status.type_checking and policy.status.type_checking.expression_warnings), name


# --- PodSecurity baseline and the rest: any StatefulSet the controller writes, whatever made it ---------------------
#
# The controller may create StatefulSets with any pod template (the chart passes securityContexts, volumes, annotations
# and priorityClassName through from values, and nothing stops it from writing one without the chart), so each field
# is set on the chart's own StatefulSet and sent as the controller, with its token, in a server-side dry run.


@pytest.fixture
def apps_controller(kubeconfig, namespace, tmp_path):
    """An AppsV1Api of the controller's ServiceAccount in the test's namespace, rbac/ and the policy in force."""
    api = kube_config.new_client_from_config(
        config_file=controller_kubeconfig(kubeconfig, namespace, tmp_path / "controller.yaml")
    )
    yield client.AppsV1Api(api)
    api.close()


@pytest.fixture(scope="module")
def baseline_controller(kube_client, kubeconfig, tmp_path_factory):
    """(AppsV1Api of the controller, its namespace) for the tests that only send server-side dry runs, which write
    nothing: one namespace with rbac/ and the policy in force serves them all, instead of one each (BASELINE has
    over twenty cases)."""
    from podrunner.watch import PRIVATE_LABEL, PRIVATE_VALUE

    core = client.CoreV1Api(kube_client)
    namespace = f"t-admission-baseline-{uuid.uuid4().hex[:6]}"
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace, labels={PRIVATE_LABEL: PRIVATE_VALUE}))
    )
    credentials = controller_kubeconfig(kubeconfig, namespace, tmp_path_factory.mktemp("baseline") / "controller.yaml")
    api = kube_config.new_client_from_config(config_file=credentials)
    yield client.AppsV1Api(api), namespace
    api.close()
    core.delete_namespace(namespace, propagation_policy="Background")


def chart_statefulset(namespace: str, values: dict | None = None) -> dict:
    """The chart's StatefulSet of role actor, as helm template renders it for release `probe` (a copy of its own)."""
    return copy.deepcopy(rendered_statefulset(namespace, json.dumps(values or {}, sort_keys=True)))


@functools.cache
def rendered_statefulset(namespace: str, values: str) -> dict:
    rendered = subprocess.run(
        [
            str(TOOLS_BIN / "helm"),
            "template",
            "probe",
            str(CHART),
            "-n",
            namespace,
            "-f",
            "-",
        ],
        input=json.dumps({"roles": {"actor": {"replicas": 1}}, **json.loads(values)}),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    [statefulset] = [d for d in yaml.safe_load_all(rendered) if d and d["kind"] == "StatefulSet"]
    return statefulset


def dry_run(apps: client.AppsV1Api, namespace: str, statefulset: dict) -> None:
    apps.create_namespaced_stateful_set(namespace, statefulset, dry_run="All")


def baseline_refusal(apps: client.AppsV1Api, namespace: str, statefulset: dict) -> str:
    error = refusal(lambda: dry_run(apps, namespace, statefulset))
    assert error.status == 403, error  # the policy's, not the API's validation (422)
    text = message(error)
    assert "ValidatingAdmissionPolicy 'areal-controller-statefulsets-" in text, text
    assert "is refused for the areal-workers controller" in text or "are refused for the areal-workers" in text, text
    assert text.endswith("(rbac/cluster/admission-policy.yaml)"), text
    return text


def pod_of(statefulset: dict) -> dict:
    return statefulset["spec"]["template"]["spec"]


def worker_of(statefulset: dict) -> dict:
    return pod_of(statefulset)["containers"][0]


def pod_context(**fields):
    return lambda s: pod_of(s)["securityContext"].update(fields)


def container_context(**fields):
    return lambda s: worker_of(s)["securityContext"].update(fields)


def pod_annotation(key: str, value: str):
    return lambda s: s["spec"]["template"]["metadata"]["annotations"].update({key: value})


def volume(source: dict):
    return lambda s: pod_of(s).setdefault("volumes", []).append({"name": "data", **source})


def init_container(**security):
    """An init container (the chart renders none; the controller could)."""

    def change(statefulset: dict) -> None:
        worker = worker_of(statefulset)
        init = {
            "name": "setup",
            "image": worker["image"],
            "command": ["true"],
            "securityContext": {**worker["securityContext"], **security},
        }
        pod_of(statefulset)["initContainers"] = [init]

    return change


def without_pod_seccomp(statefulset: dict) -> None:
    """The pod-level field off, so that a seccomp annotation is not refused by the API's own validation first (it
    wants annotation and field to agree)."""
    del pod_of(statefulset)["securityContext"]["seccompProfile"]


def both(*changes):
    return lambda s: [change(s) for change in changes]


BASELINE = [
    pytest.param(
        container_context(seLinuxOptions={"type": "spc_t"}),
        "seLinuxOptions (worker) with a type other than",
        id="selinux-type",
    ),
    pytest.param(
        pod_context(seLinuxOptions={"type": "unconfined_t"}), "seLinuxOptions (pod) with a type", id="selinux-pod-type"
    ),
    pytest.param(container_context(seLinuxOptions={"user": "system_u"}), "seLinuxOptions (worker)", id="selinux-user"),
    pytest.param(pod_context(seLinuxOptions={"role": "system_r"}), "seLinuxOptions (pod)", id="selinux-pod-role"),
    pytest.param(
        init_container(seLinuxOptions={"type": "spc_t"}), "seLinuxOptions (setup)", id="selinux-init-container"
    ),
    pytest.param(
        pod_context(seccompProfile={"type": "Unconfined"}), "an Unconfined seccomp profile (pod)", id="seccomp-pod"
    ),
    pytest.param(
        container_context(seccompProfile={"type": "Unconfined"}),
        "an Unconfined seccomp profile (worker)",
        id="seccomp-container",
    ),
    pytest.param(
        both(without_pod_seccomp, pod_annotation("seccomp.security.alpha.kubernetes.io/pod", "unconfined")),
        "an Unconfined seccomp profile (annotation seccomp.security.alpha.kubernetes.io/pod)",
        id="seccomp-annotation",
    ),
    pytest.param(
        pod_context(appArmorProfile={"type": "Unconfined"}), "an Unconfined AppArmor profile (pod)", id="apparmor-pod"
    ),
    pytest.param(
        container_context(appArmorProfile={"type": "Unconfined"}),
        "an Unconfined AppArmor profile (worker)",
        id="apparmor-container",
    ),
    pytest.param(
        pod_annotation("container.apparmor.security.beta.kubernetes.io/worker", "unconfined"),
        "an Unconfined AppArmor profile (annotation container.apparmor.security.beta.kubernetes.io/worker)",
        id="apparmor-annotation",
    ),
    pytest.param(
        # The API accepts Unmasked only in a user namespace.
        both(container_context(procMount="Unmasked"), lambda s: pod_of(s).update(hostUsers=False)),
        "procMount other than Default (worker: Unmasked)",
        id="procmount",
    ),
    pytest.param(
        pod_context(
            sysctls=[{"name": "kernel.shm_rmid_forced", "value": "1"}, {"name": "kernel.msgmax", "value": "1"}]
        ),
        "sysctls outside PodSecurity baseline's safe set (kernel.msgmax)",
        id="sysctls",
    ),
    pytest.param(
        lambda s: worker_of(s)["readinessProbe"]["httpGet"].update(host="169.254.169.254"),
        "a host in a probe or lifecycle handler (worker)",
        id="probe-host",
    ),
    pytest.param(
        lambda s: worker_of(s).update(
            lifecycle={"preStop": {"httpGet": {"host": "10.0.0.1", "path": "/", "port": 80}}}
        ),
        "a host in a probe or lifecycle handler (worker)",
        id="lifecycle-host",
    ),
    pytest.param(
        lambda s: pod_of(s).update(priorityClassName="system-node-critical"),
        "priorityClassName system-node-critical is refused",
        id="priority-node-critical",
    ),
    pytest.param(
        lambda s: pod_of(s).update(priorityClassName="system-cluster-critical"),
        "priorityClassName system-cluster-critical is refused",
        id="priority-cluster-critical",
    ),
    pytest.param(
        lambda s: pod_of(s).update(nodeName="kwok-node-0"),
        "nodeName kwok-node-0 is refused for the areal-workers controller: it bypasses the scheduler and Kueue",
        id="node-name",
    ),
    pytest.param(lambda s: pod_of(s).update(hostPID=True), "hostPID and hostIPC are refused", id="host-pid"),
    pytest.param(lambda s: pod_of(s).update(hostIPC=True), "hostPID and hostIPC are refused", id="host-ipc"),
    pytest.param(
        lambda s: worker_of(s)["ports"].append({"name": "exposed", "containerPort": 9999, "hostPort": 9999}),
        "hostPort (worker: 9999)",
        id="host-port",
    ),
    pytest.param(volume({"nfs": {"server": "nfs.example.com", "path": "/"}}), "volumes (data (nfs))", id="nfs"),
    pytest.param(
        volume({"gitRepo": {"repository": "https://example.com/x.git"}}), "volumes (data (gitRepo))", id="gitrepo"
    ),
    pytest.param(
        volume({"iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "iqn.2001-04.com.example:disk", "lun": 0}}),
        "volumes (data (iscsi))",
        id="iscsi",
    ),
    pytest.param(
        volume({"flexVolume": {"driver": "example.com/driver"}}), "volumes (data (flexVolume))", id="flexvolume"
    ),
    pytest.param(volume({"rbd": {"monitors": ["10.0.0.1:6789"], "image": "disk"}}), "volumes (data (rbd))", id="rbd"),
    pytest.param(volume({"cephfs": {"monitors": ["10.0.0.1:6789"]}}), "volumes (data (cephfs))", id="cephfs"),
    pytest.param(
        volume({"glusterfs": {"endpoints": "gluster", "path": "volume"}}), "volumes (data (glusterfs))", id="glusterfs"
    ),
    pytest.param(
        volume({"awsElasticBlockStore": {"volumeID": "vol-0123"}}),
        "volumes (data (awsElasticBlockStore))",
        id="cloud-disk",
    ),
]


@pytest.mark.parametrize("change, refused", BASELINE)
def test_a_statefulset_beyond_podsecurity_baseline_is_refused_naming_the_field(baseline_controller, change, refused):
    apps_controller, namespace = baseline_controller
    statefulset = chart_statefulset(namespace)
    change(statefulset)
    text = baseline_refusal(apps_controller, namespace, statefulset)
    assert f"StatefulSet {statefulset['metadata']['name']}: {refused}" in text, text


def test_host_process_is_refused_even_where_host_network_is_allowed(
    apps_controller, core, namespace, kubeconfig, tmp_path
):
    """The API wants hostNetwork with hostProcess, so this one needs the namespace's host-network exception."""
    core.patch_namespace(namespace, {"metadata": {"labels": {"areal-workers.dev/allow-host-network": "true"}}})
    wait_admitted_as_controller(kubeconfig, namespace, {"workerDefaults": {"hostNetwork": True}}, tmp_path)
    statefulset = chart_statefulset(namespace, {"workerDefaults": {"hostNetwork": True}})
    pod_of(statefulset)["securityContext"]["windowsOptions"] = {"hostProcess": True}
    text = baseline_refusal(apps_controller, namespace, statefulset)
    assert "windowsOptions.hostProcess true (pod) is refused" in text, text
    statefulset = chart_statefulset(namespace, {"workerDefaults": {"hostNetwork": True}})
    worker_of(statefulset)["securityContext"]["windowsOptions"] = {"hostProcess": True}
    text = baseline_refusal(apps_controller, namespace, statefulset)
    assert "windowsOptions.hostProcess true (worker) is refused" in text, text


def test_the_message_says_how_to_mount_shared_storage_and_a_listed_volume_type_passes(
    apps_controller, core, namespace, kubeconfig, tmp_path
):
    nfs = {"sharedStorage": {"enabled": True, "volume": {"nfs": {"server": "nfs.example.com", "path": "/areal"}}}}
    text = baseline_refusal(apps_controller, namespace, chart_statefulset(namespace, nfs))
    assert "volumes (shared-storage (nfs)) are refused" in text, text
    assert "a PersistentVolumeClaim (sharedStorage.claimName)" in text, text
    assert f"areal-workers.dev/worker-volume-types of namespace {namespace}" in text, text

    core.patch_namespace(namespace, {"metadata": {"annotations": {"areal-workers.dev/worker-volume-types": "nfs"}}})
    wait_admitted_as_controller(kubeconfig, namespace, nfs, tmp_path)
    dry_run(apps_controller, namespace, chart_statefulset(namespace, nfs))
    git = chart_statefulset(namespace)
    volume({"gitRepo": {"repository": "https://example.com/x.git"}})(git)
    assert "volumes (data (gitRepo)) are refused" in baseline_refusal(apps_controller, namespace, git)


ADMITTED = {
    "workerDefaults": {
        "rdma": {"enabled": True},  # IPC_LOCK
        "priorityClassName": "areal-high",
        "podAnnotations": {"container.apparmor.security.beta.kubernetes.io/worker": "runtime/default"},
        "podSecurityContext": {
            "seLinuxOptions": {"type": "container_t", "level": "s0:c1,c2"},
            "appArmorProfile": {"type": "RuntimeDefault"},
            "sysctls": [
                {"name": "net.ipv4.tcp_keepalive_time", "value": "60"},
                {"name": "net.ipv4.tcp_rmem", "value": "4096 87380 6291456"},
            ],
        },
        "containerSecurityContext": {
            "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/worker.json"},
            "procMount": "Default",
        },
        "extraVolumes": [
            {"name": "config", "configMap": {"name": "areal-config"}},
            {"name": "credentials", "secret": {"secretName": "areal-credentials"}},
            {"name": "scratch", "emptyDir": {}},
            {
                "name": "info",
                "downwardAPI": {"items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]},
            },
            {"name": "bundle", "projected": {"sources": [{"configMap": {"name": "areal-config"}}]}},
            {"name": "driver", "csi": {"driver": "secrets-store.csi.k8s.io"}},
        ],
    },
    "sharedStorage": {"enabled": True, "claimName": "areal-shared"},
}


def test_the_charts_statefulsets_are_admitted_by_default_and_with_what_baseline_allows(baseline_controller):
    apps_controller, namespace = baseline_controller
    dry_run(apps_controller, namespace, chart_statefulset(namespace))
    dry_run(apps_controller, namespace, chart_statefulset(namespace, ADMITTED))


DEPLOYMENT_GUIDE = "docs/en/deployment.md"


def guide_rbac_commands(verb: str) -> list[str]:
    """The deployment guide's `kubectl VERB ... -f rbac/...` commands, in its order (its namespace is rl)."""
    return [c for c in page_commands(DEPLOYMENT_GUIDE) if c.startswith(f"kubectl {verb} ") and " -f rbac/" in c]


def test_the_deployment_guides_removal_of_one_namespace_leaves_the_policy_in_force_in_another(
    kubeconfig, core, make_namespace, tmp_path
):
    # A regression: the guide's removal step `kubectl delete -n rl -f rbac/` once deleted the cluster-scoped policy
    # too, leaving the controllers of every other namespace free to mint tokens. The guide's own commands, in a copy
    # of the checkout's rbac/ whose policy (rbac/cluster/) is bound to the two namespaces of this test alone and owned
    # by the one that stays (the garbage collector removes it with that namespace).
    removed, kept = make_namespace(), make_namespace()
    directory = tmp_path / "reader"
    (directory / "rbac" / "cluster").mkdir(parents=True)
    for entry in RBAC.glob("*.yaml"):
        (directory / "rbac" / entry.name).symlink_to(entry)
    kept_uid = core.read_namespace(kept).metadata.uid
    copy = scoped_policy(kept, kept_uid, namespaces=(removed,))
    (directory / "rbac" / "cluster" / POLICY_PATH.name).write_text(yaml.safe_dump_all(copy))
    prepare, removal = guide_rbac_commands("apply"), guide_rbac_commands("delete")
    assert removal == ["kubectl delete -n rl -f rbac/"], removal
    environment = {**os.environ, "PATH": f"{TOOLS_BIN}{os.pathsep}{os.environ['PATH']}", "KUBECONFIG": str(kubeconfig)}

    def run(command: str, namespace: str) -> None:
        done = subprocess.run(
            ["bash", "-ec", command.replace(" -n rl ", f" -n {namespace} ")],
            cwd=directory,
            env=environment,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{command} in {namespace}: {done.stderr}"

    for namespace in (removed, kept):  # step 3 (and step 10) in each namespace: the policy is applied twice, unchanged
        for command in prepare:
            run(command, namespace)
    wait_in_force(kubeconfig, kept)
    wait_in_force(kubeconfig, removed)
    for command in removal:  # step 11 in one namespace
        run(command, removed)
    assert (
        "not found"
        in subprocess.run(
            [
                str(TOOLS_BIN / "kubectl"),
                "--kubeconfig",
                str(kubeconfig),
                "get",
                "role",
                "areal-controller",
                "-n",
                removed,
            ],
            capture_output=True,
            text=True,
            timeout=60,
        ).stderr.lower()
    ), "the removal step deletes the namespace's Role"
    deadline = time.monotonic() + 5  # a deleted policy stops refusing once the API server's informer drops it
    while time.monotonic() < deadline:
        refused = refused_as_controller(kubeconfig, kept)
        assert "helm.sh/release.v1" in refused, (
            f"after the guide's removal step in {removed}, the controller of {kept} is no longer refused a token "
            f"Secret by the admission policy: {refused or 'admitted'}"
        )
        time.sleep(0.5)
