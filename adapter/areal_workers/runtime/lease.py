"""The trainer's heartbeat for its release: a coordination.k8s.io Lease renewed from a daemon thread while the
scheduler lives. A trainer that dies (kill -9, OOM, a lost laptop) stops renewing; once a reaper has seen the Lease
unchanged for longer than `lease_grace_seconds` (runtime/reaper.py), it uninstalls the release.

One controller per trial: a scheduler takes a Lease held by another only once it has watched it stay unchanged for
two of its holder's renewal intervals (a dead predecessor: a restarted trainer keeps its workers), or at once with
`lease_takeover`; a holder that renews meanwhile is refused (LeaseHeldError). A Lease this scheduler held that is
then deleted, marked by a reaper or taken over is lost: renewals stop, nothing is re-created, and `require_held`
raises LeaseLostError on the scheduler's next call.
"""

from __future__ import annotations

import logging
import math
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from .. import cluster_access, naming
from ..errors import ClusterAccessError, LeaseHeldError, LeaseLostError, attach_diagnosis
from ..reasons import Reason
from .lease_record import being_reaped, record_of

if TYPE_CHECKING:
    from .events import EventRecorder

logger = logging.getLogger(__name__)

LEASE_LABEL = "areal-workers.dev/lease-of"  # the release a Lease keeps alive
MAX_RENEW_SECONDS = 10.0
WATCH_POLL_SECONDS = 0.5  # how often a starting scheduler reads another holder's Lease
TAKEOVER_ATTEMPTS = 5  # writes a takeover tries, each on the Lease read again, while its live holder renews it
# Only for a Lease this identity may not use: without one, the scheduler needs no rule on leases.
WITHOUT_LEASE_ADVICE = (
    "or set lease_grace_seconds=0 (AREAL_K8S_LEASE_GRACE_SECONDS=0) to run without a Lease (and without the "
    "reaper's clean-up)"
)
TAKEOVER_ADVICE = (
    "set lease_takeover=true (AREAL_K8S_LEASE_TAKEOVER=true) to take the trial anyway (the other controller then "
    "stops writing and raises on its next call), or use another trial name"
)


def lease_name(release: str) -> str:
    return f"{release}-trainer"


def holder_identity() -> str:
    """Host, process and a random part: two schedulers of one process are two holders."""
    return f"{socket.gethostname()}/{os.getpid()}/{secrets.token_hex(3)}"


def renew_interval(grace_seconds: float) -> float:
    """A quarter of the grace period (at most MAX_RENEW_SECONDS): three renewals may fail before it runs out."""
    return max(0.2, min(MAX_RENEW_SECONDS, grace_seconds / 4))


def request_timeout(grace_seconds: float) -> float:
    """Of every Lease request: a hung connection costs one renewal, never the grace."""
    return max(2.0, renew_interval(grace_seconds))


def lease_body(
    release: str, holder: str, grace_seconds: float, now: datetime, acquired: datetime | None = None
) -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(
            name=lease_name(release),
            labels={LEASE_LABEL: release, naming.LABEL_INSTANCE: release, "app.kubernetes.io/part-of": "areal"},
        ),
        spec=client.V1LeaseSpec(
            holder_identity=holder,
            lease_duration_seconds=max(1, round(grace_seconds)),
            acquire_time=acquired or now,
            renew_time=now,
        ),
    )


def loss(current: client.V1Lease | None, holder: str) -> str | None:
    """Why a Lease `holder` held is no longer its to renew (None: it still is)."""
    if current is None:
        return "deleted (by a reaper that found it unrenewed for longer than the grace, or by hand)"
    if being_reaped(current):
        return "marked by a reaper, which is uninstalling the release"
    if current.spec.holder_identity != holder:
        return f"taken over by {current.spec.holder_identity}"
    return None


class ReleaseLease:
    def __init__(
        self,
        coordination: client.CoordinationV1Api,
        namespace: str,
        release: str,
        grace_seconds: float,
        takeover: bool = False,
        sleep: Callable[[float], None] = time.sleep,
        events: EventRecorder | None = None,
    ) -> None:
        self.coordination, self.namespace, self.release = coordination, namespace, release
        self.grace_seconds, self.takeover, self._sleep, self.events = grace_seconds, takeover, sleep, events
        self.name = lease_name(release)
        self.holder = holder_identity()
        self.timeout = request_timeout(grace_seconds)
        self.lost: str | None = None  # why the Lease this scheduler held is no longer its own
        self._held = False  # written by this scheduler since it took it (or since it gave it up)
        self._renewed_at = -math.inf  # time.monotonic() of this scheduler's last write of the Lease
        self._clock: Callable[[], float] = time.monotonic
        self._renewing = threading.Lock()  # the renewal thread and a write's confirmation renew one at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def renewal_age(self) -> float | None:
        """Seconds since this scheduler last wrote the Lease (None: it holds none)."""
        return self._clock() - self._renewed_at if self._held else None

    def start(self) -> None:
        """Takes the Lease (creates it, or takes it over from a dead predecessor) and renews it from now on. A
        live holder raises LeaseHeldError; a request that fails raises ClusterAccessError naming the cause."""
        self.require_held()
        try:
            with self._renewing:
                self._acquire()
        except (ApiException, HTTPError, OSError) as error:
            raise self._access_error(error) from error
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{self.release}", daemon=True)
        self._thread.start()

    def _access_error(self, error: BaseException) -> BaseException:
        cause = cluster_access.api_failure(
            error,
            self.namespace,
            self.coordination.api_client.configuration.host,
            "keep the trainer's Lease (leases in coordination.k8s.io)",
        )
        if cause is None:
            return error
        if cause.cause != "forbidden":  # no Lease setting helps a missing namespace, bad credentials, no server
            return cause
        return ClusterAccessError(cause.cause, f"{cause}; {WITHOUT_LEASE_ADVICE}")

    def confirm(self) -> None:
        """Before a write to the release: the Lease is still this scheduler's. Renewed here (compare-and-swap on
        its resourceVersion) when the last renewal is older than the renewal interval: a trainer that stalled
        (a long GC pause, a suspended laptop) while a reaper deleted or marked its Lease learns it now, before it
        re-installs workers without a Lease, not at the renewal thread's next turn. Raises LeaseLostError."""
        self.require_held()
        if self._held and self._clock() - self._renewed_at > renew_interval(self.grace_seconds):
            try:
                self.renew()
            except (ApiException, HTTPError, OSError) as error:
                raise self._access_error(error) from error
        self.require_held()

    def require_held(self) -> None:
        """Raises LeaseLostError once a Lease this scheduler held is lost."""
        if self.lost is None:
            return
        error = LeaseLostError(
            self.release,
            f"the trial's Lease {self.name} was {self.lost}",
            f"this scheduler ({self.holder}) stopped writing to release {self.release} in namespace "
            f"{self.namespace}: its workers are being removed, or belong to another controller now",
        )
        raise attach_diagnosis(
            error,
            "A trainer that stalls for longer than lease_grace_seconds (AREAL_K8S_LEASE_GRACE_SECONDS) is taken "
            "for dead: raise it, or start the trial again (a new scheduler takes a new Lease).",
        )

    def _read(self) -> client.V1Lease | None:
        try:
            return self.coordination.read_namespaced_lease(self.name, self.namespace, _request_timeout=self.timeout)
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def _refused(self, reason: str, details: str) -> LeaseHeldError:
        return LeaseHeldError(self.release, reason, f"{details}; {TAKEOVER_ADVICE}")

    def _refuse_reaped(self, current: client.V1Lease | None) -> None:
        """A reaper's mark is never written over: the replace would drop it while the reaper uninstalls."""
        if current is not None and being_reaped(current):
            raise LeaseHeldError(
                self.release,
                "a reaper is uninstalling the release",
                f"its Lease {self.name} is marked for reaping; start again once the release is gone "
                f"(helm status {self.release} -n {self.namespace}), or delete the Lease by hand if no reaper runs",
            )

    def _acquire(self) -> None:
        current = self._read()
        self._refuse_reaped(current)
        if current is not None and current.spec.holder_identity != self.holder and not self.takeover:
            current = self._watch_holder(current)
        # A takeover races the live holder's renewals (each changes the resourceVersion it writes on): it reads the
        # Lease again and retries. Without takeover, a write after the last look is another controller's: refused.
        # Each write is preceded by a look at the reaper's mark, which may have been the write that raced.
        attempts = TAKEOVER_ATTEMPTS if self.takeover else 1
        for attempt in range(1, attempts + 1):
            self._refuse_reaped(current)
            try:
                self._write(current)
                break
            except ApiException as error:
                if error.status != 409:
                    raise
                if attempt == attempts:
                    raise self._refused(
                        "another controller took the trial's Lease at the same moment", f"Lease {self.name}"
                    ) from error
            current = self._read()
        self._held = True

    def _watch_holder(self, current: client.V1Lease) -> client.V1Lease | None:
        """The Lease once it has stayed unchanged for two of its holder's renewal intervals (None: its holder
        deleted it meanwhile); a renewal meanwhile means a live holder, refused."""
        window = 2 * renew_interval(current.spec.lease_duration_seconds or self.grace_seconds)
        record, holder = record_of(current), current.spec.holder_identity
        looks = math.ceil(window / WATCH_POLL_SECONDS)
        logger.info("Lease %s is held by %s: watching it for %.0fs before taking it over", self.name, holder, window)
        for _ in range(looks):
            self._sleep(window / looks)
            seen = self._read()
            if seen is None:
                return None
            if record_of(seen) != record:
                raise self._refused(
                    "another controller of this trial is alive",
                    f"{seen.spec.holder_identity} renewed Lease {self.name} of release {self.release} in namespace "
                    f"{self.namespace} while this scheduler watched it",
                )
            current = seen  # a reaper's observation changes the resourceVersion, not the record
        logger.warning("taking over Lease %s from %s: not renewed for %.0fs", self.name, holder, window)
        return current

    def _write(self, current: client.V1Lease | None) -> None:
        now = datetime.now(timezone.utc)
        if current is None:
            self.coordination.create_namespaced_lease(
                self.namespace,
                lease_body(self.release, self.holder, self.grace_seconds, now),
                _request_timeout=self.timeout,
            )
            self._renewed_at = self._clock()
            return
        taken_over = current.spec.holder_identity != self.holder
        if taken_over:
            logger.info("taking over the lease of release %s from %s", self.release, current.spec.holder_identity)
        body = lease_body(
            self.release,
            self.holder,
            self.grace_seconds,
            now,
            acquired=None if taken_over else current.spec.acquire_time,
        )
        body.metadata.resource_version = current.metadata.resource_version
        body.spec.lease_transitions = (current.spec.lease_transitions or 0) + int(taken_over)
        self.coordination.replace_namespaced_lease(self.name, self.namespace, body, _request_timeout=self.timeout)
        self._renewed_at = self._clock()
        if taken_over and self.events is not None:
            self.events.record(
                Reason.LEASE_TAKEN_OVER,
                "TakeOver",
                f"Lease {self.name} taken over by {self.holder} "
                f"from {current.spec.holder_identity}{'' if self.takeover else ', which stopped renewing it'}",
            )

    def renew(self) -> None:
        """Takes the Lease (see start), or renews the one this scheduler holds; one that is lost is recorded in
        `lost`, never re-created."""
        with self._renewing:
            if self.lost is not None:
                return
            if not self._held:
                self._acquire()
                return
            for _ in range(2):  # a reaper's observation changes the resourceVersion between the read and the write
                current = self._read()
                lost = loss(current, self.holder)
                if lost is not None:
                    self.lost = lost
                    self._stop.set()
                    logger.error("the Lease of release %s was %s: this scheduler stops writing", self.release, lost)
                    return
                try:
                    self._write(current)
                    return
                except ApiException as error:
                    if error.status != 409:
                        raise
            logger.warning("renewing the Lease of release %s: it kept changing meanwhile (409)", self.release)

    def _loop(self) -> None:
        interval = renew_interval(self.grace_seconds)
        while not self._stop.wait(interval):
            try:
                self.renew()
            except (ApiException, HTTPError, OSError) as error:  # apiserver away (restarting, network, a request
                # timed out): the next renewal retries, the grace covers a few misses; the thread must never die of it
                logger.warning("renewing the lease of release %s failed: %s", self.release, error)

    def stop(self) -> None:
        """Stops renewing; the Lease stays (a reaper acts once it has stayed unchanged for the grace period)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def delete(self) -> None:
        """Gives the Lease up after the release is gone; one lost to another holder is not this scheduler's."""
        current = self._read()
        self._held = False
        if current is None or current.spec.holder_identity != self.holder:
            return
        try:
            self.coordination.delete_namespaced_lease(
                self.name,
                self.namespace,
                body=client.V1DeleteOptions(
                    preconditions=client.V1Preconditions(resource_version=current.metadata.resource_version)
                ),
                _request_timeout=self.timeout,
            )
        except ApiException as error:
            # 409: a reaper's observation came in between; the unrenewed Lease goes with the next reap (its
            # release is gone, so there is nothing to uninstall)
            if error.status not in (404, 409):
                raise
