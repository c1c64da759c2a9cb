"""`areal-workers doctor`'s namespace check, made before the permission checks: a namespace that does not exist (or
is being deleted) is one failed check that says how to create it, not a list of permissions rbac/ would grant. The
scheduler's own check (cluster_access.check_namespace) decides: an identity that may not read Namespace objects
(rbac/'s Role) is judged by a namespaced read."""

from __future__ import annotations

from kubernetes import client

from ... import cluster_access
from ...errors import ClusterAccessError
from ..session import CLI_SETTINGS
from .check import Check

NAME = "namespace"


def check_namespace(core: client.CoreV1Api, namespace: str) -> tuple[Check, bool]:
    """The check (passes when the namespace exists and this identity may work there, fails with the cause
    otherwise), and whether the namespace is missing or being deleted: then no namespaced check is worth making."""
    try:
        cluster_access.check_namespace(core, namespace, CLI_SETTINGS)
    except ClusterAccessError as error:
        text = str(error)
        if error.cause == "namespace-missing":
            return Check(NAME, "fail", f"namespace {namespace} does not exist", text.partition(": ")[2]), True
        if error.cause == "namespace-terminating":
            return Check(NAME, "fail", f"namespace {namespace} is being deleted", text.partition(": ")[2]), True
        # forbidden (the namespace missing, or no RoleBinding there), unauthorized, unreachable: cause and fix
        return Check(NAME, "fail", text), False
    return Check(NAME, "pass", f"namespace {namespace} exists and this identity may work there"), False
