"""`areal-workers doctor`'s PodSecurity check: the level the namespace enforces (its label
`pod-security.kubernetes.io/enforce`; not set means `privileged`, every pod admitted) against the level the workers'
pod template, as the chart rendered it from the values files, needs. Workers that need more than the namespace
enforces never start: the StatefulSet controller's pods are refused. A namespace that enforces less than the workers
pass is a warning, with the label that would enforce it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .check import Check, listed

ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
LEVELS = ("privileged", "baseline", "restricted")  # from the most permissive
NAME = "PodSecurity"

# Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards): what each level allows.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
RESTRICTED_VOLUMES = frozenset(
    {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret"}
)


def _capability(name: str) -> str:
    return name.removeprefix("CAP_")


def beyond_baseline(spec: Mapping[str, Any]) -> list[str]:
    """What in a pod spec only `privileged` admits."""
    found = [key for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    found += [f"hostPath volume {v.get('name')}" for v in spec.get("volumes") or [] if "hostPath" in v]
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            found.append(f"privileged container {container.get('name')}")
        found += [
            f"capability {cap}"
            for cap in (context.get("capabilities") or {}).get("add") or []
            if _capability(cap) not in BASELINE_CAPABILITIES
        ]
        if not spec.get("hostNetwork"):
            found += [f"hostPort {p['hostPort']}" for p in container.get("ports") or [] if p.get("hostPort")]
        if (context.get("seccompProfile") or {}).get("type") == "Unconfined":
            found.append("seccomp Unconfined")
    if ((spec.get("securityContext") or {}).get("seccompProfile") or {}).get("type") == "Unconfined":
        found.append("seccomp Unconfined")
    return list(dict.fromkeys(found))


def beyond_restricted(spec: Mapping[str, Any]) -> list[str]:
    """What in a pod spec `baseline` admits and `restricted` does not (what is beyond baseline excluded)."""
    pod_context = spec.get("securityContext") or {}
    found = [
        f"volume {v.get('name')} ({', '.join(sorted(set(v) - {'name'}))})"
        for v in spec.get("volumes") or []
        if "hostPath" not in v and not (set(v) - {"name"}) <= RESTRICTED_VOLUMES
    ]
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        context = container.get("securityContext") or {}
        if context.get("allowPrivilegeEscalation") is not False:
            found.append("allowPrivilegeEscalation not false")
        if not context.get("runAsNonRoot", pod_context.get("runAsNonRoot")):
            found.append("runAsNonRoot not true")
        if context.get("runAsUser", pod_context.get("runAsUser")) == 0:
            found.append("runAsUser 0")
        seccomp = (context.get("seccompProfile") or pod_context.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost", "Unconfined"):
            found.append("no seccompProfile RuntimeDefault")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append("capabilities.drop without ALL")
        found += [
            f"capability {cap}"
            for cap in capabilities.get("add") or []
            if _capability(cap) in BASELINE_CAPABILITIES - {"NET_BIND_SERVICE"}
        ]
    return list(dict.fromkeys(found))


def needed_level(specs: Sequence[Mapping[str, Any]]) -> tuple[str, list[str]]:
    """The most restrictive level that admits every pod spec, and what keeps it from a stricter one."""
    beyond = [reason for spec in specs for reason in beyond_baseline(spec)]
    if beyond:
        return "privileged", list(dict.fromkeys(beyond))
    beyond = [reason for spec in specs for reason in beyond_restricted(spec)]
    if beyond:
        return "baseline", list(dict.fromkeys(beyond))
    return "restricted", []


def worker_pod_specs(manifests: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        ((m.get("spec") or {}).get("template") or {}).get("spec") or {}
        for m in manifests
        if m.get("kind") == "StatefulSet"
    ]


def _needs(level: str, reasons: Sequence[str]) -> str:
    return f"'{level}'" + (f" ({listed(list(reasons))})" if reasons else "")


def pod_security_check(
    namespace: str, labels: Mapping[str, str] | None, manifests: Sequence[Mapping[str, Any]], why: str = ""
) -> Check:
    """The verdict for a namespace with `labels` (None: they could not be read, `why`) and the rendered manifests."""
    specs = worker_pod_specs(manifests)
    needed, reasons = needed_level(specs) if specs else ("", [])
    workers = f"the workers as configured need {_needs(needed, reasons)}" if needed else "no worker template rendered"
    read = f"as an administrator: kubectl get namespace {namespace} -L {ENFORCE_LABEL} (empty means privileged)"
    if labels is None:
        return Check(NAME, "skip", f"the labels of namespace {namespace} cannot be read{why}; {workers}", read)
    value = labels.get(ENFORCE_LABEL)
    enforced = value if value in LEVELS else ("privileged" if value is None else "restricted")
    shown = (
        f"not set ({ENFORCE_LABEL}: every pod is admitted, as 'privileged')"
        if value is None
        else f"'{value}'" + ("" if value in LEVELS else " (not a level: the API server then enforces 'restricted')")
    )
    detail = f"namespace {namespace} enforces {shown}; {workers}"
    label = f"kubectl label namespace {namespace} {ENFORCE_LABEL}="
    if needed and LEVELS.index(needed) < LEVELS.index(enforced):
        return Check(
            NAME,
            "fail",
            detail + ": their pods would be refused",
            f"drop what needs more from the values, or have an administrator enforce a level the workers pass "
            f"({label}{needed} --overwrite) in a namespace of their own (docs/en/security.md#pod-security)",
        )
    stricter = needed or "restricted"
    if LEVELS.index(stricter) > LEVELS.index(enforced):
        return Check(
            NAME,
            "warn",
            detail,
            f"enforce the strictest level the workers pass, as an administrator: {label}{stricter}"
            + (" --overwrite" if value is not None else "")
            + " (docs/en/security.md#pod-security)",
        )
    return Check(NAME, "pass", detail)


def check_pod_security(core: client.CoreV1Api, namespace: str, manifests: Sequence[Mapping[str, Any]]) -> Check:
    try:
        found = core.read_namespace(namespace)
    except ApiException as error:
        if error.status == 404:
            return Check(
                NAME,
                "skip",
                f"namespace {namespace} does not exist",
                f"create it, as an administrator: kubectl create namespace {namespace}",
            )
        why = (
            " with these credentials (HTTP 403: the Role of rbac/ grants no access to Namespace objects)"
            if error.status == 403
            else f" (HTTP {error.status} {error.reason})"
        )
        return pod_security_check(namespace, None, manifests, why)
    return pod_security_check(namespace, found.metadata.labels or {}, manifests)
