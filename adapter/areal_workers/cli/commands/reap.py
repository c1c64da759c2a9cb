"""`areal-workers reap`: uninstall the releases whose trainer stopped renewing its Lease (runtime/reaper.py). A
release that cannot be reaped is reported and the others still are; the command then exits non-zero."""

from __future__ import annotations

import argparse
import os
from dataclasses import asdict
from datetime import datetime, timezone

from kubernetes import client

from ... import naming
from ...pods.watch import WaitTimedOut, none_left
from ...release.model import ReleaseModel
from ...runtime import reaper
from ...runtime.events import REAPER_RULES, EventRecorder
from ...runtime.lease import LEASE_LABEL
from ...runtime.schedule import ScheduleError, longest_interval
from ..command import Command, Invocation, duration_option
from ..output import Format, console, emit, table
from ..session import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, CliError, Session

SCHEDULE_VARIABLE = "AREAL_WORKERS_REAPER_SCHEDULE"


def max_gap(schedule: str | None) -> float | None:
    """Two of the schedule's longest periods: a previous look older than that no longer counts (None: no limit)."""
    if schedule is None:
        return None
    try:
        return 2 * longest_interval(schedule, datetime.now(timezone.utc))
    except ScheduleError as error:
        raise CliError(
            f"--schedule: {error}; give the reaper CronJob's schedule, e.g. '*/2 * * * *'", EXIT_USAGE
        ) from None


def reap(session: Session, dry_run: bool, timeout: float, schedule: str | None, fmt: Format) -> int:
    gap = max_gap(schedule)
    err = console(stderr=True)

    def uninstall(release: str) -> None:
        try:
            remove(release)
        except CliError as error:  # helm's or the apiserver's failure, worded by the session
            raise reaper.UninstallFailed(str(error)) from error

    def remove(release: str) -> None:
        # A Lease only names a release: one of another chart is refused before its objects are read or removed.
        problem = session.foreign_chart(release)
        if problem is not None:
            raise reaper.UninstallFailed(
                f"cannot reap {release}: {problem}. The release is left as it is and its Lease stays marked, so "
                f"every reap reports it: kubectl delete lease -n {session.namespace} -l {LEASE_LABEL}={release} "
                f"ends that (helm uninstall {release} -n {session.namespace} removes the release, if nobody needs it)"
            )
        # Nor one whose current revision (what helm uninstall deletes, whose hooks it runs) is not the chart's.
        problem = session.untrusted(release)
        if problem is not None:
            raise reaper.UninstallFailed(
                f"cannot reap {release}: {problem}. Its Lease stays marked, so every reap reports it until the "
                f"revision is dealt with, or the Lease deleted (kubectl delete lease -n {session.namespace} -l "
                f"{LEASE_LABEL}={release})"
            )
        topology = session.kube(session.inspector(release).topology, f"reading the topology of {release}")
        own = ReleaseModel(topology=topology).own_selector() or naming.release_selector(release)
        with err.status(f"uninstalling {release}: its trainer's lease stayed unchanged past its grace"):
            session.helm(session.releases.uninstall(release), f"uninstalling {release}")
            try:
                session.pods().wait(own, none_left, timeout)
            except WaitTimedOut as left:
                names = ", ".join(pod.metadata.name for pod in left.pods.values())
                raise reaper.UninstallFailed(
                    f"{release} uninstalled, but pods still terminating after {timeout:.0f}s: {names}"
                ) from None

    coordination = client.CoordinationV1Api(session.api)
    outcomes = session.kube(
        reaper.reap,
        f"reaping in namespace {session.namespace}",
        coordination,
        session.namespace,
        uninstall,
        dry_run,
        max_gap=gap,
        events=lambda release: EventRecorder(
            client.EventsV1Api(session.api), session.namespace, release, session.core, rules=REAPER_RULES
        ),
    )
    failed = [o for o in outcomes if o.action == "failed"]
    for outcome in failed:
        err.print(f"✗ {outcome.lease.release}: {outcome.error}", markup=False)
    code = EXIT_PROBLEM if failed else EXIT_OK
    if fmt != "table":
        emit(
            {
                "namespace": session.namespace,
                "leases": [
                    {
                        **asdict(o.lease),
                        "action": o.action,
                        "silent_seconds": round(o.silent_seconds, 1),
                        **({"error": o.error} if o.error else {}),
                    }
                    for o in outcomes
                ],
            },
            fmt,
        )
        return code
    if not outcomes:
        console().print(f"no trainer lease in namespace {session.namespace}")
        return code
    console().print(
        table(
            ["RELEASE", "HOLDER", "LAST RENEWAL (ITS CLOCK)", "GRACE", "STATE"],
            [
                [
                    o.lease.release,
                    o.lease.holder,
                    o.lease.renewed.isoformat(timespec="seconds") if o.lease.renewed else "-",
                    f"{o.lease.grace_seconds}s",
                    f"{o.action} (unchanged for {o.silent_seconds:.0f}s)",
                ]
                for o in outcomes
            ],
        )
    )
    return code


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dry-run", action="store_true", help="only show what would be reaped")
    parser.add_argument(
        "--schedule",
        metavar="CRON",
        default=os.environ.get(SCHEDULE_VARIABLE) or None,
        help="the cron schedule this command runs on (default: $"
        + SCHEDULE_VARIABLE
        + ", which the chart's reaper CronJob sets): a Lease last looked at more than two of its periods ago (the "
        "reaper stopped, the apiserver was away) starts its count again; without it, no limit",
    )
    duration_option(parser, "--timeout", "5m", "how long to wait for a release's pods to go")


def _run(call: Invocation) -> int:
    return reap(call.session, call.args.dry_run, call.args.timeout, call.args.schedule, call.fmt)


COMMANDS = (
    Command(
        "reap",
        "uninstall the releases whose trainer's lease it has seen unchanged for longer than the "
        "grace period, over two runs at least the grace apart (by hand or from a CronJob), and wait for "
        "their pods to go; exits 1 if a release could not be reaped (the next run retries it)",
        "  areal-workers reap -n rl                    uninstall trials whose trainer died (lease stale)\n"
        "  areal-workers reap --dry-run -o json",
        _run,
        _arguments,
    ),
)
