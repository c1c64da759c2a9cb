"""Commands that read a trial's workers: status (with --watch), diagnose and logs."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from rich.live import Live

from ... import diagnosis, naming
from ...pods import ready_pods
from ...pods.watch import WaitTimedOut, is_ready, pod_index
from ...release.model import ReleaseModel
from ...runtime import reaper
from ...runtime.lease import lease_name
from ...runtime.lease_record import being_reaped, observation_of
from ..command import Command, Invocation, duration_option
from ..decisions_view import Decision, decisions_in, decisions_selector, latest
from ..output import Format, console, emit, status_renderable
from ..session import EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_OK, EXIT_PROBLEM, CliError, Session, api_message
from ..status_view import TrialStatus, trial_status
from ..trainer_attempts import attempts_text, job_pods_selector, owner_job

AREAL_PODS = "app.kubernetes.io/part-of=areal"
# How often a watch without pod changes reads the releases again: a rollback or a failed upgrade may change no pod.
HEADER_REFRESH_SECONDS = 5.0
EXTERNAL_STATUS = "applied without helm"


def trainer_text(lease: client.V1Lease, now: datetime) -> str:
    """The trainer's Lease in words, as the reaper judges it: by how long it has seen the Lease unchanged (kept on
    the Lease by its last look), never by the trainer's clock."""
    state = reaper.lease_state(lease)
    if state is None:
        return ""
    if being_reaped(lease):
        return f"trainer {state.holder} dead: a reaper is uninstalling the release"
    verdict = reaper.verdict(lease, now)
    if verdict.dead:
        return (
            f"trainer {state.holder} silent: lease unchanged for {verdict.silent_seconds:.0f}s, past its "
            f"{state.grace_seconds}s grace (areal-workers reap removes the release)"
        )
    if observation_of(lease) is None:
        return f"trainer {state.holder} renewing (lease renewed since the reaper's last look)"
    return (
        f"trainer {state.holder} quiet: lease unchanged for {verdict.silent_seconds:.0f}s of its "
        f"{state.grace_seconds}s grace"
    )


def helm_failure(revision: Any) -> str:
    """Helm's own error when the revision's operation failed (helm status `failed`: its description, on one line:
    helm lists several errors as "N errors occurred:" and a bullet each), else ""."""
    if revision is None or revision.status.value != "failed":
        return ""
    text = getattr(revision, "description", None) or f"revision {revision.revision} failed (helm gives no reason)"
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


class TrialReader:
    """Release models read once per trial (re-read when a pod of an unknown workload shows up, and on every frame
    of a watch), with the pods AReaL holds as recorded and helm's error when the last operation failed."""

    def __init__(self, session: Session, releases: list[str]) -> None:
        self.session, self.releases = session, releases
        self.models: dict[str, tuple[ReleaseModel, str, int | None]] = {}
        self.held: dict[str, ready_pods.Record] = {}
        self.helm_errors: dict[str, str] = {}
        self.nodes = session.inspector(releases[0]).nodes() if releases else []

    def read(self, release: str) -> tuple[ReleaseModel, str, int | None]:
        current = self.session.helm(self.session.releases.current(release), f"reading release {release}")
        inspector = self.session.inspector(release)
        topology = self.session.kube(inspector.topology, f"reading the topology of {release}")
        if current is None:  # applied without helm (Argo CD syncing the chart): no helm status, no revisions
            self.models[release] = (self.session.external_model(release, topology), EXTERNAL_STATUS, None)
            return self.models[release]
        values = self.session.helm(current.values(), f"reading the values of {release}")
        ready = self.session.kube(inspector.ready_revision, f"reading the topology of {release}")
        self.held[release] = self.session.kube(inspector.ready_pods, f"reading the topology of {release}")
        self.helm_errors[release] = helm_failure(current)
        self.models[release] = (ReleaseModel(values, topology, current.revision), current.status.value, ready)
        return self.models[release]

    def statuses(self, pods: list[client.V1Pod], fresh: bool = False) -> list[TrialStatus]:
        """Each trial's status (`fresh`: its release read again, as a watch does on every frame)."""
        made = []
        for release in self.releases:
            mine = [p for p in pods if (p.metadata.labels or {}).get(naming.LABEL_INSTANCE) == release]
            model, helm_status, ready = (None if fresh else self.models.get(release)) or self.read(release)
            known = model.workloads()
            if any((p.metadata.labels or {}).get(naming.LABEL_ROLE) not in known for p in mine):
                model, helm_status, ready = self.read(release)  # a revision added a workload
            status = trial_status(
                release,
                model,
                mine,
                self.nodes,
                helm_status,
                ready,
                held=self.held.get(release),
                helm_error=self.helm_errors.get(release, ""),
            )
            status.trainer = "\n".join(text for text in (self.trainer(release), self.attempts(model)) if text)
            status.decisions, status.decisions_note = self.decisions(release)
            made.append(status)
        return made

    def decisions(self, release: str) -> tuple[list[Decision], str]:
        """The release's last decisions (its Events), or why none are shown: status goes on without them."""
        try:
            events = self.session.core.list_namespaced_event(
                self.session.namespace, label_selector=decisions_selector(release)
            ).items
        except ApiException as error:
            return [], f"decisions not shown: listing Events was refused ({api_message(error)})"
        return latest(decisions_in(events)), ""

    def attempts(self, model: ReleaseModel) -> str:
        """A submitted trainer's attempt and why the last one ended ("" unless a Job owns the release)."""
        job = owner_job(model.values)
        if job is None:
            return ""
        try:
            found = client.BatchV1Api(self.session.api).read_namespaced_job(job, self.session.namespace)
            pods = self.session.core.list_namespaced_pod(
                self.session.namespace, label_selector=job_pods_selector(job)
            ).items
        except ApiException:  # gone, or not readable by this identity: the Lease's line says enough
            return ""
        return attempts_text(found, pods)

    def trainer(self, release: str) -> str:
        """The trainer's Lease in words ("" when there is none or it cannot be read: helm or Argo CD releases)."""
        try:
            lease = client.CoordinationV1Api(self.session.api).read_namespaced_lease(
                lease_name(release), self.session.namespace
            )
        except ApiException:
            return ""
        return trainer_text(lease, datetime.now(timezone.utc))


def status(session: Session, fmt: Format, watch: bool, watch_seconds: float | None) -> int:
    named = session.selection.named()
    releases = [named] if named else [trial.release for trial in session.trials()]
    reader = TrialReader(session, releases)
    selector = naming.release_selector(named) if named else AREAL_PODS
    pods, _ = session.kube(session.pods().list, "listing worker pods", selector)
    statuses = reader.statuses(pods)
    if not watch:
        if fmt == "table":
            console().print(status_renderable(session.namespace, statuses))
        else:
            emit({"namespace": session.namespace, "trials": [s.to_dict() for s in statuses]}, fmt)
        return EXIT_OK if all(s.all_ready for s in statuses) else EXIT_PROBLEM
    return _watch(session, reader, selector, fmt, watch_seconds)


def _watch(session: Session, reader: TrialReader, selector: str, fmt: Format, seconds: float | None) -> int:
    """One list and one watch of the pods; the view is redrawn on every pod change (JSON: one line per change), with
    the releases read again each time, and when a release alone changed (checked every HEADER_REFRESH_SECONDS).
    Exits 130 on Ctrl-C; when `seconds` run out, 0 if every worker of the last frame is ready, else 1."""
    last: list[TrialStatus] = []

    def headers(statuses: list[TrialStatus]) -> list[tuple[Any, ...]]:
        return [(s.release, s.revision, s.helm_status, s.ready_revision, s.helm_error) for s in statuses]

    def redraw(pods: dict[str, client.V1Pod], live: Live | None, idle: bool = False) -> bool:
        statuses = reader.statuses(list(pods.values()), fresh=True)  # a rollback changes the header too
        if idle and headers(statuses) == headers(last):
            return False
        last[:] = statuses
        if live is not None:
            live.update(status_renderable(session.namespace, last), refresh=True)
        else:  # one JSON object per line, or one YAML document per change
            snapshot = {"namespace": session.namespace, "time": time.time(), "trials": [s.to_dict() for s in last]}
            if fmt == "json":
                print(json.dumps(snapshot, default=str))
            else:
                print("---")
                emit(snapshot, "yaml")
            sys.stdout.flush()
        return False

    deadline = seconds if seconds is not None else 10 * 365 * 86400.0
    try:
        if fmt == "table":
            with Live(console=console(), auto_refresh=False, redirect_stdout=False) as live:
                idle = (HEADER_REFRESH_SECONDS, lambda pods: redraw(pods, live, idle=True))
                session.pods().wait(selector, lambda pods: redraw(pods, live), deadline, on_idle=idle)
        else:
            idle = (HEADER_REFRESH_SECONDS, lambda pods: redraw(pods, None, idle=True))
            session.pods().wait(selector, lambda pods: redraw(pods, None), deadline, on_idle=idle)
    except WaitTimedOut:  # --watch-seconds ran out: the exit of a `status` of the last frame
        pass
    except KeyboardInterrupt:  # Ctrl-C: as `logs -f`, the exit says the watch was interrupted
        return EXIT_INTERRUPTED
    return EXIT_OK if all(s.all_ready for s in last) else EXIT_PROBLEM


# --- diagnose ----------------------------------------------------------------------------------------------


def resolve_target(model: ReleaseModel, target: str) -> tuple[str, list[int] | None]:
    """A role (every index) or a worker `role/index`; raises when the release has no such thing."""
    parsed = naming.parse_worker_id(target)
    role, index = parsed if parsed else (target, None)
    if not model.exists(role):
        known = ", ".join(sorted(model.workloads())) or "none"
        raise CliError(f"no role {role!r} in this trial (roles: {known})", EXIT_NOT_FOUND)
    if index is not None and not 0 <= index < model.replicas(role):
        raise CliError(
            f"{role} has {model.replicas(role)} workers (0..{model.replicas(role) - 1}); no {target}", EXIT_NOT_FOUND
        )
    return role, [index] if index is not None else None


def _statefulset_events(session: Session, model: ReleaseModel, workload: str) -> list[str]:
    entry = model.roles.get(workload) or model.forks.get(workload) or {}
    name = entry.get("statefulset")
    if not name:
        return []
    events = session.kube(
        session.core.list_namespaced_event,
        "reading events",
        session.namespace,
        field_selector=f"involvedObject.kind=StatefulSet,involvedObject.name={name}",
    ).items
    return [f"{e.type} {e.reason}: {e.message}" for e in events[-5:]]


def diagnose(session: Session, target: str, fmt: Format) -> int:
    release = session.release()
    reader = TrialReader(session, [release])
    model = reader.read(release)[0]
    held, helm_error = reader.held.get(release, {}), reader.helm_errors.get(release, "")
    role, indices = resolve_target(model, target)
    pod_role = model.pod_role(role)
    inspector = session.inspector(release)
    pods, _ = session.kube(session.pods().list, "listing worker pods", naming.role_selector(release, pod_role))
    by_index = {pod_index(p): p for p in sorted(pods, key=lambda p: p.metadata.deletion_timestamp is None)}
    nodes = inspector.nodes()
    cordoned = any(node.spec and node.spec.unschedulable for node in nodes)
    budgets = inspector.disruption_budgets(naming.role_selector(release, pod_role)) if cordoned else []
    findings: list[dict[str, Any]] = []
    for index in indices if indices is not None else range(model.replicas(role)):
        worker, pod = naming.worker_id(role, index), by_index.get(index)
        if pod is None:
            findings.append(
                {
                    "worker": worker,
                    "pod": None,
                    "ready": False,
                    "problem": {
                        "reason": "HelmFailed" if helm_error else "NoPod",
                        "fatal": bool(helm_error),
                        "message": f"helm's last operation failed: {helm_error}"
                        if helm_error
                        else "the StatefulSet has not created this pod",
                        "events": [] if helm_error else _statefulset_events(session, model, pod_role),
                    },
                }
            )
            continue
        problem = diagnosis.diagnose_pod(
            pod,
            nodes=nodes,
            events=inspector.events(pod),
            log_tail=inspector.log_tail(pod),
            ready_pod=ready_pods.baseline(held, pod, model.fingerprint(pod_role)),  # as AReaL holds it
        )
        findings.append(
            {
                "worker": worker,
                "pod": pod.metadata.name,
                "ready": is_ready(pod),
                "problem": asdict(problem) if problem else None,
                "text": problem.render() if problem else "",
                "drain": diagnosis.drain_note(pod, nodes, budgets, release),
            }
        )
    healthy = not helm_error and all(f["ready"] and f["problem"] is None for f in findings)
    if fmt != "table":
        emit(
            {"release": release, "target": target, "healthy": healthy, "helm_error": helm_error, "workers": findings},
            fmt,
        )
    else:
        out = console()
        if helm_error:
            out.print(
                f"release {release} revision {model.revision}: helm's last operation failed: {helm_error}",
                markup=False,
                soft_wrap=True,
            )
        for finding in findings:
            if finding["problem"] is None:
                out.print(
                    f"{finding['worker']} ({finding['pod']}): ready, no problem found"
                    if finding["ready"]
                    else f"{finding['worker']} ({finding['pod']}): starting, nothing wrong seen yet"
                )
            elif finding["pod"] is None and helm_error:
                out.print(f"{finding['worker']}: no pod, because helm's last operation failed (above)", markup=False)
            elif finding["pod"] is None:
                events = "\n".join(f"    {line}" for line in finding["problem"]["events"]) or "    (no events)"
                out.print(f"{finding['worker']}: no pod; the StatefulSet has not created it. Its events:\n{events}")
            else:
                out.print(finding["text"], markup=False)
            if finding.get("drain"):
                out.print(f"  {finding['drain']}", markup=False)
    return EXIT_OK if healthy else EXIT_PROBLEM


# --- the commands ------------------------------------------------------------------------------------------


def _status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-w", "--watch", action="store_true", help="redraw on every pod change (one watch)")
    duration_option(
        parser, "--watch-seconds", None, "stop watching after this long and exit as status would for the last frame"
    )


def _run_status(call: Invocation) -> int:
    return status(call.session, call.fmt, call.args.watch, call.args.watch_seconds)


def _diagnose_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="ROLE|ROLE/INDEX")


def _run_diagnose(call: Invocation) -> int:
    return diagnose(call.session, call.args.target, call.fmt)


COMMANDS = (
    Command(
        "status",
        "roles and workers of one trial or every trial: ready, restarts, node, address, "
        "and why a worker is not ready (exit 1 when one is not)",
        "  areal-workers status -n rl                 every trial in namespace rl\n"
        "  areal-workers status --experiment gsm8k --trial t1 --watch\n"
        "  areal-workers status -o json | jq '.trials[].workers[] | select(.ready|not)'",
        _run_status,
        _status_arguments,
    ),
    Command(
        "diagnose",
        "why a role's or a worker's pods are not ready: the adapter's diagnosis with "
        "events, log tail and the fix (exit 1 when a problem is found)",
        "  areal-workers diagnose actor                every actor worker\n  areal-workers diagnose actor/3 -o json",
        _run_diagnose,
        _diagnose_arguments,
    ),
)
