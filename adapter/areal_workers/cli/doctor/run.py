"""Preflight checks of `areal-workers doctor`: can this identity, from this machine, run AReaL's workers here?
Each check passes, fails, warns or is skipped, with what was found and, unless it passed, what to change:
the API server answers; one SelfSubjectAccessReview per verb and resource of rbac/role.yaml (shipped in the wheel)
in the namespace, plus listing nodes (optional: a warning); `helm template` of the chart and values files for a
one-role probe (the schema too); how many workers of `gpus_per_worker` GPUs the nodes hold now, judged with the
adapter's own `diagnosis.node_fit` on the pod template the chart rendered; and a one-worker release created by
KubernetesScheduler itself, whose /health is then fetched from this process on the pod IP (as the controller
calls workers), deleted whatever happened.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import requests
import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ... import naming
from ...areal_types import Job, SchedulingSpec
from ...config import KubernetesSchedulerConfig
from ...errors import SchedulerError
from ...release.client import HelmError, HelmNotFoundError, Releases, find_helm, helm_error_text
from ...release.model import ReleaseModel
from ...release.values import DEFAULT_COMMAND, TopologyError, base_values, role_values
from ...runtime import backend
from ...scheduler import KubernetesScheduler
from .check import Check, Status
from .gpus import check_gpus, gpu_capacity, listed

__all__ = ["Access", "Check", "ROLE_FILE", "gpu_capacity", "permission_check", "probe_worker", "role_accesses",
           "run_doctor"]

RBAC_DIR = Path(__file__).parents[2] / "rbac"  # a symlink to the checkout's rbac/, a directory in the wheel
ROLE_FILE = RBAC_DIR / "role.yaml"
ROLE_FILE_NAME = "rbac/role.yaml"
PROBE_EXPERIMENT = "areal-workers-doctor"
PROBE_ROLE = "doctor"
HEALTH_ATTEMPTS = 3
HEALTH_TIMEOUT = 10.0


# --- permissions ------------------------------------------------------------------------------------------------


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
                for verb in rule["verbs"]:
                    accesses[Access(verb, group, name, subresource)] = None
    return role["metadata"]["name"], list(accesses)


def permission_check(access: Access, allowed: bool, reason: str, namespace: str, role: str) -> Check:
    """The verdict of one review, with the file and command that grant a missing permission."""
    where = f"in namespace {namespace}" if access.namespaced else "at cluster scope"
    if allowed:
        return Check(access.name, "pass", f"allowed {where}")
    found = f"missing: {access.verb} {access.resource_text} {where}" + (f" ({reason})" if reason else "")
    if not access.required:  # listing nodes
        return Check(access.name, "warn", found + "; optional: diagnoses lose node details, the GPU check is skipped",
                     f"a ClusterRole bound to this identity grants it, e.g. for ServiceAccount {role}: kubectl create "
                     f"clusterrole areal-node-reader --verb=get,list --resource=nodes && kubectl create "
                     f"clusterrolebinding areal-node-reader --clusterrole=areal-node-reader "
                     f"--serviceaccount={namespace}:{role}")
    return Check(access.name, "fail", found,
                 f"granted by {ROLE_FILE_NAME} (Role {role}); apply it: kubectl apply -n {namespace} -f {RBAC_DIR}/ "
                 f"and run the controller as ServiceAccount {role}, or bind the Role to this identity")


def _review(authorization: client.AuthorizationV1Api, access: Access, namespace: str) -> tuple[bool, str]:
    attributes = client.V1ResourceAttributes(
        namespace=namespace if access.namespaced else None, verb=access.verb, group=access.group,
        resource=access.resource, subresource=access.subresource or None)
    review = authorization.create_self_subject_access_review(
        client.V1SelfSubjectAccessReview(spec=client.V1SelfSubjectAccessReviewSpec(resource_attributes=attributes)))
    status = review.status
    return bool(status.allowed), status.evaluation_error or status.reason or ""


def check_permissions(authorization: client.AuthorizationV1Api, namespace: str,
                      role_file: Path = ROLE_FILE) -> list[Check]:
    role, accesses = role_accesses(role_file.read_text())
    checks = []
    for access in [*accesses, NODE_LIST]:
        try:
            allowed, reason = _review(authorization, access, namespace)
        except ApiException as error:
            return [*checks, Check("permissions", "fail",
                                   f"SelfSubjectAccessReview of {access.verb} {access.resource_text} failed: "
                                   f"HTTP {error.status} {error.reason}",
                                   "the API server must serve authorization.k8s.io/v1 to every authenticated user "
                                   "(ClusterRole system:basic-user): ask the cluster's administrators")]
        checks.append(permission_check(access, allowed, reason, namespace, role))
    return checks


# --- the chart --------------------------------------------------------------------------------------------------


def probe_spec(gpus: int) -> SchedulingSpec:
    return SchedulingSpec(cpu=1, mem=1, gpu=gpus, port_count=1, cmd=DEFAULT_COMMAND)


def probe_values(config: KubernetesSchedulerConfig, gpus: int, replicas: int) -> dict[str, Any]:
    """The values create_workers would apply for one role of `replicas` workers on a fresh release."""
    base = base_values(config, PROBE_EXPERIMENT, "render")
    return ReleaseModel().with_role(PROBE_ROLE, role_values(probe_spec(gpus), replicas, config), base)


def render_chart(config: KubernetesSchedulerConfig, gpus: int, workers: int) -> tuple[Check, list[dict[str, Any]]]:
    """`helm template` of the probe role (the chart's values.schema.json is checked by helm on the way)."""
    name = "chart renders"
    try:
        find_helm(config.helm_executable)
    except HelmNotFoundError as missing:
        return Check(name, "fail", f"helm not found: {missing.where}", missing.fix), []
    sources = " with " + ", ".join(config.values_files) if config.values_files else ""
    try:
        values = probe_values(config, gpus, workers)
        manifests = asyncio.run(Releases(config).render(naming.release_name(PROBE_EXPERIMENT, "render"), values))
    except TopologyError as error:
        return Check(name, "fail", str(error), "fix KubernetesSchedulerConfig (the value named above)"), []
    except HelmError as error:
        return Check(name, "fail", f"helm template {config.chart}{sources}: {helm_error_text(error)}",
                     "fix the values files (or the chart) where helm's error points"), []
    except (OSError, ValueError, yaml.YAMLError) as error:
        return Check(name, "fail", f"cannot load the values files: {error}",
                     "values_files must name readable YAML files, each a mapping at the top level"), []
    kinds = sorted({manifest.get("kind", "?") for manifest in manifests})
    return Check(name, "pass", f"helm template {config.chart}{sources}: {len(manifests)} objects "
                               f"({', '.join(kinds)}), values accepted by the chart's schema"), manifests


# --- the probe worker -------------------------------------------------------------------------------------------


def http_health(ip: str, port: str) -> str | None:
    """None when GET /health answers 200, else why not (connection errors are retried briefly)."""
    url = f"http://{ip}:{port}/health"
    problem = ""
    for attempt in range(HEALTH_ATTEMPTS):
        if attempt:
            time.sleep(1.0)
        try:
            response = requests.get(url, timeout=HEALTH_TIMEOUT)
        except requests.RequestException as error:
            problem = f"{type(error).__name__}: {error}"
            continue
        return None if response.status_code == 200 else f"HTTP {response.status_code}"
    return problem


def probe_worker(config: KubernetesSchedulerConfig, make_scheduler: Callable[[KubernetesSchedulerConfig, str, str],
                 KubernetesScheduler], health: Callable[[str, str], str | None] = http_health,
                 progress: Callable[[str], None] = lambda message: None) -> Check:
    """One worker in a release of its own, its /health from here, and the release deleted whatever happened."""
    probe_config = replace(config, release_name=None, ownership="managed")
    trial = uuid.uuid4().hex[:8]
    release = naming.release_name(PROBE_EXPERIMENT, trial)
    progress(f"probe: creating one worker in release {release} (namespace {config.namespace})")
    try:
        scheduler = make_scheduler(probe_config, PROBE_EXPERIMENT, trial)
    except (SchedulerError, ApiException) as error:
        return Check("worker reachable", "fail", f"the scheduler could not start: {error}",
                     "fix the cause above (permissions and chart checks name most)")
    try:
        check = _create_and_call(scheduler, probe_config, release, health, progress)
    finally:
        progress(f"probe: deleting release {release}")
        left = _delete(scheduler)
    if left:
        status: Status = "fail" if check.status == "fail" else "warn"
        fix = "; ".join(part for part in (check.fix, f"delete it: helm uninstall {release} -n {config.namespace}")
                        if part)
        return Check(check.name, status, _then(check.detail, f"release {release} was not deleted: {left}"), fix)
    return replace(check, detail=_then(check.detail, f"release {release} deleted"))


def _then(detail: str, more: str) -> str:
    return detail + ("\n" if "\n" in detail else "; ") + more


def _create_and_call(scheduler: KubernetesScheduler, config: KubernetesSchedulerConfig, release: str,
                     health: Callable[[str, str], str | None], progress: Callable[[str], None]) -> Check:
    name = "worker reachable"
    what = DEFAULT_COMMAND + (f", image {config.image}" if config.image else "")
    try:
        scheduler.create_workers(Job(role=PROBE_ROLE, replicas=1, tasks=[probe_spec(0)]))
        progress(f"probe: waiting up to {config.ready_timeout:g}s for the worker to be Ready")
        worker = scheduler.get_workers(PROBE_ROLE, timeout=config.ready_timeout)[0]
    except SchedulerError as error:
        diagnosis = getattr(error, "diagnosis", None) or str(error)
        return Check(name, "fail", f"the probe worker ({what}) did not become Ready: {diagnosis}",
                     "follow the advice in the diagnosis: the trainer's workers would fail the same way (image, "
                     "values_files, node selection, ready_timeout for slow image pulls)")
    except ApiException as error:
        return Check(name, "fail", f"the probe failed on an API call: HTTP {error.status} {error.reason}",
                     "fix the permissions reported above")
    address = f"{worker.ip}:{worker.worker_ports[0]}"
    progress(f"probe: GET http://{address}/health")
    problem = health(worker.ip, worker.worker_ports[0])
    if problem is None:
        return Check(name, "pass", f"worker {worker.id} (pod IP {address}) answered GET /health from this machine")
    if problem.startswith("HTTP "):
        return Check(name, "fail", f"worker {worker.id} at {address} answered GET /health with {problem}",
                     "the worker server is unhealthy: check its log (kubectl logs) and the image's AReaL version")
    return Check(name, "fail", f"pod IP {address} not reachable from this machine: {problem}",
                 "run the trainer inside the cluster (a pod labelled areal.io/controller=true, which the chart's "
                 "NetworkPolicy admits) or route pod IPs to this machine and add its address to "
                 "networkPolicy.controller.cidrs (values_files)")


def _delete(scheduler: KubernetesScheduler) -> str:
    """Deletes the probe's workers and release; what went wrong, or "" when nothing is left."""
    try:
        scheduler.delete_workers()
    except (SchedulerError, ApiException) as error:
        return str(error)
    finally:
        scheduler.close()
    return ""


# --- all of it --------------------------------------------------------------------------------------------------


def check_cluster(api_client: client.ApiClient) -> Check:
    host = api_client.configuration.host
    try:
        version = client.VersionApi(api_client).get_code()
    except ApiException as error:
        return Check("cluster reachable", "fail", f"{host} answered HTTP {error.status} {error.reason}",
                     "check the kubeconfig's credentials (kubeconfig, context) for this cluster")
    except urllib3.exceptions.HTTPError as error:
        return Check("cluster reachable", "fail", f"cannot reach {host}: {error}",
                     "check the kubeconfig and context, and that this machine reaches the API server")
    return Check("cluster reachable", "pass", f"Kubernetes {version.git_version} at {host}")


def run_doctor(api_client: client.ApiClient, config: KubernetesSchedulerConfig, *, gpus_per_worker: int = 0,
               workers: int = 1, probe: bool = True,
               progress: Callable[[str], None] = lambda message: None) -> list[Check]:
    """Every check, in order; a check whose precondition failed is skipped with the reason. Synchronous: call it
    from a thread without a running asyncio loop."""
    progress("connecting to the cluster")
    checks = [check_cluster(api_client)]
    reachable = checks[0].status == "pass"
    if reachable:
        progress(f"checking the permissions of {ROLE_FILE_NAME} in namespace {config.namespace}")
        checks += check_permissions(client.AuthorizationV1Api(api_client), config.namespace)
    progress("rendering the chart")
    rendered, manifests = render_chart(config, gpus_per_worker, workers)
    checks.append(rendered)
    if gpus_per_worker <= 0:
        checks.append(Check("GPU capacity", "skip", "no GPUs asked for (gpus_per_worker=0)"))
    elif not reachable:
        checks.append(Check("GPU capacity", "skip", "the cluster is not reachable"))
    else:
        progress(f"counting nodes with {gpus_per_worker} free GPUs")
        checks.append(check_gpus(client.CoreV1Api(api_client), manifests, PROBE_ROLE, gpus_per_worker, workers))
    # The probe worker asks for no GPUs, so only the other failures would make it fail for a known cause.
    blockers = [check.name for check in checks if check.status == "fail" and check.name != "GPU capacity"]
    if not probe:
        checks.append(Check("worker reachable", "skip", "not asked for (probe=False)"))
    elif blockers:
        checks.append(Check("worker reachable", "skip",
                            f"not tried: {len(blockers)} check(s) above failed ({listed(blockers)})", "fix those first"))
    else:
        connect = functools.partial(backend.connect, api_client=api_client)
        checks.append(probe_worker(config, lambda probe_config, experiment, trial: KubernetesScheduler(
            config=probe_config, experiment_name=experiment, trial_name=trial, connect=connect), progress=progress))
    return checks
