"""`areal-workers events`: the decisions the scheduler and the reaper recorded for one trial or every trial (revisions
written, failures, rollbacks, stuck pods replaced, Leases taken over, refusals, reaps), oldest first; `--watch`
follows new ones, and a repeat counted on an Event's series, with one list and one watch."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone

from kubernetes import watch
from kubernetes.client.exceptions import ApiException

from ..command import Command, Invocation, duration_option
from ..decisions_view import Decision, decision_of, decisions_in, decisions_selector, latest
from ..output import Format, emit
from ..session import EXIT_INTERRUPTED, EXIT_OK, Session

WATCH_WINDOW_SECONDS = 300  # one watch request at most this long; the next resumes at the last resource version
FOREVER_SECONDS = 10 * 365 * 86400.0
HEADER = f"{'AGE':>5}  {'TYPE':<7}  {'REASON':<18}  OBJECT: NOTE"
TTL_NOTE = "the API server keeps Events for its --event-ttl, one hour by default"

Show = Callable[[list[Decision]], None]


def _printer(fmt: Format) -> Show:
    """How each decision of a watch is printed: a line, one JSON object per line, or one YAML document each."""

    def show(made: list[Decision]) -> None:
        now = datetime.now(timezone.utc)
        for decision in made:
            if fmt == "table":
                print(decision.line(now))
            elif fmt == "json":
                print(json.dumps(decision.to_dict()))
            else:
                print("---")
                emit(decision.to_dict(), "yaml")
        sys.stdout.flush()

    return show


def _list(session: Session, selector: str) -> tuple[list[Decision], str]:
    listed = session.kube(
        session.core.list_namespaced_event, "listing the decisions' Events", session.namespace, label_selector=selector
    )
    return decisions_in(listed.items), listed.metadata.resource_version


def _follow(session: Session, selector: str, version: str, seen: dict[str, int], show: Show, seconds: float) -> None:
    """Shows each decision new to `seen` (an Event's name and its count) until `seconds` have passed; a watch the
    API server expired (410 Gone) is resumed from a new list, whose unseen decisions are shown."""
    deadline = time.monotonic() + seconds
    watcher = watch.Watch()
    resume: str | None = version
    while (remaining := deadline - time.monotonic()) > 0:
        if resume is None:
            listed, resume = _list(session, selector)
            show(_unseen(listed, seen))
        try:
            for change in watcher.stream(
                session.core.list_namespaced_event,
                session.namespace,
                label_selector=selector,
                resource_version=resume,
                timeout_seconds=max(1, int(min(remaining, WATCH_WINDOW_SECONDS))),
            ):
                if change["type"] == "ERROR":  # an expired resource version, reported in the stream
                    resume = None
                    break
                resume = change["object"].metadata.resource_version
                decision = decision_of(change["object"]) if change["type"] != "DELETED" else None
                if decision is not None:
                    show(_unseen([decision], seen))
                if time.monotonic() >= deadline:
                    return
        except ApiException as error:
            if error.status != 410:
                raise session.cluster_error(error, "watching the decisions' Events") from None
            resume = None


def _unseen(made: list[Decision], seen: dict[str, int]) -> list[Decision]:
    """The decisions not shown yet (a known Event whose series counted one more is shown again); marks them seen."""
    fresh = [decision for decision in made if seen.get(decision.name) != decision.count]
    seen.update((decision.name, decision.count) for decision in fresh)
    return fresh


def events(
    session: Session, fmt: Format, since: float | None, limit: int | None, follow: bool, seconds: float | None
) -> int:
    named = session.selection.named()
    selector = decisions_selector(named)
    listed, version = _list(session, selector)
    made = listed
    if since is not None:
        cutoff = datetime.now(timezone.utc) - timedelta(seconds=since)
        made = [decision for decision in made if decision.time and decision.time >= cutoff]
    if limit is not None:
        made = latest(made, limit)
    whose = f"trial {named}" if named else "any trial"
    if not follow:
        if fmt != "table":
            emit({"namespace": session.namespace, "release": named, "decisions": [d.to_dict() for d in made]}, fmt)
        elif made:
            now = datetime.now(timezone.utc)
            print("\n".join([HEADER, *(decision.line(now) for decision in made)]))
        else:
            print(f"no decisions recorded for {whose} in namespace {session.namespace} ({TTL_NOTE})")
        return EXIT_OK
    show = _printer(fmt)
    if fmt == "table":
        print(HEADER)
    show(made)
    seen = {decision.name: decision.count for decision in listed}  # also those --since or --limit left out
    try:
        _follow(session, selector, version, seen, show, seconds if seconds is not None else FOREVER_SECONDS)
    except KeyboardInterrupt:  # Ctrl-C: as `logs -f` and `status --watch`
        return EXIT_INTERRUPTED
    return EXIT_OK


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-w", "--watch", action="store_true", help="after the list, show each new decision")
    duration_option(parser, "--watch-seconds", None, "stop watching after this long (exit 0)")
    duration_option(parser, "--since", None, "only decisions last seen within this long")
    parser.add_argument("--limit", type=_positive, default=None, metavar="N", help="only the last N decisions")


def _run(call: Invocation) -> int:
    args = call.args
    return events(call.session, call.fmt, args.since, args.limit, args.watch, args.watch_seconds)


COMMANDS = (
    Command(
        "events",
        "what the scheduler and the reaper decided for one trial or every trial, oldest first: revisions written, "
        "workers failed and why, rollbacks, stuck pods replaced, Leases taken over, changes refused, releases "
        f"reaped (their Kubernetes Events; {TTL_NOTE}). --watch follows new ones until Ctrl-C (exit 130)",
        "  areal-workers events --experiment gsm8k --trial t1\n"
        "  areal-workers events -w -o json | jq -r 'select(.type==\"Warning\") | .note'\n"
        "  areal-workers events --since 10m --limit 20",
        _run,
        _arguments,
    ),
)
