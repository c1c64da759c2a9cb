"""Before a scheduler touches anything: the API server answers, its namespace exists, and this identity may work
there. Each failure becomes one ClusterAccessError that names the real cause (an API server that does not answer,
credentials it rejects, a namespace that does not exist, a namespace without a RoleBinding for this identity) and
the change that fixes it, instead of a guess such as "apply rbac/" for a namespace that was never created.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from .errors import ClusterAccessError

APPLY_RBAC = "kubectl apply -n {namespace} -f rbac/"


@dataclass(frozen=True)
class Settings:
    """Where the reader of a message chooses the namespace and the cluster: the scheduler's options (SCHEDULER), or
    a command line's (the CLI's)."""

    namespace: str
    credentials: str


SCHEDULER = Settings(
    namespace="the scheduler's namespace (AREAL_K8S_NAMESPACE)",
    credentials="the kubeconfig and context the scheduler uses (kubeconfig, context; AREAL_K8S_KUBECONFIG, "
    "AREAL_K8S_CONTEXT)",
)


def _status(error: ApiException) -> dict[str, Any]:
    try:
        body = json.loads(error.body or "{}")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _user(message: str) -> str | None:
    found = re.search(r'User "([^"]+)"', message)
    return found.group(1) if found else None


def attempted(message: str) -> str | None:
    """What a 'forbidden' answer says was refused, in kubectl's spelling: `list pods`, `create jobs.batch`,
    `patch statefulsets.apps/scale`; None when the message does not say."""
    found = re.search(r'cannot (\S+) resource "([^"]+)"(?: in API group "([^"]*)")?', message)
    if found is None:
        return None
    verb, resource, group = found.group(1), found.group(2), found.group(3) or ""
    name, _, subresource = resource.partition("/")
    return f"{verb} {name}" + (f".{group}" if group else "") + (f"/{subresource}" if subresource else "")


def missing_namespace(namespace: str, settings: Settings = SCHEDULER) -> ClusterAccessError:
    return ClusterAccessError(
        "namespace-missing",
        f"namespace {namespace} does not exist: create it (kubectl create namespace {namespace}) and give the "
        f"trainer's identity the Role of rbac/ there ({APPLY_RBAC.format(namespace=namespace)}), or set "
        f"{settings.namespace} to one that exists",
    )


def terminating_namespace(namespace: str) -> ClusterAccessError:
    return ClusterAccessError(
        "namespace-terminating",
        f"namespace {namespace} is being deleted: wait until it is gone and create it again "
        f"(kubectl wait --for=delete namespace/{namespace} --timeout=5m), or use another namespace",
    )


def forbidden(namespace: str, message: str, doing: str) -> ClusterAccessError:
    user = _user(message)
    who = f"user {user}" if user else "this identity"
    return ClusterAccessError(
        "forbidden",
        f"{who} may not {doing} in namespace {namespace} ({message}). Either the namespace does not exist (a "
        f"namespaced identity is told 'forbidden' then, not 'not found') or no RoleBinding there grants the Role "
        f"of rbac/: create the namespace if it is missing (kubectl create namespace {namespace}, as an "
        f"administrator) and apply rbac/ in it ({APPLY_RBAC.format(namespace=namespace)}); "
        f"`areal-workers doctor -n {namespace}` lists each permission that is missing",
    )


def unauthorized(server: str) -> ClusterAccessError:
    return ClusterAccessError(
        "unauthorized",
        f"the API server at {server} rejected the credentials (401 Unauthorized): the kubeconfig's token or "
        f"certificate is invalid or expired; a ServiceAccount token stops working when its ServiceAccount or its "
        f"namespace is deleted",
    )


def unreachable(server: str, error: BaseException, settings: Settings = SCHEDULER) -> ClusterAccessError:
    reason = str(getattr(error, "reason", None) or error)
    return ClusterAccessError(
        "unreachable",
        f"cannot reach the Kubernetes API server at {server}: {reason}; check {settings.credentials} and that the "
        f"cluster is up (kubectl cluster-info)",
    )


def api_failure(
    error: ApiException | HTTPError | OSError,
    namespace: str,
    server: str,
    doing: str,
    settings: Settings = SCHEDULER,
) -> ClusterAccessError | None:
    """The cause of a failed request made while `doing` something in `namespace`; None for an answer that is not
    about access (a conflict, a validation error: the caller's own business). `settings`: how the reader changes
    the namespace and the cluster (the scheduler's options unless told)."""
    if not isinstance(error, ApiException):
        return unreachable(server, error, settings)
    status = _status(error)
    if error.status == 401:
        return unauthorized(server)
    if error.status == 403:
        return forbidden(namespace, str(status.get("message") or error.reason), doing)
    details = status.get("details") or {}
    if error.status == 404 and details.get("kind") == "namespaces":
        return missing_namespace(str(details.get("name") or namespace), settings)
    return None


def check_namespace(core: client.CoreV1Api, namespace: str, settings: Settings = SCHEDULER) -> None:
    """Raises ClusterAccessError unless `namespace` exists, is not being deleted and this identity may work in it.
    A namespaced identity (rbac/) may not read Namespace objects: then a namespaced read tells whether it may work
    there."""
    server = core.api_client.configuration.host
    try:
        found = core.read_namespace(namespace)
    except ApiException as error:
        if error.status == 404:
            raise missing_namespace(namespace, settings) from None
        if error.status != 403:
            raise (api_failure(error, namespace, server, "read the namespace", settings) or error) from None
        _check_namespaced_access(core, namespace, server, settings)
        return
    except (HTTPError, OSError) as error:
        raise unreachable(server, error, settings) from None
    if found.status is not None and found.status.phase == "Terminating":
        raise terminating_namespace(namespace)


def _check_namespaced_access(core: client.CoreV1Api, namespace: str, server: str, settings: Settings) -> None:
    try:
        core.list_namespaced_pod(namespace, limit=1)
    except (ApiException, HTTPError, OSError) as error:
        raise (api_failure(error, namespace, server, "list pods", settings) or error) from None
