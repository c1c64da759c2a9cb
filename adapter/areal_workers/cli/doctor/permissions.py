"""`areal-workers doctor`'s permission checks: one SelfSubjectAccessReview per verb and resource of rbac/role.yaml
(shipped in the wheel) in the namespace, plus listing nodes (optional: a warning)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .admission import SERVICE_ACCOUNT_PREFIX
from .check import Check

RBAC_DIR = Path(__file__).parents[2] / "rbac"  # a symlink to the checkout's rbac/, a directory in the wheel
ROLE_FILE = RBAC_DIR / "role.yaml"
ROLE_FILE_NAME = "rbac/role.yaml"


@dataclass(frozen=True)
class Access:
    """One verb on one resource: a SelfSubjectAccessReview. `required`: the adapter fails without it."""

    verb: str
    group: str
    resource: str
    subresource: str = ""
    namespaced: bool = True
    required: bool = True

    @property
    def resource_text(self) -> str:
        """kubectl's spelling: `statefulsets.apps/scale`, `pods/log`."""
        text = self.resource + (f".{self.group}" if self.group else "")
        return text + (f"/{self.subresource}" if self.subresource else "")

    @property
    def name(self) -> str:
        return f"permission {self.verb} {self.resource_text}"


NODE_LIST = Access("list", "", "nodes", namespaced=False, required=False)
# Rules of the Role the adapter works without (best-effort): what is lost, keyed by (apiGroup, resource).
OPTIONAL_RULES = {
    ("events.k8s.io", "events"): "the scheduler's decisions are not recorded as Events; it works without them",
}
NO_BINDING = "RoleBinding"  # the one row when every permission of the Role is denied


def role_accesses(text: str) -> tuple[str, list[Access]]:
    """The Role's name and one Access per (verb, apiGroup, resource[/subresource]) of its rules, in file order."""
    role = yaml.safe_load(text)
    if not isinstance(role, dict) or role.get("kind") != "Role":
        raise ValueError("expected a single rbac.authorization.k8s.io Role")
    accesses: dict[Access, None] = {}
    for rule in role.get("rules") or []:
        for group in rule.get("apiGroups") or [""]:
            for resource in rule["resources"]:
                name, _, subresource = resource.partition("/")
                required = (group, name) not in OPTIONAL_RULES
                for verb in rule["verbs"]:
                    accesses[Access(verb, group, name, subresource, required=required)] = None
    return role["metadata"]["name"], list(accesses)


def subject_flag(user: str | None) -> str | None:
    """kubectl create (cluster)rolebinding's flag for the identity the API server named (SelfSubjectReview, as
    `kubectl auth whoami` shows it): a ServiceAccount in its own namespace, or a user; None when it is unknown."""
    if not user:
        return None
    if user.startswith(SERVICE_ACCOUNT_PREFIX):
        namespace, _, name = user[len(SERVICE_ACCOUNT_PREFIX) :].partition(":")
        if namespace and name:
            return f"--serviceaccount={namespace}:{name}"
    return f"--user={user}"


def _who(user: str | None) -> str:
    return user or "this identity"


def _bind_role(role: str, namespace: str, user: str | None) -> str:
    """How to bind the Role to the checked identity, when the API server named it."""
    flag = subject_flag(user)
    if flag is None or user is None:
        return "or bind the Role to this identity (kubectl auth whoami names it)"
    binding = f"{role}-" + re.sub(r"[^a-z0-9-]+", "-", user.rsplit(":", 1)[-1].lower()).strip("-")
    return (
        f"or bind the Role to {user}: kubectl create rolebinding {binding[:63].rstrip('-')} -n {namespace} "
        f"--role={role} {flag}"
    )


def permission_check(
    access: Access, allowed: bool, reason: str, namespace: str, role: str, user: str | None = None
) -> Check:
    """The verdict of one review, with the file and command that grant a missing permission to `user` (the
    identity the API server named; None: unknown)."""
    where = f"in namespace {namespace}" if access.namespaced else "at cluster scope"
    if allowed:
        return Check(access.name, "pass", f"allowed {where}")
    found = f"missing: {access.verb} {access.resource_text} {where}" + (f" ({reason})" if reason else "")
    lost = OPTIONAL_RULES.get((access.group, access.resource))
    if lost is not None:
        return Check(
            access.name,
            "warn",
            f"{found}; optional: {lost}",
            f"granted by {ROLE_FILE_NAME} (Role {role}); apply it: kubectl apply -n {namespace} -f {RBAC_DIR}/",
        )
    if not access.required:  # listing nodes
        flag = subject_flag(user)
        grant = (
            "kubectl create clusterrole areal-node-reader --verb=get,list --resource=nodes && kubectl create "
            "clusterrolebinding areal-node-reader --clusterrole=areal-node-reader "
            + (flag or "--serviceaccount=NAMESPACE:NAME")
        )
        return Check(
            access.name,
            "warn",
            found + "; optional: diagnoses lose node details, the GPU check is skipped",
            f"a ClusterRole bound to {_who(user)} grants it: {grant}"
            + ("" if flag else " (kubectl auth whoami names the identity)"),
        )
    return Check(
        access.name,
        "fail",
        found,
        f"granted by {ROLE_FILE_NAME} (Role {role}); apply it: kubectl apply -n {namespace} -f {RBAC_DIR}/ "
        f"and run the controller as ServiceAccount {namespace}:{role}, {_bind_role(role, namespace, user)}",
    )


def no_binding_check(namespace: str, role: str, count: int, user: str | None) -> Check:
    """Every permission of the Role denied: one row, not one per permission (the identity has no binding to it)."""
    return Check(
        NO_BINDING,
        "fail",
        f"{_who(user)} has none of the {count} permissions of {ROLE_FILE_NAME} (Role {role}) in namespace "
        f"{namespace}: no RoleBinding there binds that Role to it (or the namespace does not exist: a namespaced "
        f"identity cannot tell)",
        f"apply rbac/ in the namespace: kubectl apply -n {namespace} -f {RBAC_DIR}/ (Role, RoleBinding and "
        f"ServiceAccount {role}) and run the controller as ServiceAccount {namespace}:{role}, "
        f"{_bind_role(role, namespace, user)}; a missing namespace first: kubectl create namespace {namespace}",
    )


def _review(authorization: client.AuthorizationV1Api, access: Access, namespace: str) -> tuple[bool, str]:
    attributes = client.V1ResourceAttributes(
        namespace=namespace if access.namespaced else None,
        verb=access.verb,
        group=access.group,
        resource=access.resource,
        subresource=access.subresource or None,
    )
    review = authorization.create_self_subject_access_review(
        client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes))
    )
    status = review.status
    return bool(status.allowed), status.evaluation_error or status.reason or ""


def check_permissions(
    authorization: client.AuthorizationV1Api, namespace: str, role_file: Path = ROLE_FILE, user: str | None = None
) -> list[Check]:
    """One row per access of the Role and listing nodes; `user` (the identity the API server named) goes into the
    fixes. When every access of the Role is denied, that is one row: the identity has no binding to the Role."""
    role, accesses = role_accesses(role_file.read_text())
    checks: list[Check] = []
    for access in [*accesses, NODE_LIST]:
        try:
            allowed, reason = _review(authorization, access, namespace)
        except ApiException as error:
            return [
                *checks,
                Check(
                    "permissions",
                    "fail",
                    f"SelfSubjectAccessReview of {access.verb} {access.resource_text} failed: "
                    f"HTTP {error.status} {error.reason}",
                    "the API server must serve authorization.k8s.io/v1 to every authenticated user "
                    "(ClusterRole system:basic-user): ask the cluster's administrators",
                ),
            ]
        checks.append(permission_check(access, allowed, reason, namespace, role, user))
    of_the_role = checks[: len(accesses)]
    if of_the_role and all(check.status != "pass" for check in of_the_role):  # an optional one denied is a warning
        return [no_binding_check(namespace, role, len(of_the_role), user), *checks[len(accesses) :]]
    return checks
