"""Commands that read or change a trial's release: history, rollback and down."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from ... import naming
from ...orchestration.driver import ReleaseDriver
from ...pods.images import short
from ...pods.inspector import FAILED_NOTE
from ...pods.watch import WaitTimedOut, all_ready, is_ready
from ...release.model import ReleaseModel, roles_diff
from ..command import FORCE_HELP, Command, Invocation, duration_option
from ..output import Format, console, emit, table
from ..session import EXIT_ABORTED, EXIT_NOT_FOUND, EXIT_OK, EXIT_TIMEOUT, EXIT_USAGE, CliError, Session
from ..trainer_lease import give_up, take_trainers_lease


def _history(session: Session, release: str, doing: str) -> list[Any]:
    entries = session.helm(session.releases.history(release), f"reading the history of {release}")
    if not entries:
        session.refuse_external(release, session.model(release), doing)  # raises: not found, or not helm's
        raise CliError(f"release {release} not found in namespace {session.namespace}", EXIT_NOT_FOUND)
    return entries


def history(session: Session, fmt: Format) -> int:
    release = session.release()
    entries = _history(session, release, "show the helm history of")
    inspector = session.inspector(release)
    records = session.kube(inspector.revision_records, f"reading the topology of {release}")
    ready, images, notes = records.ready_revision, records.images, records.notes
    rows = [
        {
            "revision": e.revision,
            "updated": e.updated.isoformat(),
            "status": e.status.value,
            "all_ready": e.revision == ready,
            "images": images.get(e.revision, {}),
            "description": e.description or "",
            "note": notes.get(e.revision, ""),  # what became of it: its workers failed, it rolled back after that
        }
        for e in entries
    ]
    if fmt != "table":
        emit({"release": release, "ready_revision": ready, "revisions": rows}, fmt)
        return EXIT_OK
    console().print(
        table(
            ["REVISION", "UPDATED", "STATUS", "LAST ALL-READY", "IMAGES RAN", "DESCRIPTION"],
            [
                [
                    r["revision"],
                    r["updated"][:19].replace("T", " "),
                    "failed" if r["note"].startswith(FAILED_NOTE) else r["status"],
                    "yes" if r["all_ready"] else "",
                    _images_cell(r["images"]),
                    r["description"] + (f" ({r['note']})" if r["note"] else ""),
                ]
                for r in rows
            ],
        )
    )
    return EXIT_OK


def _images_cell(images: dict[str, list[str]]) -> str:
    """`role=repository@sha256:0123456789ab` per image each role ran (recorded for all-ready revisions only)."""
    return " ".join(f"{workload}={short(image)}" for workload, ids in images.items() for image in ids)


def default_target(release: str, current: int | None, ready: int | None, revisions: list[int]) -> tuple[int, str]:
    """The revision a rollback goes to when none is named, and why: the last all-ready one while the current one is
    not it; otherwise the previous one helm keeps (helm's default)."""
    if ready is not None and ready != current and ready in revisions:
        return ready, "the last all-ready revision"
    earlier = [r for r in revisions if current is not None and r < current]
    if not earlier:
        raise CliError(f"release {release} has no revision before {current} to roll back to", EXIT_USAGE)
    if ready == current:
        return earlier[-1], "the previous revision: the current one is the last all-ready one"
    return earlier[-1], "the previous revision: no all-ready revision is recorded to go back to"


def rollback_plan(session: Session, release: str, model: ReleaseModel, target: int, why: str) -> dict[str, Any]:
    """What a rollback to `target` does to each role (replicas, images, ...): the current revision's values against
    the target's, read without changing anything."""
    values = session.helm(session.releases.values(release, target), f"reading the values of revision {target}")
    return {
        "release": release,
        "from_revision": model.revision,
        "to_revision": target,
        "why": why,
        "changes": roles_diff(model.values, values or {}),
    }


def _plan_text(plan: dict[str, Any]) -> str:
    lines = [
        f"roll back {plan['release']} from revision {plan['from_revision']} to revision {plan['to_revision']} "
        f"({plan['why']}):"
    ]
    return "\n".join(lines + [f"  {change}" for change in plan["changes"] or ["no role changes"]])


def rollback(
    session: Session,
    revision: int | None,
    wait: bool,
    timeout: float,
    force: bool,
    fmt: Format,
    dry_run: bool = False,
    yes: bool = False,
) -> int:
    release = session.release()
    revisions = [e.revision for e in _history(session, release, "roll back")]
    session.refuse_foreign(release, "roll back")
    if revision is not None and revision not in revisions:
        raise CliError(
            f"release {release} keeps revisions {', '.join(map(str, revisions))}; no revision "
            f"{revision} (areal-workers history)",
            EXIT_NOT_FOUND,
        )
    model = session.model(release)
    if revision is None:
        ready = session.kube(session.inspector(release).ready_revision, f"reading the topology of {release}")
        target, why = default_target(release, model.revision, ready, revisions)
    else:
        target, why = revision, "as asked"
    session.refuse_foreign(release, "roll back", target)  # before the driver adopts (and may recover) the release
    plan = rollback_plan(session, release, model, target, why)
    if dry_run:
        if fmt != "table":
            emit(plan, fmt)
        else:
            console().print(_plan_text(plan), highlight=False)
        return EXIT_OK
    print(_plan_text(plan), file=sys.stderr)
    if not yes and sys.stdin.isatty():
        if input("Roll back? [y/N] ").strip().lower() not in ("y", "yes"):
            print("nothing rolled back", file=sys.stderr)
            return EXIT_ABORTED
    lease = take_trainers_lease(session, release, "roll back", force)
    try:
        return _roll_back(session, release, target, wait, timeout, fmt)
    finally:
        give_up(lease)


def _roll_back(session: Session, release: str, target: int, wait: bool, timeout: float, fmt: Format) -> int:
    driver = session.driver(release)
    before = driver.model.revision
    err = console(stderr=True)
    with err.status(f"rolling back {release} from revision {before} to {target}"):
        replaced = driver.restore(target)
    driver.events.rolled_back_by_hand(before, driver.model.revision, target)
    outcome: dict[str, Any] = {
        "release": release,
        "from_revision": before,
        "to_revision": target,
        "new_revision": driver.model.revision,
        "replaced_pods": replaced,
        "ready": None,
    }
    if wait:
        outcome["ready"] = _wait_ready(session, driver, timeout)
        driver.mark_good()
    if fmt != "table":
        emit(outcome, fmt)
    else:
        console().print(
            f"rolled back {release} to revision {target} (now revision {driver.model.revision})"
            + (f"; replaced pods stuck on the abandoned revision: {', '.join(replaced)}" if replaced else "")
            + ("; every worker is ready" if wait else "")
        )
    return EXIT_OK


def _wait_ready(session: Session, driver: ReleaseDriver, timeout: float) -> bool:
    """Every role and pod-mode fork of the restored revision Ready, with a live count; raises on the deadline."""
    model = driver.model
    workloads = sorted(model.roles) + sorted(f for f in model.forks if not model.is_process_fork(f))
    deadline = time.monotonic() + timeout
    err = console(stderr=True)
    for workload in workloads:
        replicas = model.replicas(workload)
        with err.status(f"waiting for {workload}: 0/{replicas} ready") as spinner:

            def progress(pods: dict[str, Any], name: str = workload, wanted: int = replicas) -> bool:
                spinner.update(f"waiting for {name}: {sum(map(is_ready, pods.values()))}/{wanted} ready")
                return all_ready(wanted)(pods)

            try:
                driver.pods.wait(
                    naming.role_selector(driver.name, workload), progress, max(1.0, deadline - time.monotonic())
                )
            except WaitTimedOut as timed_out:
                text = driver.inspector.timeout_diagnosis(workload, replicas, timed_out.pods)
                raise CliError(
                    f"rolled back to revision {model.revision}, but {workload} was not ready within "
                    f"{timeout:.0f}s:\n{text}",
                    EXIT_TIMEOUT,
                ) from None
    return True


def down(session: Session, yes: bool, rank_zero_last: bool, force: bool, fmt: Format) -> int:
    release = session.release()
    model = session.model(release)
    session.refuse_external(release, model, "delete")
    session.refuse_foreign(release, "delete")
    own = model.own_selector()
    pods, _ = session.kube(session.pods().list, "listing worker pods", own) if own else ([], "")
    summary = (
        f"release {release} (experiment {model.topology.get('experiment')}, trial "
        f"{model.topology.get('trial')}) in namespace {session.namespace}: {len(pods)} worker pod(s), "
        f"roles {', '.join(sorted(model.workloads())) or 'none'}"
    )
    if not yes:
        if not sys.stdin.isatty():
            raise CliError(f"would delete {summary}; pass --yes to confirm without a terminal", EXIT_USAGE)
        answer = input(f"Delete {summary}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("nothing deleted", file=sys.stderr)
            return EXIT_ABORTED
    lease = take_trainers_lease(session, release, "delete", force)
    try:
        driver = session.driver(release)
        with console(stderr=True).status(f"deleting {release} and waiting for its pods to go"):
            if rank_zero_last:
                for role in sorted(model.roles):
                    driver.scale_down_to_rank_zero(role)
            driver.uninstall("areal-workers down")
    finally:
        give_up(lease)
    outcome = {
        "release": release,
        "namespace": session.namespace,
        "deleted_pods": sorted(p.metadata.name for p in pods),
    }
    if fmt != "table":
        emit(outcome, fmt)
    else:
        console().print(f"deleted {summary}")
    return EXIT_OK


# --- the commands ------------------------------------------------------------------------------------------


def _rollback_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("revision", type=int, nargs="?", default=None)
    parser.add_argument("--no-wait", action="store_true", help="do not wait for the workers to be ready")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    parser.add_argument(
        "--dry-run", action="store_true", help="only show the target and what it changes in each role (replicas, image)"
    )
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask on a terminal")
    duration_option(parser, "--timeout", "10m", "how long to wait for the workers")


def _run_rollback(call: Invocation) -> int:
    args = call.args
    return rollback(
        call.session, args.revision, not args.no_wait, args.timeout, args.force, call.fmt, args.dry_run, args.yes
    )


def _down_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-y", "--yes", action="store_true", help="do not ask")
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)
    parser.add_argument(
        "--rank-zero-last",
        action="store_true",
        help="scale each role to rank 0 before removing it (rank 0 holds the TCPStore)",
    )


def _run_down(call: Invocation) -> int:
    return down(call.session, call.args.yes, call.args.rank_zero_last, call.args.force, call.fmt)


COMMANDS = (
    Command(
        "history",
        "the trial's release revisions, with the last one whose workers were all ready and the image digests "
        "its pods ran, which ones failed (and why) and what rolled them back",
        "  areal-workers history --release aw-gsm8k-t1-1a2b3c4d",
        lambda call: history(call.session, call.fmt),
    ),
    Command(
        "rollback",
        "back to a revision (default: the last all-ready one, else the previous), "
        "pods stuck on the abandoned revision replaced, then wait until ready; shows what each role changes first "
        "and asks on a terminal",
        "  areal-workers rollback                      to the last all-ready revision (else the previous)\n"
        "  areal-workers rollback --dry-run            the target and what it changes in each role\n"
        "  areal-workers rollback 3 --timeout 15m",
        _run_rollback,
        _rollback_arguments,
    ),
    Command(
        "down",
        "delete a trial's release and its workers (asks first)",
        "  areal-workers down --experiment gsm8k --trial t1\n  areal-workers down --release aw-x-y-1a2b3c4d --yes",
        _run_down,
        _down_arguments,
    ),
)
