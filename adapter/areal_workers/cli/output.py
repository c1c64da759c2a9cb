"""Human tables (rich) by default, JSON or YAML for scripts."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from typing import Any, Literal, TextIO, cast

import yaml
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from .duration import age_text
from .status_view import TrialStatus

Format = Literal["table", "json", "yaml"]


# Off a terminal no line is cut or padded to a screen's width: a line is as long as its content, as kubectl's.
UNLIMITED_WIDTH = 100_000
_TRAILING_SPACES = re.compile(r" +\n")


class _TrimmedLines:
    """A stream whose lines lose their trailing spaces: rich pads a table's last column to its widest cell."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def write(self, text: str) -> int:
        self.stream.write(_TRAILING_SPACES.sub("\n", text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


def console(stderr: bool = False) -> Console:
    """A terminal's width and colours on a terminal; off one (a file, a pipe) no colour codes, no fixed width."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr, highlight=False, soft_wrap=False)
    return Console(
        file=cast(TextIO, _TrimmedLines(stream)), stderr=stderr, highlight=False, soft_wrap=False, width=UNLIMITED_WIDTH
    )


def emit(data: Any, fmt: Format) -> None:
    """`data` as JSON or YAML on stdout (fmt "table" is each command's own)."""
    if fmt == "json":
        print(json.dumps(data, indent=2, sort_keys=False, default=str))
    else:
        print(yaml.safe_dump(json.loads(json.dumps(data, default=str)), sort_keys=False), end="")


def table(columns: Sequence[str], rows: Sequence[Sequence[Any]], title: str | None = None) -> Table:
    made = Table(title=title, title_justify="left", box=None, header_style="bold", pad_edge=False)
    for column in columns:
        made.add_column(column, overflow="fold")
    for row in rows:
        made.add_row(*(cell if isinstance(cell, Text) else Text(str(cell)) for cell in row))
    return made


def _ready_text(ready: bool, fatal: bool) -> Text:
    if ready:
        return Text("yes", style="green")
    return Text("FAILED" if fatal else "no", style="red" if fatal else "yellow")


def trial_renderable(status: TrialStatus) -> Group:
    revision = (
        f"revision {status.revision} ({status.helm_status})"
        if status.revision
        else status.helm_status
        if status.roles
        else "not installed"
    )
    good = f", last all-ready revision {status.ready_revision}" if status.ready_revision else ""
    ready = sum(w.ready for w in status.workers)
    header = Text.assemble(
        (status.release, "bold"),
        f"  experiment {status.experiment}, trial {status.trial} · ",
        f"{revision}{good} · {ready}/{len(status.workers)} workers ready",
        (f"\nhelm's last operation failed: {status.helm_error}", "red") if status.helm_error else "",
        f"\n{status.trainer}" if status.trainer else "",
    )
    roles = table(
        ["ROLE", "KIND", "TARGET", "READY"],
        [[r.name, r.kind, r.target or "-", f"{r.ready}/{r.replicas}"] for r in status.roles],
    )
    workers = table(
        ["WORKER", "POD", "READY", "STATUS", "RESTARTS", "NODE", "ADDRESS", "AGE", "REASON"],
        [
            [
                w.id,
                w.pod or "-",
                _ready_text(w.ready, w.fatal),
                w.state,
                w.restarts,
                w.node or "-",
                f"{w.ip}:{','.join(w.ports)}" if w.ip else "-",
                age_text(w.age_seconds),
                w.reason or "",
            ]
            for w in status.workers
        ],
    )
    parts: list[Any] = [header, Text(""), roles, Text(""), workers]
    if status.decisions:
        now = datetime.now(timezone.utc)
        lines = "\n".join(f"  {decision.line(now)}" for decision in status.decisions)
        parts += [Text(""), Text("last decisions (areal-workers events for all):", style="bold"), Text(lines)]
    elif status.decisions_note:
        parts += [Text(""), Text(status.decisions_note)]
    return Group(*parts)


def status_renderable(namespace: str, statuses: list[TrialStatus]) -> Group:
    if not statuses:
        return Group(Text(f"no areal-workers trial in namespace {namespace}"))
    parts: list[Any] = []
    for status in statuses:
        if parts:
            parts.append(Text(""))
        parts.append(trial_renderable(status))
    return Group(*parts)
