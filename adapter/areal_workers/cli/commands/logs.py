"""`areal-workers logs`: a worker's log, by worker id, role or pod name."""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ... import naming
from ...pods.watch import pod_index
from .. import log_stream
from ..command import Command, Invocation, duration_option
from ..session import EXIT_INTERRUPTED, EXIT_NOT_FOUND, EXIT_OK, EXIT_PROBLEM, CliError, Session
from .workers import TrialReader, resolve_target


def worker_pod(session: Session, release: str, target: str) -> str:
    """The pod running worker `role/index` (a process fork's: its target's pod), or a pod name of the release as
    given. A role alone is its rank 0, as `kubectl logs` takes a workload's first pod (a note on stderr names it)."""
    if naming.parse_worker_id(target) is None and target.startswith(f"{release}-"):
        return target
    model = TrialReader(session, [release]).read(release)[0]
    if naming.parse_worker_id(target) is None:
        if not model.exists(target):
            known = ", ".join(sorted(model.workloads())) or "none"
            raise CliError(
                f"no role or worker pod {target!r} in trial {release} (roles: {known}); name a role, a worker "
                f"ROLE/INDEX or a pod {release}-ROLE-INDEX",
                EXIT_NOT_FOUND,
            )
        if model.replicas(target) > 1:
            print(
                f"{target} has {model.replicas(target)} workers; showing {target}/0 (logs {target}/INDEX for another)",
                file=sys.stderr,
            )
        target = naming.worker_id(target, 0)
    role, indices = resolve_target(model, target)
    assert indices is not None
    pods, _ = session.kube(
        session.pods().list, "listing worker pods", naming.role_selector(release, model.pod_role(role))
    )
    found = [p for p in pods if pod_index(p) == indices[0] and p.metadata.deletion_timestamp is None]
    if not found:
        raise CliError(f"worker {target} has no pod right now (areal-workers diagnose {target})", EXIT_NOT_FOUND)
    return found[0].metadata.name


def restarted_note(pod: client.V1Pod) -> str | None:
    """Why the previous container's log stands in for an empty current one: the current instance was started
    after a crash and has not written yet, so its log says nothing about why the worker restarts."""
    for status in (pod.status and pod.status.container_statuses) or []:
        ended = status.last_state and status.last_state.terminated
        if status.restart_count and ended:
            return (
                f"{pod.metadata.name}: the current container (restart {status.restart_count}) has not logged yet; "
                f"the previous one's log (exit code {ended.exit_code}) follows"
            )
    return None


def _read_log(session: Session, pod: str, **options: Any) -> Any:
    # Never preloaded: the client would json.loads a log that happens to be one JSON document.
    try:
        return session.core.read_namespaced_pod_log(pod, session.namespace, _preload_content=False, **options)
    except ApiException as error:
        if error.status == 404:
            raise CliError(f"pod {pod} not found in namespace {session.namespace}", EXIT_NOT_FOUND) from None
        if error.status == 400:  # no previous container, or the container has not started
            raise CliError(f"no log for {pod}: {error.body or error.reason}", EXIT_PROBLEM) from None
        raise session.cluster_error(error, f"reading the log of {pod}") from None


def _log_text(session: Session, pod: str, **options: Any) -> str:
    return _read_log(session, pod, **options).data.decode("utf-8", errors="replace")


def logs(
    session: Session, target: str, follow: bool, tail: int | None, previous: bool, since: float | None = None
) -> int:
    """The worker's log on stdout; -f follows it until the container ends (exit 0) or Ctrl-C (exit 130)."""
    release = session.release()
    pod = worker_pod(session, release, target)
    # kubectl's --since: whole seconds, at least one
    window: dict[str, int] = {"since_seconds": max(1, math.ceil(since))} if since is not None else {}
    if not follow:
        text = _log_text(session, pod, tail_lines=tail, previous=previous, **window)
        if not text and not previous:
            note = restarted_note(
                session.kube(session.core.read_namespaced_pod, f"reading pod {pod}", pod, session.namespace)
            )
            if note:
                print(note, file=sys.stderr)
                text = _log_text(session, pod, tail_lines=tail, previous=True, **window)
        sys.stdout.write(text)
        return EXIT_OK
    response = _read_log(session, pod, follow=True, tail_lines=tail, previous=previous, **window)
    reader = log_stream.start_copy(response)
    try:
        log_stream.wait_for(reader)
    except KeyboardInterrupt:  # Ctrl-C: the stream ends at once, and the exit says it was interrupted
        return EXIT_INTERRUPTED
    finally:
        log_stream.stop_copy(response, reader)
    return EXIT_OK


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("target", metavar="ROLE|ROLE/INDEX|POD")
    parser.add_argument("-f", "--follow", action="store_true", help="stream new lines")
    parser.add_argument("--tail", type=int, default=None, help="only the last N lines")
    parser.add_argument("-p", "--previous", action="store_true", help="the previous container (after a restart)")
    duration_option(parser, "--since", None, "only lines newer than this")


def _run(call: Invocation) -> int:
    args = call.args
    return logs(call.session, args.target, args.follow, args.tail, args.previous, args.since)


COMMANDS = (
    Command(
        "logs",
        "a worker's log (a process fork's: its target pod's; a role alone: its rank 0, as kubectl logs takes a "
        "workload's first pod); while a restarted container has written nothing yet, the previous one's, with a note "
        "on stderr. -f ends when the container does (exit 0) or at Ctrl-C (exit 130)",
        "  areal-workers logs actor/0 -f\n  areal-workers logs rollout/2 --previous --tail 100\n"
        "  areal-workers logs actor --since 10m        rank 0 of role actor, the last 10 minutes",
        _run,
        _arguments,
    ),
)
