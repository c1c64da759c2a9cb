"""The pure parts of `areal-workers doctor` (areal_workers/cli/doctor/): the controller Role as access reviews,
the verdicts and their fixes, GPU counting on hand-written nodes, and the probe worker on the in-memory cluster."""

from __future__ import annotations

import http.server
import socket
import threading
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client import V1Node, V1NodeCondition, V1NodeSpec, V1NodeStatus, V1ObjectMeta, V1Taint
from kubernetes.client.exceptions import ApiException

from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig, naming
from areal_workers.cli.doctor import (
    Access,
    Check,
    chart,
    gpu_capacity,
    permission_check,
    permissions,
    probe as doctor_probe,
    probe_worker,
    role_accesses,
    run,
)
from areal_workers.errors import SchedulerError
from memory_backend import GUARD_PORT, MemoryCluster, memory_connect
from repo_paths import REPO

GPU = "nvidia.com/gpu"
ROLE_TEXT = (REPO / "rbac" / "role.yaml").read_text()


# --- the Role as access reviews ----------------------------------------------------------------------------------


def test_the_packaged_role_file_is_rbac_role_yaml():
    assert permissions.ROLE_FILE.read_bytes() == (REPO / "rbac" / "role.yaml").read_bytes()


def test_every_verb_of_every_resource_of_the_role_is_one_access():
    name, accesses = role_accesses(ROLE_TEXT)
    rules = yaml.safe_load(ROLE_TEXT)["rules"]
    assert name == "areal-controller"
    assert len(accesses) == sum(len(r["apiGroups"]) * len(r["resources"]) * len(r["verbs"]) for r in rules)
    assert len(set(accesses)) == len(accesses)
    assert Access("get", "", "pods", "log") in accesses
    assert Access("patch", "apps", "statefulsets", "scale") in accesses
    assert Access("create", "apps", "statefulsets") in accesses
    assert Access("delete", "", "secrets") in accesses
    assert Access("list", "networking.k8s.io", "networkpolicies") in accesses
    # What the Role deliberately lacks (rbac/README.md) is not asked for.
    assert Access("get", "", "pods") not in accesses
    assert Access("create", "", "pods") not in accesses
    assert all(access.namespaced for access in accesses)
    optional = {(a.verb, a.group, a.resource) for a in accesses if not a.required}
    assert optional == {("create", "events.k8s.io", "events"), ("patch", "events.k8s.io", "events")}  # best-effort


def test_groups_resources_and_subresources_multiply_and_duplicates_go():
    text = yaml.safe_dump(
        {
            "kind": "Role",
            "metadata": {"name": "r"},
            "rules": [
                {"apiGroups": ["", "apps"], "resources": ["things", "things/status"], "verbs": ["get", "list"]},
                {"apiGroups": [""], "resources": ["things"], "verbs": ["get"]},
            ],
        }
    )
    _, accesses = role_accesses(text)
    assert accesses == [
        Access("get", "", "things"),
        Access("list", "", "things"),
        Access("get", "", "things", "status"),
        Access("list", "", "things", "status"),
        Access("get", "apps", "things"),
        Access("list", "apps", "things"),
        Access("get", "apps", "things", "status"),
        Access("list", "apps", "things", "status"),
    ]


def test_a_file_that_is_not_a_role_is_refused():
    with pytest.raises(ValueError, match="Role"):
        role_accesses(yaml.safe_dump({"kind": "ClusterRole", "metadata": {"name": "r"}, "rules": []}))


def test_access_names_use_kubectls_spelling():
    assert Access("get", "", "pods", "log").name == "permission get pods/log"
    assert Access("create", "apps", "statefulsets").name == "permission create statefulsets.apps"
    assert Access("patch", "apps", "statefulsets", "scale").name == "permission patch statefulsets.apps/scale"


# --- verdicts ----------------------------------------------------------------------------------------------------


def test_an_allowed_access_passes_without_a_fix():
    check = permission_check(Access("list", "", "pods"), True, "", "rl", "areal-controller")
    assert check == Check("permission list pods", "pass", "allowed in namespace rl")


def test_a_denied_access_fails_naming_verb_resource_namespace_and_the_file_that_grants_it():
    check = permission_check(
        Access("get", "", "pods", "log"), False, "no RBAC policy matched", "rl", "areal-controller"
    )
    assert check.status == "fail"
    assert check.detail == "missing: get pods/log in namespace rl (no RBAC policy matched)"
    assert "granted by rbac/role.yaml (Role areal-controller)" in check.fix
    assert f"kubectl apply -n rl -f {permissions.RBAC_DIR}/" in check.fix


def test_listing_nodes_denied_is_only_a_warning_with_a_cluster_role_for_the_callers_own_identity():
    caller = "system:serviceaccount:ops:trainer"  # the caller's ServiceAccount lives in ops, the trial in rl
    check = permission_check(permissions.NODE_LIST, False, "", "rl", "areal-controller", caller)
    assert check.status == "warn"
    assert check.detail.startswith("missing: list nodes at cluster scope")
    assert "clusterrole" in check.fix and "--serviceaccount=ops:trainer" in check.fix
    assert "rl:" not in check.fix and "areal-controller" not in check.fix


def test_a_role_without_the_events_rule_is_a_warning_the_scheduler_works_without():
    denied = {("create", "events.k8s.io", "events", None), ("patch", "events.k8s.io", "events", None)}
    checks = permissions.check_permissions(FakeAuthorization(denied), "rl")  # type: ignore[arg-type]
    assert [(c.name, c.status) for c in checks if c.status != "pass"] == [
        ("permission create events.events.k8s.io", "warn"),
        ("permission patch events.events.k8s.io", "warn"),
    ]
    warned = next(c for c in checks if c.status == "warn")
    assert "optional: the scheduler's decisions are not recorded as Events" in warned.detail
    assert f"kubectl apply -n rl -f {permissions.RBAC_DIR}/" in warned.fix


def test_the_fixes_bind_a_person_as_a_user_and_say_how_to_find_an_unknown_identity():
    person = permission_check(permissions.NODE_LIST, False, "", "rl", "areal-controller", "alice@example.com")
    assert "--user=alice@example.com" in person.fix and "--serviceaccount" not in person.fix
    unknown = permission_check(permissions.NODE_LIST, False, "", "rl", "areal-controller", None)
    assert "kubectl auth whoami" in unknown.fix
    denied = permission_check(Access("list", "", "pods"), False, "", "rl", "areal-controller", "alice@example.com")
    assert "kubectl create rolebinding areal-controller-alice-example-com -n rl --role=areal-controller" in denied.fix
    assert denied.fix.endswith("--user=alice@example.com")


class FakeAuthorization:
    """SelfSubjectAccessReviews answered from a set of denied (verb, group, resource, subresource)."""

    def __init__(self, denied: set[tuple[str, str, str, str | None]], fail_on: str | None = None) -> None:
        self.denied, self.fail_on = denied, fail_on
        self.asked: list[client.V1ResourceAttributes] = []

    def create_self_subject_access_review(self, body: client.V1SelfSubjectAccessReview) -> Any:
        attributes = body.spec.resource_attributes
        self.asked.append(attributes)
        if attributes.resource == self.fail_on:
            raise ApiException(status=500, reason="Internal Server Error")
        key = (attributes.verb, attributes.group, attributes.resource, attributes.subresource)
        allowed = key not in self.denied
        return SimpleNamespace(
            status=SimpleNamespace(
                allowed=allowed, denied=False, evaluation_error=None, reason="" if allowed else "RBAC: forbidden"
            )
        )


def test_one_review_per_access_and_exactly_the_denied_one_fails():
    authorization = FakeAuthorization({("delete", "", "pods", None)})
    checks = permissions.check_permissions(authorization, "rl")  # type: ignore[arg-type]
    _, accesses = role_accesses(ROLE_TEXT)
    assert len(authorization.asked) == len(accesses) + 1  # and list nodes
    assert [c.name for c in checks if c.status != "pass"] == ["permission delete pods"]
    failed = next(c for c in checks if c.status == "fail")
    assert failed.detail == "missing: delete pods in namespace rl (RBAC: forbidden)"
    log = next(a for a in authorization.asked if a.subresource == "log")
    assert (log.verb, log.group, log.resource, log.namespace) == ("get", "", "pods", "rl")
    nodes = authorization.asked[-1]
    assert (nodes.verb, nodes.resource, nodes.namespace) == ("list", "nodes", None)


def test_an_identity_without_any_permission_of_the_role_gets_one_row_naming_it_and_rbac():
    _, accesses = role_accesses(ROLE_TEXT)
    every = {(a.verb, a.group, a.resource, a.subresource or None) for a in [*accesses, permissions.NODE_LIST]}
    user = "system:serviceaccount:ops:trainer"
    checks = permissions.check_permissions(FakeAuthorization(every), "rl", user=user)  # type: ignore[arg-type]
    assert [(c.name, c.status) for c in checks] == [("RoleBinding", "fail"), ("permission list nodes", "warn")]
    (missing, nodes) = checks
    assert missing.detail.startswith(f"{user} has none of the {len(accesses)} permissions of rbac/role.yaml")
    assert f"kubectl apply -n rl -f {permissions.RBAC_DIR}/" in missing.fix
    assert "--role=areal-controller --serviceaccount=ops:trainer" in missing.fix
    assert "--serviceaccount=ops:trainer" in nodes.fix


def test_a_review_the_api_server_cannot_answer_ends_the_permission_checks_with_the_cause():
    authorization = FakeAuthorization(set(), fail_on="statefulsets")
    checks = permissions.check_permissions(authorization, "rl")  # type: ignore[arg-type]
    assert checks[-1].name == "permissions" and checks[-1].status == "fail"
    assert "HTTP 500" in checks[-1].detail
    assert all(c.status == "pass" for c in checks[:-1]) and len(checks) == len(authorization.asked)


def test_an_unreachable_api_server_fails_the_first_check():
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    configuration = client.Configuration(host=f"http://127.0.0.1:{port}")
    configuration.retries = 0
    check = run.check_cluster(client.ApiClient(configuration))
    assert check.status == "fail" and f"127.0.0.1:{port}" in check.detail and check.fix


# --- GPU capacity -------------------------------------------------------------------------------------------------


def node(
    name: str,
    gpus: int = 8,
    *,
    labels: dict[str, str] | None = None,
    taints: list[V1Taint] | None = None,
    cordoned: bool = False,
    resource: str = GPU,
) -> V1Node:
    allocatable = {"cpu": "96", "memory": "1000Gi", "pods": "110", resource: str(gpus)}
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name, **(labels or {})}),
        spec=V1NodeSpec(taints=taints, unschedulable=cordoned or None),
        status=V1NodeStatus(allocatable=allocatable, conditions=[V1NodeCondition(type="Ready", status="True")]),
    )


def worker_pod(
    gpus: int,
    *,
    resource: str = GPU,
    node_selector: dict[str, str] | None = None,
    name: str = "doctor-0",
    phase: str = "Running",
) -> client.V1Pod:
    requests = {"cpu": "1", "memory": "1Gi", resource: str(gpus)}
    return client.V1Pod(
        metadata=V1ObjectMeta(name=name, namespace="rl", uid=f"uid-{name}"),
        spec=client.V1PodSpec(
            node_selector=node_selector,
            containers=[
                client.V1Container(
                    name="worker", resources=client.V1ResourceRequirements(requests=requests, limits=requests)
                )
            ],
        ),
        status=client.V1PodStatus(phase=phase),
    )


def test_workers_are_counted_on_the_gpus_the_pods_on_each_node_leave_free():
    nodes = [node("a"), node("b")]
    busy = {"a": [worker_pod(4, name="other"), worker_pod(8, name="done", phase="Succeeded")]}
    passed = gpu_capacity(worker_pod(4), nodes, busy, gpus=4, workers=3)
    assert passed.status == "pass" and passed.fix == ""
    assert passed.detail.startswith("2/2 nodes have nvidia.com/gpu: 4 free; 3 worker(s) of 4 GPUs fit, 3 wanted")
    assert "a 4/8, b 8/8" in passed.detail
    failed = gpu_capacity(worker_pod(4), nodes, busy, gpus=4, workers=4)
    assert failed.status == "fail"
    assert "3 worker(s) of 4 GPUs fit, 4 wanted" in failed.detail
    assert failed.fix.startswith("lower the workers to <= 3 or their GPUs")


def test_more_gpus_per_worker_than_any_node_has_fails_with_the_largest_node():
    check = gpu_capacity(worker_pod(16), [node("a"), node("b")], {}, gpus=16, workers=1)
    assert check.status == "fail"
    assert check.detail.startswith("0/2 nodes have nvidia.com/gpu: 16 free; 0 worker(s) of 16 GPUs fit, 1 wanted")
    assert check.fix == "lower the GPUs per worker (SchedulingSpec.gpu) to <= 8, or add nodes with 16 nvidia.com/gpu"


def test_nodes_the_pod_may_not_use_are_not_counted_and_are_named():
    taint = V1Taint(key="dedicated", value="infer", effect="NoSchedule")
    nodes = [
        node("plain"),
        node("gpu-1", labels={"pool": "gpu"}),
        node("gpu-2", labels={"pool": "gpu"}, taints=[taint]),
        node("gpu-3", labels={"pool": "gpu"}, cordoned=True),
    ]
    check = gpu_capacity(worker_pod(8, node_selector={"pool": "gpu"}), nodes, {}, gpus=8, workers=2)
    assert check.status == "fail"
    assert check.detail.startswith("1/4 nodes have nvidia.com/gpu: 8 free; 1 worker(s) of 8 GPUs fit, 2 wanted")
    assert "plain (outside the node selection)" in check.detail
    assert "gpu-2 (taint dedicated=infer:NoSchedule)" in check.detail
    assert "gpu-3 (cordoned)" in check.detail


def test_without_any_usable_node_the_fix_says_how_to_get_one():
    check = gpu_capacity(worker_pod(1, node_selector={"pool": "gpu"}), [node("a")], {}, gpus=1, workers=1)
    assert check.status == "fail" and "label nodes to match node_selector" in check.fix


def test_nodes_without_the_gpu_resource_point_at_the_device_plugin():
    check = gpu_capacity(worker_pod(1), [node("cpu-only", gpus=0)], {}, gpus=1, workers=1)
    assert check.status == "fail" and "device plugin" in check.fix


def test_the_gpu_resource_is_the_one_the_chart_rendered():
    check = gpu_capacity(
        worker_pod(2, resource="amd.com/gpu"), [node("a", 8, resource="amd.com/gpu")], {}, gpus=2, workers=4
    )
    assert check.status == "pass" and "amd.com/gpu: 2 free; 4 worker(s)" in check.detail


def test_unknown_pods_count_allocatable_and_warn_when_that_would_fit():
    fits = gpu_capacity(worker_pod(8), [node("a")], None, gpus=8, workers=1)
    assert fits.status == "warn" and "nvidia.com/gpu: 8 allocatable" in fits.detail and fits.fix
    short = gpu_capacity(worker_pod(8), [node("a")], None, gpus=8, workers=2)
    assert short.status == "fail"


# --- the probe worker on the in-memory cluster --------------------------------------------------------------------


class Probe:
    """probe_worker's scheduler factory over a MemoryCluster made for the release it names."""

    def __init__(self, fail_delete: bool = False) -> None:
        self.cluster: MemoryCluster | None = None
        self.scheduler: KubernetesScheduler | None = None
        self.fail_delete = fail_delete

    def __call__(self, config: KubernetesSchedulerConfig, experiment: str, trial: str) -> KubernetesScheduler:
        assert config.release_name is None and config.ownership == "managed"
        self.cluster = MemoryCluster(naming.release_name(experiment, trial))
        self.scheduler = KubernetesScheduler(
            config=config, experiment_name=experiment, trial_name=trial, connect=memory_connect(self.cluster)
        )
        if self.fail_delete:

            def refuse(*args: Any, **kwargs: Any) -> None:
                raise SchedulerError("helm failed: uninstall: timed out")

            self.scheduler.delete_workers = refuse  # type: ignore[method-assign]
        return self.scheduler


CONFIG = KubernetesSchedulerConfig(namespace="rl", release_name="someone-elses", ownership="external")


def test_a_worker_that_answers_passes_and_its_release_is_deleted():
    probe, asked = Probe(), []

    def health(ip: str, port: str) -> None:
        asked.append((ip, port))

    check = probe_worker(CONFIG, probe, health)
    assert check.status == "pass", check
    assert asked == [(asked[0][0], str(GUARD_PORT))]
    assert f"pod IP {asked[0][0]}:{GUARD_PORT}" in check.detail
    assert check.detail.endswith(f"release {probe.cluster.release} deleted")
    assert probe.cluster.revisions == [] and probe.cluster.pods == {}
    assert probe.scheduler.closed


def test_a_worker_not_reachable_from_here_fails_with_the_routing_advice():
    probe = Probe()
    check = probe_worker(CONFIG, probe, lambda ip, port: "ConnectTimeout: timed out")
    assert check.status == "fail"
    assert check.detail.startswith("pod IP ") and "not reachable from this machine: ConnectTimeout" in check.detail
    assert "inside the cluster" in check.fix and "areal.io/controller" in check.fix
    assert "route pod IPs" in check.fix
    assert not probe.cluster.installed and probe.scheduler.closed


def test_a_worker_that_answers_with_an_error_is_unhealthy_not_unreachable():
    check = probe_worker(CONFIG, Probe(), lambda ip, port: "HTTP 503")
    assert check.status == "fail" and "answered GET /health with HTTP 503" in check.detail
    assert "unhealthy" in check.fix


def test_a_worker_that_never_gets_ready_fails_with_the_schedulers_diagnosis_and_is_cleaned_up():
    """The memory cluster crashes pods whose command names "broken" (python_executable starts it)."""
    probe = Probe()
    config = KubernetesSchedulerConfig(namespace="rl", python_executable="/opt/broken/python")
    check = probe_worker(config, probe, lambda ip, port: pytest.fail("a failed worker is not called"))
    assert check.status == "fail"
    assert "did not become Ready" in check.detail and "doctor-0 crashed" in check.detail
    assert check.fix.startswith("follow the advice in the diagnosis")
    assert not probe.cluster.installed and probe.scheduler.closed


def test_a_release_left_behind_is_reported_with_the_command_that_removes_it():
    probe = Probe(fail_delete=True)
    check = probe_worker(CONFIG, probe, lambda ip, port: None)
    assert check.status == "warn"
    assert "was not deleted: helm failed: uninstall: timed out" in check.detail
    assert check.fix == f"delete it: helm uninstall {probe.cluster.release} -n rl"
    assert probe.scheduler.closed
    failed = probe_worker(CONFIG, Probe(fail_delete=True), lambda ip, port: "ConnectTimeout: timed out")
    assert failed.status == "fail" and "route pod IPs" in failed.fix and "helm uninstall" in failed.fix


def test_the_probe_and_render_values_are_one_role_of_the_default_worker_command():
    values = chart.probe_values(KubernetesSchedulerConfig(namespace="rl", image="example.com/areal:1"), 8, 3)
    role = values["roles"][chart.PROBE_ROLE]
    assert role["replicas"] == 3 and role["resources"]["gpu"] == 8
    assert role["command"] == ["python", "-m", "areal.infra.rpc.rpc_server"]
    assert values["image"] == {"repository": "example.com/areal", "tag": "1"}


@pytest.fixture
def health_server():
    """A local HTTP server whose GET /health answers with the status in `codes` (200 by default)."""
    codes = {"status": 200}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(codes["status"] if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], codes
    server.shutdown()
    server.server_close()


def test_http_health_is_none_only_for_a_200_answer(health_server, monkeypatch):
    port, codes = health_server
    assert doctor_probe.http_health("127.0.0.1", str(port)) is None
    codes["status"] = 503
    assert doctor_probe.http_health("127.0.0.1", str(port)) == "HTTP 503"
    monkeypatch.setattr(doctor_probe, "HEALTH_ATTEMPTS", 1)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    assert "ConnectionError" in doctor_probe.http_health("127.0.0.1", str(closed))


def test_a_missing_helm_fails_the_render_before_anything_runs():
    check, manifests = chart.render_chart(KubernetesSchedulerConfig(helm_executable="/nonexistent/helm"), 0, 1)
    assert check.status == "fail" and check.detail == "helm not found: /nonexistent/helm is not an executable file"
    assert "install helm 3.x or 4.x" in check.fix and "AREAL_K8S_HELM_EXECUTABLE" in check.fix
    assert manifests == []
