"""Whether a trainer's Lease is still renewed, judged as Kubernetes' leader election (client-go leaderelection) judges
it: never by comparing the holder's `renewTime` with the observer's clock (the two clocks may disagree by hours),
only by observing that the Lease's record (holder, renewTime, acquireTime, transitions) did not change for longer
than the grace, measured on one clock.

The reaper runs as a CronJob, a new process per look and often a new pod on another node, so its last observation is
kept on the Lease itself (OBSERVED_ANNOTATION: the record it saw, since when and when it last looked), and every
time in it is the apiserver's (the Date of its answer to the look's list), the one clock all looks share. A look
that comes more than `max_gap` after the previous one (the reaper stopped, or the apiserver was away, when no
trainer could renew either) starts the count again rather than taking the gap for the trainer's silence. A trainer's
renewal replaces the Lease and with it that annotation; a Lease without one is seen for the first time.
REAPING_ANNOTATION marks a Lease whose release a reaper has begun to uninstall: its trainer gives it up, and a later
reaper finishes the job. Pure: no API calls.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from kubernetes import client

OBSERVED_ANNOTATION = "areal-workers.dev/reaper-observed"  # {"record", "since", "seen"}: ISO times, the apiserver's
REAPING_ANNOTATION = "areal-workers.dev/reaping"  # the reaper's time when it decided; the release is being removed


@dataclass(frozen=True)
class Observation:
    """A Lease record as last seen, since when it has been unchanged, and when it was last looked at."""

    record: str
    since: datetime
    seen: datetime | None = None  # None: as `since` (an observation of an earlier version)

    @property
    def last_look(self) -> datetime:
        return self.seen or self.since


@dataclass(frozen=True)
class Verdict:
    silent_seconds: float  # how long the record has been seen unchanged (0: changed, or seen for the first time)
    dead: bool  # silent for longer than the grace
    observation: Observation  # what to keep for the next look


def record_of(lease: client.V1Lease) -> str:
    """What a renewal or a take-over changes, as text (the holder's times are compared, never subtracted)."""
    spec = lease.spec
    times = [t.isoformat() if isinstance(t, datetime) else t for t in (spec.renew_time, spec.acquire_time)]
    return json.dumps([spec.holder_identity, *times, spec.lease_transitions or 0, spec.lease_duration_seconds])


def lease_annotations(lease: client.V1Lease) -> dict[str, str]:
    return dict(lease.metadata.annotations or {})


def observation_of(lease: client.V1Lease) -> Observation | None:
    """The reaper's last observation kept on the Lease (None: never looked at, or renewed since)."""
    raw = lease_annotations(lease).get(OBSERVED_ANNOTATION)
    if raw is None:
        return None
    try:
        kept = json.loads(raw)
        seen = kept.get("seen")
        return Observation(
            str(kept["record"]),
            datetime.fromisoformat(kept["since"]),
            datetime.fromisoformat(seen) if seen else None,
        )
    except (ValueError, KeyError, TypeError):  # written by hand or by another version: start observing again
        return None


def observation_text(observation: Observation) -> str:
    return json.dumps(
        {
            "record": observation.record,
            "since": observation.since.isoformat(),
            "seen": observation.last_look.isoformat(),
        }
    )


def judge(
    record: str, previous: Observation | None, grace_seconds: float, now: datetime, max_gap: float | None = None
) -> Verdict:
    """The verdict on a Lease whose record is `record`, seen at `now` after `previous`. A record seen for the first
    time starts the count at 0, so a Lease is reaped only after two looks at least the grace apart, and so does a
    look more than `max_gap` seconds after the previous one (None: no limit); a clock that went back counts 0."""
    fresh = Verdict(0.0, False, Observation(record, now, now))
    if previous is None or previous.record != record:
        return fresh
    if max_gap is not None and (now - previous.last_look).total_seconds() > max_gap:
        return fresh
    silent = max(0.0, (now - previous.since).total_seconds())
    return Verdict(silent, silent > grace_seconds, Observation(record, previous.since, now))


def being_reaped(lease: client.V1Lease) -> bool:
    return REAPING_ANNOTATION in lease_annotations(lease)
