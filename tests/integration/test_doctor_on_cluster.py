"""`areal-workers doctor`'s checks (areal_workers/cli/doctor/) against the cluster: all pass for the admin, with a
real probe worker; a ServiceAccount whose copy of rbac/role.yaml lacks one permission fails exactly that one; more
GPUs per worker than any node has fails with the numbers; the namespace's PodSecurity level against what the
workers need."""

from __future__ import annotations

import asyncio
import json
import os
import time
from dataclasses import replace
from decimal import Decimal

import pytest
import yaml
from kubernetes import client, config as kube_config
from kubernetes.utils import parse_quantity

from areal_workers import KubernetesSchedulerConfig
from areal_workers.cli.doctor import Check, role_accesses, run_doctor
from areal_workers.cli.doctor.areal_version import NAME as AREAL
from clusterlib import RUN_PODS, controller_kubeconfig, lane_values
from repo_paths import REPO

# It loads or changes what every test shares: `make test` runs it alone (tools/test_lanes.py).
pytestmark = pytest.mark.serial_cluster

ROLE = "areal-controller"
ENFORCE = "pod-security.kubernetes.io/enforce"
ROLE_FILE = REPO / "rbac" / "role.yaml"
GPU = "nvidia.com/gpu"


@pytest.fixture
def doctor_config(kubeconfig, helm_executable, tmp_path, worker_lane):
    """A KubernetesSchedulerConfig like the scheduler tests' (make_scheduler): their values files, the worker lane's
    interpreter and time-outs."""

    def make(namespace: str, credentials=kubeconfig) -> KubernetesSchedulerConfig:
        values = tmp_path / "run-pods.json"
        values.write_text(json.dumps({**RUN_PODS, **lane_values(worker_lane, tmp_path / "areal")}))
        return KubernetesSchedulerConfig(
            namespace=namespace,
            kubeconfig=str(credentials),
            helm_executable=helm_executable,
            values_files=(str(values),),
            python_executable=worker_lane.fork_python,
            fork_module=worker_lane.fork_module,
            **worker_lane.timeouts,
        )

    return make


def by_status(checks: list[Check], status: str) -> list[Check]:
    return [check for check in checks if check.status == status]


def test_with_the_admin_kubeconfig_every_check_passes_and_the_probe_leaves_nothing(
    kube_client, core, make_namespace, pod_runner, doctor_config, helm_client
):
    namespace = make_namespace({ENFORCE: "restricted"})  # the chart's defaults pass it: the probe's pod is admitted
    pod_runner(namespace)
    messages: list[str] = []
    checks = run_doctor(
        kube_client, doctor_config(namespace), gpus_per_worker=1, workers=2, probe=True, progress=messages.append
    )
    # The admission policy is the controller's: an administrator is not a ServiceAccount it restricts.
    policy = next(check for check in checks if check.name == "admission policy")
    assert policy.status == "skip" and "is not a ServiceAccount" in policy.detail, policy
    # AReaL's version is this machine's (the test's Python may have none, or an untested one).
    assert [(c.name, c.detail) for c in checks if c.status != "pass" and c.name not in (policy.name, AREAL)] == []
    names = [check.name for check in checks]
    _, accesses = role_accesses(ROLE_FILE.read_text())
    assert names == [
        "cluster reachable",
        "namespace",
        *(access.name for access in accesses),
        "permission list nodes",
        "admission policy",
        "chart renders",
        "PodSecurity",
        "GPU capacity",
        AREAL,
        "worker reachable",
    ]
    assert f"namespace {namespace} enforces 'restricted'" in checks[names.index("PodSecurity")].detail
    probe = checks[-1]
    assert "answered GET /health from this machine" in probe.detail and "deleted" in probe.detail
    assert any(message.startswith("probe: GET http://") for message in messages), messages
    assert core.list_namespaced_pod(namespace).items == []
    assert list(asyncio.run(helm_client.list_releases(all=True, namespace=namespace))) == []


def _without(rules: list[dict], resource: str, verb: str) -> list[client.V1PolicyRule]:
    """The rules with one verb of one resource taken out (rules left with no verb dropped)."""
    kept = []
    for rule in rules:
        verbs = rule["verbs"]
        if resource in rule["resources"]:
            assert rule["resources"] == [resource], "the test removes a verb of a rule of one resource"
            verbs = [v for v in verbs if v != verb]
        if verbs:
            kept.append(client.V1PolicyRule(api_groups=rule["apiGroups"], resources=rule["resources"], verbs=verbs))
    return kept


def _wait_denied(kube_client, namespace: str, verb: str, resource: str, timeout: float = 60.0) -> None:
    """The RBAC authorizer reads Roles from a cache: until it denies the access for the ServiceAccount."""
    authorization = client.AuthorizationV1Api(kube_client)
    name, _, subresource = resource.partition("/")
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{namespace}:{ROLE}",
            groups=["system:serviceaccounts", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace, verb=verb, resource=name, subresource=subresource or None
            ),
        )
    )
    deadline = time.monotonic() + timeout
    while authorization.create_subject_access_review(review).status.allowed:
        assert time.monotonic() < deadline, f"the authorizer still grants {verb} {resource}"
        time.sleep(0.2)


@pytest.mark.parametrize(("verb", "resource"), [("delete", "pods"), ("get", "pods/log")])
def test_a_service_account_without_one_permission_of_the_role_fails_exactly_that_one(
    kube_client, kubeconfig, namespace, doctor_config, tmp_path, verb, resource
):
    credentials = controller_kubeconfig(kubeconfig, namespace, tmp_path / "controller.yaml")
    rbac = client.RbacAuthorizationV1Api(kube_client)
    role = rbac.read_namespaced_role(ROLE, namespace)
    role.rules = _without(yaml.safe_load(ROLE_FILE.read_text())["rules"], resource, verb)
    rbac.replace_namespaced_role(ROLE, namespace, role)
    _wait_denied(kube_client, namespace, verb, resource)
    identity = kube_config.new_client_from_config(config_file=str(credentials))
    try:
        checks = run_doctor(identity, doctor_config(namespace, credentials), gpus_per_worker=1, probe=True)
    finally:
        identity.close()
    failed = by_status(checks, "fail")
    assert [check.name for check in failed] == [f"permission {verb} {resource}"], failed
    assert failed[0].detail.startswith(f"missing: {verb} {resource} in namespace {namespace}")
    assert f"granted by rbac/role.yaml (Role {ROLE})" in failed[0].fix
    assert f"kubectl apply -n {namespace} -f " in failed[0].fix
    # The ServiceAccount may not list nodes (rbac/ grants nothing at cluster scope): a warning, and no GPU count.
    assert [check.name for check in by_status(checks, "warn")] == ["permission list nodes"]
    gpu = next(check for check in checks if check.name == "GPU capacity")
    assert gpu.status == "skip" and "nodes cannot be listed: HTTP 403" in gpu.detail
    # Nor read its namespace's labels: the PodSecurity level is left to an administrator's command.
    pod_security = next(check for check in checks if check.name == "PodSecurity")
    assert pod_security.status == "skip" and "HTTP 403" in pod_security.detail, pod_security
    assert f"kubectl get namespace {namespace} -L {ENFORCE}" in pod_security.fix
    probe = checks[-1]
    assert probe.name == "worker reachable" and probe.status == "skip" and failed[0].name in probe.detail
    _, accesses = role_accesses(ROLE_FILE.read_text())
    assert len([c for c in by_status(checks, "pass") if c.name.startswith("permission ")]) == len(accesses) - 1


def _doctor_as_controller(kubeconfig, namespace: str, doctor_config, out, policy: bool) -> list[Check]:
    """run_doctor as the controller ServiceAccount of rbac/, applied in `namespace` with or without its policy."""
    credentials = controller_kubeconfig(kubeconfig, namespace, out, policy=policy)
    identity = kube_config.new_client_from_config(config_file=str(credentials))
    try:
        return run_doctor(identity, doctor_config(namespace, credentials), probe=False)
    finally:
        identity.close()


def test_the_admission_policy_check_passes_where_the_policy_refuses_the_controller_a_token(
    kubeconfig, core, namespace, doctor_config, tmp_path
):
    checks = _doctor_as_controller(kubeconfig, namespace, doctor_config, tmp_path / "controller.yaml", policy=True)
    policy = next(check for check in checks if check.name == "admission policy")
    assert policy.status == "pass", policy
    controller = f"system:serviceaccount:{namespace}:{ROLE}"
    assert (
        policy.detail.startswith("areal-controller-secrets") and f"refuses {controller} a token Secret" in policy.detail
    )
    assert by_status(checks, "fail") == []
    tokens = core.list_namespaced_secret(namespace, field_selector="type=kubernetes.io/service-account-token")
    assert tokens.items == []  # a dry run: nothing was stored


def test_the_admission_policy_check_fails_where_the_policy_does_not_match(
    kubeconfig, make_namespace, doctor_config, tmp_path
):
    """The same identity in a namespace the policy is not bound to (the tests bind it per namespace) is admitted."""
    namespace = make_namespace()
    checks = _doctor_as_controller(kubeconfig, namespace, doctor_config, tmp_path / "controller.yaml", policy=False)
    assert [check.name for check in by_status(checks, "fail")] == ["admission policy"]
    policy = next(check for check in checks if check.name == "admission policy")
    assert policy.detail.startswith(f"system:serviceaccount:{namespace}:{ROLE} may create a token Secret of any")
    assert "as a cluster administrator, apply rbac/cluster/admission-policy.yaml" in policy.fix


def _largest_gpus(core: client.CoreV1Api) -> tuple[int, int]:
    nodes = core.list_node().items
    largest = max((parse_quantity((n.status.allocatable or {}).get(GPU, "0")) for n in nodes), default=Decimal(0))
    return len(nodes), int(largest)


def require_gpus(largest: int) -> None:
    """The local cluster's KWOK nodes offer GPUs, so only another cluster may lack them."""
    if largest == 0 and os.environ.get("AREAL_WORKERS_KUBECONFIG"):
        pytest.skip(f"no node of this cluster offers {GPU}")
    assert largest > 0, f"no node of the local cluster offers {GPU}"


def test_more_gpus_per_worker_than_any_node_offers_fails_with_the_numbers(kube_client, core, namespace, doctor_config):
    nodes, largest = _largest_gpus(core)
    require_gpus(largest)
    checks = run_doctor(kube_client, doctor_config(namespace), gpus_per_worker=largest + 8, workers=1, probe=False)
    assert [check.name for check in by_status(checks, "fail")] == ["GPU capacity"]
    gpu = next(check for check in checks if check.name == "GPU capacity")
    assert gpu.detail.startswith(
        f"0/{nodes} nodes have {GPU}: {largest + 8} free; 0 worker(s) of {largest + 8} GPUs fit, 1 wanted"
    )
    assert gpu.fix == (
        f"lower the GPUs per worker (SchedulingSpec.gpu) to <= {largest}, or add nodes with {largest + 8} {GPU}"
    )


def test_more_workers_than_the_nodes_hold_fails_with_how_many_fit(kube_client, core, namespace, doctor_config):
    nodes, largest = _largest_gpus(core)
    require_gpus(largest)
    checks = run_doctor(kube_client, doctor_config(namespace), gpus_per_worker=largest, workers=nodes + 1, probe=False)
    gpu = next(check for check in checks if check.name == "GPU capacity")
    assert gpu.status == "fail", gpu
    assert f"worker(s) of {largest} GPUs fit, {nodes + 1} wanted" in gpu.detail
    assert gpu.fix.startswith("lower the workers to <= ")


def test_values_the_chart_schema_rejects_fail_the_render_with_helms_own_text(
    kube_client, namespace, doctor_config, tmp_path
):
    bad = tmp_path / "platform.yaml"
    bad.write_text("workerDefaults:\n  terminationGracePeriodSeconds: soon\n")
    config = doctor_config(namespace)
    checks = run_doctor(kube_client, replace(config, values_files=(*config.values_files, str(bad))), probe=True)
    render = next(check for check in checks if check.name == "chart renders")
    assert render.status == "fail"
    assert "terminationGracePeriodSeconds" in render.detail and "want integer" in render.detail, render.detail
    assert str(bad) in render.detail
    assert checks[-1].status == "skip" and "chart renders" in checks[-1].detail  # no probe of a broken chart
    missing = run_doctor(kube_client, replace(config, values_files=(str(tmp_path / "nowhere.yaml"),)), probe=False)
    assert "nowhere.yaml" in next(check for check in missing if check.name == "chart renders").detail


def test_a_namespace_without_a_podsecurity_level_is_a_warning_naming_the_label_to_set(
    kube_client, namespace, doctor_config
):
    checks = run_doctor(kube_client, doctor_config(namespace), probe=False)
    [warning] = [check for check in checks if check.status == "warn"]
    assert warning.name == "PodSecurity"
    assert f"namespace {namespace} enforces not set" in warning.detail, warning.detail
    assert "the workers as configured need 'restricted'" in warning.detail
    assert f"kubectl label namespace {namespace} {ENFORCE}=restricted" in warning.fix


def test_workers_that_need_more_than_the_namespace_enforces_fail_and_no_probe_is_made(
    kube_client, make_namespace, doctor_config, tmp_path
):
    namespace = make_namespace({ENFORCE: "baseline"})
    host_network = tmp_path / "host-network.yaml"
    host_network.write_text("workerDefaults:\n  hostNetwork: true\n")
    config = doctor_config(namespace)
    checks = run_doctor(kube_client, replace(config, values_files=(*config.values_files, str(host_network))))
    [failed] = [check for check in checks if check.status == "fail"]
    assert failed.name == "PodSecurity"
    assert f"namespace {namespace} enforces 'baseline'" in failed.detail
    assert "need 'privileged' (hostNetwork): their pods would be refused" in failed.detail, failed.detail
    assert checks[-1].name == "worker reachable" and checks[-1].status == "skip" and "PodSecurity" in checks[-1].detail


def test_an_identity_without_a_binding_gets_one_row_and_fixes_naming_its_own_namespace(
    kubeconfig, core, namespace, make_namespace, tmp_path, capsys, monkeypatch
):
    """A ServiceAccount of another namespace, bound to nothing in the trial's: one FAIL row for the missing binding
    instead of one per rule of rbac/role.yaml, and every fix names that ServiceAccount in its own namespace, as the
    API server names it (a fix naming the trial's namespace would bind the wrong account)."""
    from areal_workers.cli.main import main
    from localkube.pki import service_account_kubeconfig

    monkeypatch.setenv("PATH", f"{REPO / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}")  # helm
    home = make_namespace()
    core.create_namespaced_service_account(home, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name="caller")))
    credentials = service_account_kubeconfig(kubeconfig, home, "caller", tmp_path / "caller.yaml")
    argv = ["--kubeconfig", str(credentials), "-n", namespace, "doctor", "--no-probe"]
    code = main([*argv, "-o", "json"])
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert code == 1
    failed = [c for c in checks if c["status"] == "fail"]
    assert [c["name"] for c in failed] == ["RoleBinding"], failed
    user = f"system:serviceaccount:{home}:caller"
    assert failed[0]["detail"].startswith(f"{user} has none of the "), failed[0]
    assert f"kubectl apply -n {namespace} -f " in failed[0]["fix"]
    fixes = " ".join(c.get("fix") or "" for c in checks)
    assert f"--serviceaccount={home}:caller" in fixes and f"--serviceaccount={namespace}:" not in fixes
    assert not [c for c in checks if c["name"].startswith("permission ") and c["status"] == "fail"]
    assert next(c for c in checks if c["name"] == "namespace")["status"] == "skip"  # its "forbidden": the same cause
    main(argv)
    table = capsys.readouterr().out
    assert len([line for line in table.splitlines() if line.lstrip().startswith("FAIL")]) == 1, table
