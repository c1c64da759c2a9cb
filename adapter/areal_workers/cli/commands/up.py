"""`areal-workers up -f job.yaml`: a trial's roles created (or changed) from a job file by KubernetesScheduler
itself, each waited for until its workers answer — what a trainer's create_workers + get_workers would do.

The release is a person's, like one installed with helm: `up` takes no Lease (nobody would renew it after `up`
exits, and a reaper would uninstall the workers once its grace passed), so it lives until `areal-workers down`. A
trainer's release (one with a Lease) is refused: `up` would change its workers behind its back."""

from __future__ import annotations

import argparse
import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ...areal_types import Job
from ...config import CAPACITY_CHECKS
from ...errors import SchedulerError, WorkerFailedError, WorkerTimeoutError
from ...orchestration import driver as release_driver
from ...release import values as job_values
from ...release.job_file import load_job_file
from ...runtime.lease import lease_name
from ...scheduler import KubernetesScheduler
from ..command import NAMES_AGREE, Command, Invocation, chart_options, duration_option
from ..output import Format, console, emit, table
from ..session import EXIT_OK, EXIT_PROBLEM, EXIT_TIMEOUT, EXIT_USAGE, CliError, Session
from .render import trial_names


def _entry(job: Job, session: Session) -> dict[str, Any] | None:
    """The role's values entry create_workers(job) would write (None when the spec is invalid: the scheduler
    raises the error)."""
    try:
        return job_values.role_values(job_values.resolve_spec(job), job.replicas, session.config)
    except job_values.TopologyError:
        return None


def _headline(error: WorkerFailedError) -> str:
    """A worker's exit code only when a container exited: an image that never pulls or a pod that is never
    scheduled has none (AReaL's WorkerFailedError then carries -1)."""
    code = getattr(error, "exit_code", None)
    if isinstance(code, int) and code >= 0:
        return f"worker {error.worker_id} exited with code {code}"
    return f"worker {error.worker_id} cannot become ready"


def failure_text(error: BaseException) -> str:
    """The scheduler's error once: a headline, the diagnosis, then the other notes (what was done about it: the
    rollback). AReaL's WorkerFailedError holds the diagnosis in its message ("... failed with exit code -1",
    "Stderr output:") and attach_diagnosis adds it as a note too: neither copy is printed as it is."""
    diagnosis = str(getattr(error, "diagnosis", "") or "")
    if isinstance(error, WorkerFailedError):
        body = diagnosis or str(getattr(error, "stderr", "") or "")
        lines = [_headline(error), *([body] if body else [])]
    else:
        lines = [str(error), *([diagnosis] if diagnosis and diagnosis not in str(error) else [])]
    notes = [str(note) for note in getattr(error, "__notes__", [])]
    return "\n".join([*lines, *(note for note in notes if note != diagnosis)]).strip()


def _not_in_the_error(record: logging.LogRecord) -> bool:
    """The driver's log records that repeat what the error raised to `up` says (the rollback): printed once, there."""
    return not getattr(record, "in_raised_error", False)


def refuse_trainers_release(session: Session, release: str) -> None:
    """A release with a trainer's Lease belongs to that trainer (alive, or to be reaped)."""
    try:
        lease = client.CoordinationV1Api(session.api).read_namespaced_lease(lease_name(release), session.namespace)
    except ApiException as error:
        if error.status == 404:
            return
        raise
    raise CliError(
        f"release {release} is a trainer's: its Lease {lease.metadata.name} is held by {lease.spec.holder_identity}; "
        f"up changes only releases a person made. Stop the trainer (its delete_workers() removes the release, or a "
        f"reaper does once its Lease stays unrenewed), or bring up another trial (--trial)",
        EXIT_USAGE,
    )


def up(
    session: Session, job_file: str, experiment: str | None, trial: str | None, wait: bool, timeout: float, fmt: Format
) -> int:
    names, jobs = load_job_file(Path(job_file))
    named = trial_names(names, experiment, trial, job_file)
    if "experiment" not in named or "trial" not in named:
        raise CliError(
            "up needs the trial's names: experiment and trial in the job file, or --experiment and --trial", EXIT_USAGE
        )
    experiment, trial = named["experiment"], named["trial"]
    _ = session.releases  # helm and the values files: a clear error now, not one from inside the scheduler
    err = console(stderr=True)
    created: list[dict[str, Any]] = []
    # No Lease: a person's release lives until `down` (docs/en/decisions.md, "areal-workers up takes no Lease").
    config = replace(
        session.config,
        release_name=session.selection.release or session.config.release_name,
        lease_grace_seconds=0,
    )
    scheduler = KubernetesScheduler(config=config, experiment_name=experiment, trial_name=trial)
    release_driver.logger.addFilter(_not_in_the_error)
    try:
        session.kube(refuse_trainers_release, f"reading the Lease of {scheduler.release}", session, scheduler.release)
        for job in jobs:
            model = scheduler.driver.model
            if job.role in model.roles and model.values["roles"][job.role] == _entry(job, session):
                err.print(f"= {job.role}: unchanged")
            elif job.role in model.roles:
                with err.status(f"updating {job.role}: {job.replicas} worker(s) in release {scheduler.release}"):
                    scheduler.update_workers(job)
            elif not model.exists(job.role):
                with err.status(f"creating {job.role}: {job.replicas} worker(s) in release {scheduler.release}"):
                    scheduler.create_workers(job)
            if not wait:
                continue
            with err.status(f"waiting for {job.role}: its workers to answer (up to {timeout:.0f}s)"):
                workers = scheduler.get_workers(job.role, timeout=timeout)
            created += [{"id": w.id, "ip": w.ip, "ports": list(w.worker_ports)} for w in workers]
            err.print(f"✓ {job.role}: {len(workers)} worker(s) ready")
    except WorkerTimeoutError as error:
        raise CliError(failure_text(error), EXIT_TIMEOUT) from None
    except WorkerFailedError as error:  # the scheduler already rolled the release back (see its note)
        raise CliError(failure_text(error), EXIT_PROBLEM) from None
    except SchedulerError as error:
        raise CliError(failure_text(error), EXIT_USAGE if "Invalid" in str(error) else EXIT_PROBLEM) from None
    finally:
        release_driver.logger.removeFilter(_not_in_the_error)
        scheduler.close()
    outcome = {
        "release": scheduler.release,
        "namespace": session.namespace,
        "experiment": experiment,
        "trial": trial,
        "workers": created,
    }
    if fmt != "table":
        emit(outcome, fmt)
    else:
        console().print(
            f"release {scheduler.release} in namespace {session.namespace} (experiment {experiment}, trial {trial})"
        )
        if created:
            console().print(
                table(["WORKER", "ADDRESS"], [[w["id"], f"{w['ip']}:{','.join(w['ports'])}"] for w in created])
            )
    return EXIT_OK


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-f", "--job-file", required=True, help="the job file (see render); " + NAMES_AGREE)
    parser.add_argument("--no-wait", action="store_true", help="do not wait for the workers")
    parser.add_argument(
        "--capacity-check",
        choices=CAPACITY_CHECKS,
        default=None,
        help="whether a worker must fit some node before a change is written: reject (default), warn (a cluster "
        "autoscaler adds nodes), off (AREAL_K8S_CAPACITY_CHECK)",
    )
    duration_option(parser, "--timeout", "10m", "how long to wait for each role")
    chart_options(parser)


def _run(call: Invocation) -> int:
    args = call.args
    experiment, trial = getattr(args, "experiment", None), getattr(args, "trial", None)
    return up(call.session, args.job_file, experiment, trial, not args.no_wait, args.timeout, call.fmt)


COMMANDS = (
    Command(
        "up",
        "create (or update) a trial's roles from a job file with KubernetesScheduler and wait "
        "until every worker answers (a failure is diagnosed and rolled back as for a trainer)",
        "  areal-workers up -f job.yaml               create the job file's roles and wait until they answer\n"
        "  areal-workers up -f job.yaml --values platform.yaml --timeout 15m",
        _run,
        _arguments,
    ),
)
