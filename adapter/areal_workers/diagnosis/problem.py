"""`Problem`, why one worker pod is not ready, and its rendering with the pod's events and last log lines."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from kubernetes.client import CoreV1Event, V1Pod

MAX_RENDER_LINES = 40
MAX_LINE_CHARS = 200
MAX_MESSAGE_LINES = 6
MAX_ADVICE_LINES = 4
EVENT_LIMIT = 10
LOG_LIMIT = 20
EPOCH = datetime.min.replace(tzinfo=timezone.utc)


@dataclass(frozen=True, kw_only=True)
class Problem:
    """Why one worker pod is not ready. `message` is Kubernetes' own text; `advice` says what to change."""

    pod: str
    container: str | None = None
    reason: str
    message: str = ""
    exit_code: int | None = None
    signal: str | None = None
    fatal: bool
    advice: str = ""
    events: tuple[str, ...] = ()
    log_tail: tuple[str, ...] = ()
    node: str | None = None

    def exit_code_or(self, default: int) -> int:
        """The container's exit code, or `default` (for WorkerFailedError) when there is none."""
        return self.exit_code if self.exit_code is not None else default

    def render(self) -> str:
        """At most MAX_RENDER_LINES lines of at most MAX_LINE_CHARS characters."""
        where = self.pod + (f" (container {self.container})" if self.container else "")
        where += f" on node {self.node}" if self.node else ""
        verdict = "fatal" if self.fatal else "not fatal yet, still waiting"
        lines = [_clip(f"{where}: {self.reason} [{verdict}]")]
        lines += _labelled("message", self.message, MAX_MESSAGE_LINES)
        if self.exit_code is not None:
            lines.append(f"  exit code: {self.exit_code}" + (f" ({self.signal})" if self.signal else ""))
        lines += _labelled("advice", self.advice, MAX_ADVICE_LINES)
        lines += _section("events", self.events, min(EVENT_LIMIT, MAX_RENDER_LINES - len(lines) - 1))
        lines += _section("log tail", self.log_tail, MAX_RENDER_LINES - len(lines) - 1)
        return "\n".join(lines)


def _clip(text: str, limit: int = MAX_LINE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _labelled(label: str, text: str, max_lines: int) -> list[str]:
    """`label: text` wrapped to MAX_LINE_CHARS; beyond max_lines, the head and the last line are kept."""
    first_width = MAX_LINE_CHARS - len(label) - 4
    body: list[str] = []
    for line in (line for line in text.strip().splitlines() if line.strip()):
        body += textwrap.wrap(line, width=first_width if not body else MAX_LINE_CHARS - 4) or [""]
    if len(body) > max_lines:
        body = [*body[: max_lines - 2], f"({len(body) - max_lines + 1} lines omitted)", body[-1]]
    if not body:
        return []
    return [_clip(f"  {label}: {body[0]}"), *(_clip(f"    {line}") for line in body[1:])]


def _section(title: str, items: Sequence[str], budget: int) -> list[str]:
    if not items or budget < 1:
        return []
    shown = items[-budget:]
    omitted = f", {len(items) - len(shown)} earlier omitted" if len(shown) < len(items) else ""
    return [f"  {title} (last {len(shown)}{omitted}):", *(_clip(f"    {item}") for item in shown)]


def summarize_role(problems: Sequence[Problem]) -> str:
    """One message for a failing role: the first fatal problem (else the first) in full, then counts of the others."""
    if not problems:
        return "no problems found"
    first = next((problem for problem in problems if problem.fatal), problems[0])
    others = [problem for problem in problems if problem is not first]
    text = first.render()
    if not others:
        return text
    groups: dict[tuple[str, bool], list[str]] = {}
    for problem in others:
        groups.setdefault((problem.reason, problem.fatal), []).append(problem.pod)
    described = []
    for (reason, fatal), pods in groups.items():
        names = ", ".join(pods[:4]) + (f", +{len(pods) - 4}" if len(pods) > 4 else "")
        described.append(f"{len(pods)} {reason}{'' if fatal else ' (waiting)'} ({names})")
    return text + "\n" + _clip(f"and {len(others)} other worker(s): " + "; ".join(described), 2 * MAX_LINE_CHARS)


def pod_name(pod: V1Pod) -> str:
    return pod.metadata.name if pod.metadata is not None and pod.metadata.name else "?"


# ---------------------------------------------------------------------------------------------------------------
# Events and logs


def timestamp(value: datetime | None) -> datetime | None:
    if value is None:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)


def event_time(event: CoreV1Event) -> datetime | None:
    candidates = (
        event.series.last_observed_time if event.series is not None else None,
        event.last_timestamp,
        event.event_time,
        event.first_timestamp,
        event.metadata.creation_timestamp if event.metadata is not None else None,
    )
    return next((timestamp(value) for value in candidates if value is not None), None)


def event_count(event: CoreV1Event) -> int:
    if event.series is not None and event.series.count:
        return event.series.count
    return event.count or 1


def _age(then: datetime | None, now: datetime) -> str:
    if then is None:
        return "?"
    seconds = max(0, int((now - then).total_seconds()))
    for unit, size, switch in (("s", 1, 120), ("m", 60, 120 * 60), ("h", 3600, 48 * 3600)):
        if seconds < switch:
            return f"{seconds // size}{unit}"
    return f"{seconds // 86400}d"


def event_lines(
    events: Iterable[CoreV1Event], limit: int = EVENT_LIMIT, *, now: datetime | None = None
) -> tuple[str, ...]:
    """The last `limit` events by time, oldest first, as
    "12s ago  Warning  FailedScheduling (x3)  0/2 nodes are available: ..."."""
    now = timestamp(now) or datetime.now(timezone.utc)
    ordered = sorted(events, key=lambda event: event_time(event) or EPOCH)
    lines = []
    for event in ordered[-limit:] if limit > 0 else []:
        count = event_count(event)
        reason = (event.reason or "?") + (f" (x{count})" if count > 1 else "")
        message = " ".join((event.message or "").split())
        lines.append(_clip(f"{_age(event_time(event), now)} ago  {event.type or 'Normal'}  {reason}  {message}"))
    return tuple(lines)


def events_of(pod: V1Pod, events: Iterable[CoreV1Event]) -> list[CoreV1Event]:
    """Events of this pod incarnation (StatefulSets reuse names, so a known uid must match) and of its node."""
    meta = pod.metadata
    node = pod.spec.node_name if pod.spec is not None else None
    kept = []
    for event in events:
        target = event.involved_object
        if target is None:
            kept.append(event)
        elif target.kind == "Node":
            if node is not None and target.name == node:
                kept.append(event)
        elif target.name == meta.name and not (target.uid and meta.uid and target.uid != meta.uid):
            kept.append(event)
    return kept


def last_lines(lines: Iterable[str], limit: int = LOG_LIMIT) -> tuple[str, ...]:
    flat = [line.rstrip() for chunk in lines for line in chunk.splitlines()]
    while flat and not flat[-1]:
        flat.pop()
    return tuple(_clip(line) for line in flat[-limit:])
