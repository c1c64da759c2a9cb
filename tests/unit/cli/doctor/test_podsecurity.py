"""`areal-workers doctor`'s PodSecurity check (areal_workers/cli/doctor/podsecurity.py): the namespace's enforce
label against the level the rendered workers need, on hand-written pod templates (the chart's defaults, then what
values add) and a stand-in CoreV1Api."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from areal_workers.cli.doctor import needed_level, pod_security_check, podsecurity

# The pod template the chart renders with its defaults (workerDefaults.podSecurityContext and
# containerSecurityContext), which passes `restricted`.
DEFAULT_SPEC: dict[str, Any] = {
    "serviceAccountName": "rel-areal-workers",
    "securityContext": {
        "runAsNonRoot": True,
        "runAsUser": 1000,
        "runAsGroup": 1000,
        "fsGroup": 1000,
        "seccompProfile": {"type": "RuntimeDefault"},
    },
    "containers": [
        {
            "name": "worker",
            "ports": [{"name": "guard", "containerPort": 8000}],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
    ],
    "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
}


def spec_with(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(DEFAULT_SPEC)
    container = spec["containers"][0]
    for key, value in changes.items():
        if key == "container":
            container["securityContext"].update(value)
        elif key == "pod":
            spec["securityContext"].update(value)
        elif key == "volumes":
            spec["volumes"] += value
        else:
            spec[key] = value
    return spec


def statefulset(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "StatefulSet",
        "metadata": {"name": "rel-areal-workers-doctor"},
        "spec": {"template": {"spec": spec}},
    }


def test_the_charts_defaults_need_no_more_than_restricted():
    assert needed_level([DEFAULT_SPEC]) == ("restricted", [])


@pytest.mark.parametrize(
    ("changes", "level", "reason"),
    [
        ({"hostNetwork": True}, "privileged", "hostNetwork"),
        ({"container": {"capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}}, "privileged", "capability IPC_LOCK"),
        ({"volumes": [{"name": "models", "hostPath": {"path": "/data"}}]}, "privileged", "hostPath volume models"),
        ({"container": {"privileged": True}}, "privileged", "privileged container worker"),
        ({"pod": {"runAsNonRoot": False, "runAsUser": 0}}, "baseline", "runAsNonRoot not true"),
        ({"volumes": [{"name": "records", "nfs": {"server": "nfs", "path": "/"}}]}, "baseline", "volume records (nfs)"),
        ({"container": {"allowPrivilegeEscalation": True}}, "baseline", "allowPrivilegeEscalation not false"),
        ({"container": {"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}}, "restricted", None),
    ],
)
def test_what_values_add_raises_the_level_the_workers_need(changes, level, reason):
    needed, reasons = needed_level([spec_with(**changes)])
    assert needed == level
    assert (reason in reasons) if reason else reasons == []


def test_a_namespace_without_the_label_is_a_warning_with_the_label_that_would_enforce_restricted():
    check = pod_security_check("rl", {}, [statefulset(DEFAULT_SPEC)])
    assert check.status == "warn"
    assert check.detail == (
        "namespace rl enforces not set (pod-security.kubernetes.io/enforce: every pod is admitted, as 'privileged'); "
        "the workers as configured need 'restricted'"
    )
    assert "kubectl label namespace rl pod-security.kubernetes.io/enforce=restricted " in check.fix
    assert "--overwrite" not in check.fix


def test_a_namespace_enforcing_what_the_workers_pass_passes():
    check = pod_security_check("rl", {podsecurity.ENFORCE_LABEL: "restricted"}, [statefulset(DEFAULT_SPEC)])
    assert (check.status, check.fix) == ("pass", "")
    assert "namespace rl enforces 'restricted'" in check.detail


def test_workers_that_need_more_than_the_namespace_enforces_fail_naming_why():
    check = pod_security_check(
        "rl", {podsecurity.ENFORCE_LABEL: "restricted"}, [statefulset(spec_with(hostNetwork=True))]
    )
    assert check.status == "fail"
    assert "the workers as configured need 'privileged' (hostNetwork): their pods would be refused" in check.detail
    assert "pod-security.kubernetes.io/enforce=privileged --overwrite" in check.fix


def test_a_baseline_namespace_for_restricted_workers_is_a_warning_to_overwrite():
    check = pod_security_check("rl", {podsecurity.ENFORCE_LABEL: "baseline"}, [statefulset(DEFAULT_SPEC)])
    assert check.status == "warn"
    assert "pod-security.kubernetes.io/enforce=restricted --overwrite" in check.fix


def test_a_privileged_namespace_for_workers_that_need_privileged_passes():
    spec = spec_with(hostNetwork=True)
    assert pod_security_check("rl", {podsecurity.ENFORCE_LABEL: "privileged"}, [statefulset(spec)]).status == "pass"


def test_a_value_that_is_no_level_counts_as_restricted():
    check = pod_security_check("rl", {podsecurity.ENFORCE_LABEL: "strict"}, [statefulset(spec_with(hostNetwork=True))])
    assert check.status == "fail" and "not a level" in check.detail


class FakeCore:
    def __init__(self, labels: dict[str, str] | None = None, status: int | None = None) -> None:
        self.labels, self.status = labels, status

    def read_namespace(self, name: str) -> Any:
        if self.status is not None:
            raise ApiException(status=self.status, reason={403: "Forbidden", 404: "Not Found"}.get(self.status, "?"))
        return SimpleNamespace(metadata=SimpleNamespace(labels=self.labels))


def test_an_identity_that_cannot_read_the_namespace_is_told_the_admins_command_and_what_the_workers_need():
    """rbac/'s Role grants nothing on Namespace objects: the check is skipped, with what an admin runs."""
    check = podsecurity.check_pod_security(FakeCore(status=403), "rl", [statefulset(DEFAULT_SPEC)])  # type: ignore[arg-type]
    assert check.status == "skip"
    assert "cannot be read with these credentials (HTTP 403" in check.detail
    assert "the workers as configured need 'restricted'" in check.detail
    assert check.fix.startswith("as an administrator: kubectl get namespace rl -L pod-security.kubernetes.io/enforce")


def test_a_missing_namespace_is_skipped_with_how_to_create_it():
    check = podsecurity.check_pod_security(FakeCore(status=404), "rl", [])  # type: ignore[arg-type]
    assert check.status == "skip" and "kubectl create namespace rl" in check.fix


def test_labels_read_from_the_api_decide():
    core = FakeCore({podsecurity.ENFORCE_LABEL: "restricted"})
    assert podsecurity.check_pod_security(core, "rl", [statefulset(DEFAULT_SPEC)]).status == "pass"  # type: ignore[arg-type]
    assert podsecurity.check_pod_security(FakeCore(None), "rl", []).status == "warn"  # type: ignore[arg-type]
