"""`areal-workers submit -f trainer.yaml -- python train.py ...`: the trainer as a Job in the namespace, its log
streamed here, and the trainer's own exit code as the command's."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .. import diagnosis
from ..podwatch import WaitTimedOut
from .output import Format, console, emit
from .session import EXIT_OK, EXIT_PROBLEM, EXIT_TIMEOUT, EXIT_USAGE, CliError, Session
from .trainer_job import load_spec, trainer_job

FINISHED = ("Succeeded", "Failed")


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


def submit(session: Session, spec_file: str | None, overrides: dict[str, Any], command: list[str], dry_run: bool,
           detach: bool, start_timeout: float, fmt: Format) -> int:
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
            raise CliError(f"job {name} already exists in namespace {session.namespace}: delete it (kubectl delete "
                           f"job {name}) or choose another name (--name)", EXIT_USAGE) from None
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
        raise CliError(f"the trainer did not start within {start_timeout:.0f}s ({states}); kubectl describe job "
                       f"{name} -n {session.namespace}", EXIT_TIMEOUT) from None
    pod_name = next(iter(started))
    try:
        response = session.core.read_namespaced_pod_log(pod_name, session.namespace, follow=True,
                                                        _preload_content=False)
        for chunk in response.stream(4096):
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
    except KeyboardInterrupt:
        err.print(f"detached; the trainer keeps running (kubectl logs -f job/{name} -n {session.namespace})")
        return EXIT_OK
    finished = pods.wait(selector, _finished, 600.0)
    pod = next(p for p in finished.values() if p.status.phase in FINISHED)
    code = _exit_code(pod)
    err.print(f"trainer {pod.metadata.name} {pod.status.phase.lower()} with exit code {code}")
    return code
