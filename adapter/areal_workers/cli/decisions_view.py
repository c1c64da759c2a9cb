"""The scheduler's and the reaper's decisions as `status` and `events` show them: the Events areal-workers wrote
(runtime/events.py), read back through core/v1 (the `list` on events the controller's Role already has for
diagnoses), by the labels every such Event carries. Pure: rows from the API's objects."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from kubernetes import client

from .. import naming
from ..runtime.event_body import REPORTING_CONTROLLER
from .duration import age_text

STATUS_DECISIONS = 5  # the last decisions `status` shows per trial


def decisions_selector(release: str | None) -> str:
    """The label selector of the Events areal-workers wrote for `release` (None: for every release)."""
    mine = f"{naming.LABEL_MANAGED_BY}={REPORTING_CONTROLLER}"
    return f"{mine},{naming.release_selector(release)}" if release else mine


@dataclass(frozen=True)
class Decision:
    release: str
    time: datetime | None  # the last occurrence
    type: str  # Normal or Warning
    reason: str
    action: str
    regarding: str  # kind/name, as kubectl names objects: statefulset/aw-x-actor
    note: str
    count: int  # occurrences (an Event's series)
    name: str  # the Event's own name

    def to_dict(self) -> dict[str, Any]:
        return {
            "release": self.release,
            "time": self.time.isoformat() if self.time else None,
            "type": self.type,
            "reason": self.reason,
            "action": self.action,
            "regarding": self.regarding,
            "note": self.note,
            "count": self.count,
        }

    def line(self, now: datetime, with_release: bool = False) -> str:
        """One line, as `kubectl get events` lays them out: age, type, reason, object, note (xN for a series)."""
        age = age_text(max(0, int((now - self.time).total_seconds()))) if self.time else "-"
        repeats = f" (x{self.count})" if self.count > 1 else ""
        release = f"{self.release}  " if with_release else ""
        return f"{age:>5}  {release}{self.type:<7}  {self.reason:<18}  {self.regarding}: {self.note}{repeats}"


def _when(event: client.CoreV1Event) -> datetime | None:
    series = event.series
    for moment in (
        series.last_observed_time if series else None,
        event.event_time,
        event.last_timestamp,
        event.metadata.creation_timestamp,
    ):
        if isinstance(moment, datetime):
            return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
    return None


def decision_of(event: client.CoreV1Event) -> Decision | None:
    """The decision an Event records; None when areal-workers did not write it (a label alone does not make one)."""
    if event.reporting_component != REPORTING_CONTROLLER:
        return None
    regarding = event.involved_object
    series = event.series
    return Decision(
        release=(event.metadata.labels or {}).get(naming.LABEL_INSTANCE, ""),
        time=_when(event),
        type=event.type or "Normal",
        reason=event.reason or "",
        action=event.action or "",
        regarding=f"{(regarding.kind or '').lower()}/{regarding.name}" if regarding else "-",
        note=event.message or "",
        count=(series.count if series and series.count else 1),
        name=event.metadata.name,
    )


def decisions_in(events: list[client.CoreV1Event]) -> list[Decision]:
    """The decisions among `events`, oldest first."""
    made = [decision for decision in map(decision_of, events) if decision is not None]
    return sorted(made, key=lambda d: (d.time or datetime.min.replace(tzinfo=timezone.utc), d.name))


def latest(made: list[Decision], count: int = STATUS_DECISIONS) -> list[Decision]:
    """The last `count` of decisions sorted oldest first, still oldest first."""
    return made[-count:] if count > 0 else []
