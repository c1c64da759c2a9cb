"""`areal-workers doctor`'s probe: a one-worker release created by KubernetesScheduler itself, whose /health is then
fetched from this process on the pod IP (as the controller calls workers), deleted whatever happened."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

import requests
from kubernetes.client.exceptions import ApiException

from ... import naming
from ...areal_types import Job
from ...config import KubernetesSchedulerConfig
from ...errors import SchedulerError
from ...orchestration import driver as release_driver
from ...release.values import DEFAULT_COMMAND
from ...scheduler import KubernetesScheduler
from .chart import PROBE_EXPERIMENT, PROBE_ROLE, probe_spec
from .check import Check, Status

HEALTH_ATTEMPTS = 3
HEALTH_TIMEOUT = 10.0


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


def _not_the_storage_warning(record: logging.LogRecord) -> bool:
    """The shared-storage warning concerns a trial's storage: the probe's release is gone within the command."""
    return not hasattr(record, release_driver.UNSHARED_PATHS)


def probe_worker(
    config: KubernetesSchedulerConfig,
    make_scheduler: Callable[[KubernetesSchedulerConfig, str, str], KubernetesScheduler],
    health: Callable[[str, str], str | None] = http_health,
    progress: Callable[[str], None] = lambda message: None,
) -> Check:
    """One worker in a release of its own, its /health from here, and the release deleted whatever happened."""
    probe_config = replace(config, release_name=None, ownership="managed")
    trial = uuid.uuid4().hex[:8]
    release = naming.release_name(PROBE_EXPERIMENT, trial)
    progress(f"probe: creating one worker in release {release} (namespace {config.namespace})")
    release_driver.logger.addFilter(_not_the_storage_warning)
    try:
        try:
            scheduler = make_scheduler(probe_config, PROBE_EXPERIMENT, trial)
        except (SchedulerError, ApiException) as error:
            return Check(
                "worker reachable",
                "fail",
                f"the scheduler could not start: {error}",
                "fix the cause above (permissions and chart checks name most)",
            )
        try:
            check = _create_and_call(scheduler, probe_config, release, health, progress)
        finally:
            progress(f"probe: deleting release {release}")
            left = _delete(scheduler)
    finally:
        release_driver.logger.removeFilter(_not_the_storage_warning)
    if left:
        status: Status = "fail" if check.status == "fail" else "warn"
        fix = "; ".join(
            part for part in (check.fix, f"delete it: helm uninstall {release} -n {config.namespace}") if part
        )
        return Check(check.name, status, _then(check.detail, f"release {release} was not deleted: {left}"), fix)
    return replace(check, detail=_then(check.detail, f"release {release} deleted"))


def _then(detail: str, more: str) -> str:
    return detail + ("\n" if "\n" in detail else "; ") + more


def _create_and_call(
    scheduler: KubernetesScheduler,
    config: KubernetesSchedulerConfig,
    release: str,
    health: Callable[[str, str], str | None],
    progress: Callable[[str], None],
) -> Check:
    name = "worker reachable"
    what = DEFAULT_COMMAND + (f", image {config.image}" if config.image else "")
    try:
        scheduler.create_workers(Job(role=PROBE_ROLE, replicas=1, tasks=[probe_spec(0)]))
        progress(f"probe: waiting up to {config.ready_timeout:g}s for the worker to be Ready")
        worker = scheduler.get_workers(PROBE_ROLE, timeout=config.ready_timeout)[0]
    except SchedulerError as error:
        diagnosis = getattr(error, "diagnosis", None) or str(error)
        return Check(
            name,
            "fail",
            f"the probe worker ({what}) did not become Ready: {diagnosis}",
            "follow the advice in the diagnosis: the trainer's workers would fail the same way (image, "
            "values_files, node selection, ready_timeout for slow image pulls)",
        )
    except ApiException as error:
        return Check(
            name,
            "fail",
            f"the probe failed on an API call: HTTP {error.status} {error.reason}",
            "fix the permissions reported above",
        )
    address = f"{worker.ip}:{worker.worker_ports[0]}"
    progress(f"probe: GET http://{address}/health")
    problem = health(worker.ip, worker.worker_ports[0])
    if problem is None:
        return Check(name, "pass", f"worker {worker.id} (pod IP {address}) answered GET /health from this machine")
    if problem.startswith("HTTP "):
        return Check(
            name,
            "fail",
            f"worker {worker.id} at {address} answered GET /health with {problem}",
            "the worker server is unhealthy: check its log (kubectl logs) and the image's AReaL version",
        )
    return Check(
        name,
        "fail",
        f"pod IP {address} not reachable from this machine: {problem}",
        "run the trainer inside the cluster (a pod labelled areal.io/controller=true, which the chart's "
        "NetworkPolicy admits) or route pod IPs to this machine and add its address to "
        "networkPolicy.controller.cidrs (values_files)",
    )


def _delete(scheduler: KubernetesScheduler) -> str:
    """Deletes the probe's workers and release; what went wrong, or "" when nothing is left."""
    try:
        scheduler.delete_workers()
    except (SchedulerError, ApiException) as error:
        return str(error)
    finally:
        scheduler.close()
    return ""
