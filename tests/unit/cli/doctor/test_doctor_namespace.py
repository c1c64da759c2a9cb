"""`areal-workers doctor` checks the namespace before anything in it: a namespace that does not exist is one failed
check with how to create it, and no permission is reported missing there; a namespaced identity (rbac/'s, which may
not read Namespace objects) is judged by a namespaced read. The API server's answers are a real one's (bodies as
kube-apiserver 1.34 sends them), from the fakes of tests/unit/test_cluster_access.py or a local HTTP server."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Any

import pytest
from kubernetes import client

from areal_workers import KubernetesSchedulerConfig
from areal_workers.cli.doctor import Check, run
from areal_workers.cli.doctor.namespace import check_namespace
from test_cluster_access import Core, api_error, namespace

VERSION = {
    "major": "1",
    "minor": "34",
    "gitVersion": "v1.34.1",
    "gitCommit": "0",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.24",
    "compiler": "gc",
    "platform": "linux/amd64",
}


def not_found(name: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f'namespaces "{name}" not found',
        "reason": "NotFound",
        "details": {"name": name, "kind": "namespaces"},
        "code": 404,
    }


@pytest.fixture
def apiserver():
    """An API server that answers /version and says every namespace is missing; `asked` records each request."""
    asked: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self) -> None:
            asked.append(f"{self.command} {self.path}")
            if self.path.rstrip("/") == "/version":
                code, body = 200, VERSION
            elif self.path.startswith("/api/v1/namespaces/"):
                code, body = 404, not_found(self.path.split("/")[4].split("?")[0])
            else:  # a SelfSubjectAccessReview, a list of nodes: doctor must not get this far for a missing namespace
                code, body = 500, {"kind": "Status", "status": "Failure", "code": 500}
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _answer  # noqa: N815 (http.server's names)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    configuration.retries = 0
    api_client = client.ApiClient(configuration)
    yield api_client, asked
    api_client.close()
    server.shutdown()
    server.server_close()


def test_a_missing_namespace_is_one_failed_check_with_its_fix_and_no_missing_permission(apiserver, monkeypatch):
    api_client, asked = apiserver
    monkeypatch.setattr(run, "render_chart", lambda config, gpus, workers: (Check("chart renders", "pass", "ok"), []))
    monkeypatch.setattr(run, "check_areal_version", lambda: Check("AReaL version", "pass", "AReaL 1.0.4"))
    checks = run.run_doctor(api_client, KubernetesSchedulerConfig(namespace="bandit-demo"), probe=True)
    assert [(c.name, c.status) for c in checks] == [
        ("cluster reachable", "pass"),
        ("namespace", "fail"),
        ("permissions", "skip"),
        ("admission policy", "skip"),
        ("chart renders", "pass"),
        ("PodSecurity", "skip"),
        ("GPU capacity", "skip"),
        ("AReaL version", "pass"),
        ("worker reachable", "skip"),
    ]
    failed = checks[1]
    assert failed.detail == "namespace bandit-demo does not exist"
    assert failed.fix.startswith("create it (kubectl create namespace bandit-demo)")
    assert "kubectl apply -n bandit-demo -f rbac/" in failed.fix and "-n, or AREAL_K8S_NAMESPACE" in failed.fix
    # One line with the fix; the skipped checks only say why (the probe: "fix those first").
    assert [c.name for c in checks if c.fix] == ["namespace", "worker reachable"] and checks[
        -1
    ].fix == "fix those first"
    assert checks[2].detail == checks[3].detail == checks[5].detail == "namespace bandit-demo does not exist"
    assert "not tried: 1 check(s) above failed (namespace)" in checks[-1].detail
    assert not any("granted by rbac/" in c.fix or c.name.startswith("permission ") for c in checks)
    assert [path for path in asked if "selfsubjectaccessreviews" in path] == []


def test_an_existing_namespace_passes():
    check, gone = check_namespace(Core(namespace("Active")), "rl")  # type: ignore[arg-type]
    assert check == Check("namespace", "pass", "namespace rl exists and this identity may work there") and not gone


def test_a_namespace_being_deleted_fails_with_the_wait_that_ends_it():
    check, gone = check_namespace(Core(namespace("Terminating")), "rl")  # type: ignore[arg-type]
    assert (check.status, check.detail, gone) == ("fail", "namespace rl is being deleted", True)
    assert "kubectl wait --for=delete namespace/rl" in check.fix


def test_a_namespaced_identity_that_may_list_pods_there_passes_without_reading_the_namespace():
    core = Core(
        api_error(
            403,
            'namespaces "rl" is forbidden: User "system:serviceaccount:rl:areal-controller" '
            'cannot get resource "namespaces" in API group "" in the namespace "rl"',
        ),
        client.V1PodList(items=[]),
    )
    check, gone = check_namespace(core, "rl")  # type: ignore[arg-type]
    assert check.status == "pass" and not gone and core.calls == ["read namespace rl", "list pods in rl"]


def test_a_namespaced_identity_without_a_role_there_gets_both_causes_and_the_permission_checks():
    core = Core(
        api_error(403, "namespaces forbidden"),
        api_error(
            403,
            'pods is forbidden: User "system:serviceaccount:a:areal-controller" cannot list '
            'resource "pods" in API group "" in the namespace "rl"',
        ),
    )
    check, gone = check_namespace(core, "rl")  # type: ignore[arg-type]
    assert check.status == "fail" and not gone  # the permission checks still list what is missing
    assert check.detail.startswith("user system:serviceaccount:a:areal-controller may not list pods in namespace rl")
    assert "the namespace does not exist" in check.detail and "kubectl apply -n rl -f rbac/" in check.detail
