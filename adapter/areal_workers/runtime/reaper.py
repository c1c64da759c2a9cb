"""Releases whose trainer died, and reaping them. A trainer is dead once its Lease (runtime/lease.py) has been seen
unchanged for longer than its grace on the apiserver's clock, over two looks at least (runtime/lease_record.py):
each look keeps what it saw on the Lease, for the next one. A dead trainer's Lease is first marked for reaping (on
the resourceVersion it was judged by, so a trainer that renewed in between keeps its release, and one that renews
later learns that its workers are going); then the release is uninstalled, and only then the Lease deleted, so a
failed uninstall leaves a marked Lease that the next reap finishes. One release's failure does not stop the others.
Only releases with a Lease are ever reaped: one installed by helm, Argo CD or `areal-workers up` has none."""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..reasons import Reason
from .events import EventRecorder
from .lease import LEASE_LABEL, lease_name
from .lease_record import (
    OBSERVED_ANNOTATION,
    REAPING_ANNOTATION,
    Verdict,
    being_reaped,
    judge,
    lease_annotations,
    observation_of,
    observation_text,
    record_of,
)

REQUEST_TIMEOUT = 30.0  # of every Lease request the reaper makes


@dataclass(frozen=True)
class LeaseState:
    release: str
    name: str
    holder: str
    renewed: datetime | None  # on the trainer's clock: shown, never compared with the reaper's
    grace_seconds: int
    resource_version: str


def lease_state(lease: client.V1Lease) -> LeaseState | None:
    """None for a Lease that keeps no release alive: another program's, or one whose label names a release that is
    not the one its name is of (a scheduler names a trainer's Lease after its release: a Lease labelled for a release
    under another name would make the reaper uninstall a release whose trainer is alive)."""
    release = (lease.metadata.labels or {}).get(LEASE_LABEL)
    if not release or lease.metadata.name != lease_name(release):
        return None
    spec = lease.spec
    return LeaseState(
        release,
        lease.metadata.name,
        spec.holder_identity or "",
        spec.renew_time or spec.acquire_time,
        int(spec.lease_duration_seconds or 0),
        lease.metadata.resource_version,
    )


def verdict(lease: client.V1Lease, now: datetime, max_gap: float | None = None) -> Verdict:
    """The reaper's judgement of `lease` at `now`, from the observation kept on it by the previous look."""
    grace = int(lease.spec.lease_duration_seconds or 0)
    return judge(record_of(lease), observation_of(lease), grace, now, max_gap)


def server_time(headers: Mapping[str, str] | None) -> datetime | None:
    """The apiserver's clock, from the Date header of its answer (None: no usable header)."""
    date = (headers or {}).get("Date")
    if not date:
        return None
    try:
        return parsedate_to_datetime(date)
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class Outcome:
    lease: LeaseState
    # "alive", "would reap", "reaped", "renewed meanwhile", "gone meanwhile", "failed"
    action: str
    silent_seconds: float  # how long the reaper has seen the Lease unchanged
    error: str = ""  # why reaping failed ("failed"); the Lease stays marked, so the next reap tries again


Uninstall = Callable[[str], None]
Recorders = Callable[[str], EventRecorder]  # release -> the recorder of its Events


class UninstallFailed(Exception):
    """What an `Uninstall` raises when a release could not be removed; its text is reported for that release."""


def reap(
    coordination: client.CoordinationV1Api,
    namespace: str,
    uninstall: Uninstall,
    dry_run: bool = False,
    now: datetime | None = None,
    max_gap: float | None = None,
    events: Recorders | None = None,
) -> list[Outcome]:
    """Every trainer Lease of the namespace with what was done about it; `uninstall(release)` removes a release and
    waits for its pods to go, or raises UninstallFailed. A dry run writes nothing (not even the observations the
    next look needs). `now`: the time of the look (default: the apiserver's, from its answer); `max_gap`: seconds
    after which a previous look no longer counts (see lease_record.judge); `events`: each reaped release's Event
    (ReleaseReaped, or ReapFailed) is recorded with the recorder it gives."""
    listing, _, headers = coordination.list_namespaced_lease_with_http_info(
        namespace, label_selector=LEASE_LABEL, _request_timeout=REQUEST_TIMEOUT
    )
    leases = listing.items
    now = now or server_time(headers) or datetime.now(timezone.utc)
    looks = [
        Look(coordination, namespace, lease, state, now, max_gap, events)
        for lease in leases
        if (state := lease_state(lease)) is not None
    ]
    return [look.outcome(uninstall, dry_run) for look in sorted(looks, key=lambda look: look.state.release)]


class Look:
    """One look at one Lease: judge it, keep the observation, or reap its release."""

    def __init__(
        self,
        coordination: client.CoordinationV1Api,
        namespace: str,
        lease: client.V1Lease,
        state: LeaseState,
        now: datetime,
        max_gap: float | None = None,
        events: Recorders | None = None,
    ) -> None:
        self.coordination, self.namespace, self.lease, self.state, self.now = coordination, namespace, lease, state, now
        self.verdict = verdict(lease, now, max_gap)
        self.events = events(state.release) if events is not None else None

    def _outcome(self, action: str, error: str = "") -> Outcome:
        return Outcome(self.state, action, self.verdict.silent_seconds, error)

    def outcome(self, uninstall: Uninstall, dry_run: bool) -> Outcome:
        if being_reaped(self.lease):  # an earlier reap decided and its uninstall did not finish
            return self._outcome("would reap") if dry_run else self._finish(uninstall)
        if not self.verdict.dead:
            if not dry_run and self.verdict.observation != observation_of(self.lease):
                self._annotate({OBSERVED_ANNOTATION: observation_text(self.verdict.observation)}, tolerate=True)
            return self._outcome("alive")
        if dry_run:
            return self._outcome("would reap")
        try:
            self._annotate({REAPING_ANNOTATION: self.now.isoformat()})
        except ApiException as error:
            if error.status == 409:  # renewed since it was listed: its trainer is back
                return self._outcome("renewed meanwhile")
            if error.status == 404:  # its trainer deleted it (delete_workers), or another reaper finished
                return self._outcome("gone meanwhile")
            raise
        return self._finish(uninstall)

    def _annotate(self, added: dict[str, str], tolerate: bool = False) -> None:
        """Writes annotations on the resourceVersion judged (a renewal in between: 409). `tolerate`: an
        observation that cannot be written is left for the next look."""
        body = copy.deepcopy(self.lease)
        body.metadata.annotations = {**lease_annotations(self.lease), **added}
        try:
            self.coordination.replace_namespaced_lease(
                self.state.name, self.namespace, body, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as error:
            if not (tolerate and error.status in (404, 409)):
                raise

    def _finish(self, uninstall: Uninstall) -> Outcome:
        """Uninstalls the release, then deletes its Lease. A failure is reported, not raised: the other releases
        are still looked at, and the marked Lease makes the next reap try again."""
        # The Event is about the release's topology ConfigMap, found before the uninstall deletes it.
        regarding = self.events.release_object() if self.events is not None else None
        outcome = self._uninstall(uninstall)
        if self.events is not None:
            self.events.record(*self._event(outcome), regarding=regarding, warning=outcome.action != "reaped")
        return outcome

    def _uninstall(self, uninstall: Uninstall) -> Outcome:
        try:
            uninstall(self.state.release)
        except UninstallFailed as error:
            return self._outcome("failed", f"uninstalling {self.state.release}: {error}")
        try:
            self.coordination.delete_namespaced_lease(self.state.name, self.namespace, _request_timeout=REQUEST_TIMEOUT)
        except ApiException as error:
            if error.status != 404:
                return self._outcome("failed", f"deleting Lease {self.state.name}: {error.status} {error.reason}")
        return self._outcome("reaped")

    def _event(self, outcome: Outcome) -> tuple[Reason, str, str]:
        if outcome.action == "reaped":
            note = (
                f"reaped release {self.state.release}: its trainer ({self.state.holder}) left Lease {self.state.name} "
                f"unrenewed for {outcome.silent_seconds:.0f}s, past its grace of {self.state.grace_seconds}s"
            )
            return Reason.RELEASE_REAPED, "Uninstall", note
        return Reason.REAP_FAILED, "Uninstall", f"{outcome.error}; the next reap tries again"
