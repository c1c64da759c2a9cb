"""`areal-workers submit -f trainer.yaml -- python train.py ...`: the trainer as a Job in the namespace, its log
streamed here, and the trainer's own exit code as the command's."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ... import diagnosis
from ...pods.watch import WaitTimedOut
from .. import log_stream
from ..output import Format, console, emit
from ..session import EXIT_OK, EXIT_PROBLEM, EXIT_TIMEOUT, EXIT_USAGE, CliError, Session
from ..trainer_job import load_spec, trainer_job

FINISHED = ("Succeeded", "Failed")
LOG_DRAIN_SECONDS = 2.0  # for the last lines after the pod has finished


def _started_or_failed(pods: dict[str, client.V1Pod]) -> bool:
    for pod in pods.values():
        if pod.status.phase in ("Running", *FINISHED):
            return True
        problem = diagnosis.diagnose_pod(pod)
        if problem is not None and problem.fatal:
            raise CliError(f"the trainer pod cannot start:\n{problem.render()}", EXIT_PROBLEM)
    return False


def _finished(pods: dict[str, client.V1Pod]) -> bool:
    return any(pod.status.phase in FINISHED for pod in pods.values())


def _exit_code(pod: client.V1Pod) -> int:
    for status in pod.status.container_statuses or []:
        if status.state and status.state.terminated is not None:
            return int(status.state.terminated.exit_code)
    return EXIT_OK if pod.status.phase == "Succeeded" else EXIT_PROBLEM


def _open_log(session: Session, pod: str, timeout: float) -> Any:
    """The trainer's log, followed; a log that cannot be read yet (400: the container is still being created) is
    retried until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return session.core.read_namespaced_pod_log(pod, session.namespace, follow=True, _preload_content=False)
        except ApiException as error:
            if error.status != 400 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _follow_until_finished(session: Session, pod: str, selector: str, start_timeout: float) -> client.V1Pod:
    """Copies the log while the pod runs; returns the finished pod. The stream is closed once the pod has finished
    (a log server may keep following a file whose writer is gone)."""
    response = _open_log(session, pod, start_timeout)
    reader = log_stream.start_copy(response)
    try:
        finished = session.pods().wait(selector, _finished, 365 * 86400.0)
    finally:
        log_stream.stop_copy(response, reader, LOG_DRAIN_SECONDS)
    return next(p for p in finished.values() if p.status.phase in FINISHED)


def submit(
    session: Session,
    spec_file: str | None,
    overrides: dict[str, Any],
    command: list[str],
    dry_run: bool,
    detach: bool,
    start_timeout: float,
    fmt: Format,
) -> int:
    manifest = trainer_job(load_spec(Path(spec_file) if spec_file else None, overrides), command, session.namespace)
    if dry_run:
        if fmt == "json":
            emit(manifest, "json")
        else:
            print(yaml.safe_dump(manifest, sort_keys=False), end="")
        return EXIT_OK
    name = manifest["metadata"]["name"]
    batch = client.BatchV1Api(session.api)
    try:
        batch.create_namespaced_job(session.namespace, manifest)
    except ApiException as error:
        if error.status == 409:
            raise CliError(
                f"job {name} already exists in namespace {session.namespace}: delete it (kubectl delete "
                f"job {name}) or choose another name (--name)",
                EXIT_USAGE,
            ) from None
        raise
    err = console(stderr=True)
    err.print(f"submitted job {name} in namespace {session.namespace}")
    if detach:
        return EXIT_OK
    selector = f"job-name={name}"
    pods = session.pods()
    try:
        with err.status(f"waiting for the trainer pod of job {name} to start"):
            started = pods.wait(selector, _started_or_failed, start_timeout)
    except WaitTimedOut as waited:
        states = "; ".join(f"{p.metadata.name}: {p.status.phase}" for p in waited.pods.values()) or "no pod yet"
        raise CliError(
            f"the trainer did not start within {start_timeout:.0f}s ({states}); kubectl describe job "
            f"{name} -n {session.namespace}",
            EXIT_TIMEOUT,
        ) from None
    try:
        pod = _follow_until_finished(session, next(iter(started)), selector, start_timeout)
    except KeyboardInterrupt:
        err.print(f"detached; the trainer keeps running (kubectl logs -f job/{name} -n {session.namespace})")
        return EXIT_OK
    code = _exit_code(pod)
    err.print(f"trainer {pod.metadata.name} {pod.status.phase.lower()} with exit code {code}")
    return code
