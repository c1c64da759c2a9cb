"""`areal-workers doctor`: the preflight checks of cli/doctor/ run in order and shown as one table (or data)."""

from __future__ import annotations

import argparse
import dataclasses

from rich.text import Text

from ..command import Command, Invocation, chart_options
from ..output import console, emit, table
from ..session import EXIT_OK, EXIT_PROBLEM

MARKS = {"pass": ("pass", "green"), "fail": ("FAIL", "red"), "warn": ("warn", "yellow"), "skip": ("skip", "")}


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--gpus-per-worker", type=int, default=0)
    parser.add_argument("--workers", type=int, default=1, help="workers that must fit (with --gpus-per-worker)")
    parser.add_argument("--no-probe", action="store_true", help="skip creating a probe worker")
    chart_options(parser)


def _run(call: Invocation) -> int:
    from ..doctor import run_doctor  # imports the scheduler (probe); only this command needs it

    session, args = call.session, call.args
    err = console(stderr=True)
    with err.status("checking") as spinner:
        checks = run_doctor(
            session.api,
            session.config,
            gpus_per_worker=args.gpus_per_worker,
            workers=args.workers,
            probe=not args.no_probe,
            progress=spinner.update,
        )
    if call.fmt != "table":
        emit({"namespace": session.namespace, "checks": [dataclasses.asdict(c) for c in checks]}, call.fmt)
    else:
        marks = {status: Text(text, style) for status, (text, style) in MARKS.items()}
        out = console()
        allowed = [c for c in checks if c.name.startswith("permission ") and c.status == "pass"]
        rows = []
        for check in checks:
            if check is (allowed[0] if allowed else None):  # one row for the permissions that pass (-o json: each)
                rows.append(
                    [
                        marks["pass"],
                        "permissions",
                        f"all {len(allowed)} permissions the adapter uses are allowed (-o json lists each)",
                    ]
                )
            if check not in allowed:
                rows.append([marks[check.status], check.name, check.detail])
        out.print(table(["", "CHECK", "DETAIL"], rows))
        for check in checks:
            if check.fix and check.status != "pass":
                out.print(Text.assemble((check.name, "bold"), f": {check.fix}"))
    return EXIT_PROBLEM if any(c.status == "fail" for c in checks) else EXIT_OK


COMMANDS = (
    Command(
        "doctor",
        "preflight: the namespace exists, permissions (SelfSubjectAccessReview), the admission policy in force for "
        "this identity (a dry-run token Secret), chart and schema, the namespace's PodSecurity level, GPU capacity, "
        "a probe worker reachable from here (exit 1 when a check fails)",
        "  areal-workers doctor -n rl                  permissions, chart, a probe worker reachable from here\n"
        "  areal-workers doctor --gpus-per-worker 8 --workers 4 --no-probe",
        _run,
        _arguments,
    ),
)
