"""The trainer's heartbeat for its release: a coordination.k8s.io Lease renewed from a daemon thread while the
scheduler lives. A trainer that dies (kill -9, OOM, a lost laptop) stops renewing; once the Lease is
`lease_grace_seconds` old, a reaper (`areal-workers reap`, runtime/reaper.py) uninstalls the release. A trainer that
restarts within the grace period takes the Lease over and keeps its workers.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import datetime, timezone

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from .. import cluster_access, naming
from ..errors import ClusterAccessError

logger = logging.getLogger(__name__)

LEASE_LABEL = "areal-workers.dev/lease-of"  # the release a Lease keeps alive
MAX_RENEW_SECONDS = 10.0


def lease_name(release: str) -> str:
    return f"{release}-trainer"


def holder_identity() -> str:
    return f"{socket.gethostname()}/{os.getpid()}"


def renew_interval(grace_seconds: float) -> float:
    """A quarter of the grace period (at most MAX_RENEW_SECONDS): three renewals may fail before it runs out."""
    return max(0.2, min(MAX_RENEW_SECONDS, grace_seconds / 4))


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


class ReleaseLease:
    def __init__(
        self, coordination: client.CoordinationV1Api, namespace: str, release: str, grace_seconds: float
    ) -> None:
        self.coordination, self.namespace, self.release = coordination, namespace, release
        self.grace_seconds = grace_seconds
        self.holder = holder_identity()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Takes the Lease (creates it, or takes it over from a predecessor) and renews it from now on. A request
        that fails raises ClusterAccessError naming the cause (API server, namespace, permission)."""
        try:
            self.renew()
        except (ApiException, HTTPError, OSError) as error:
            cause = cluster_access.api_failure(
                error,
                self.namespace,
                self.coordination.api_client.configuration.host,
                "keep the trainer's Lease (leases in coordination.k8s.io)",
            )
            if cause is None:
                raise
            raise ClusterAccessError(
                cause.cause,
                f"{cause}; or set lease_grace_seconds=0 "
                f"(AREAL_K8S_LEASE_GRACE_SECONDS=0) to run without a Lease (and "
                f"without the reaper's clean-up)",
            ) from error
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name=f"lease-{self.release}", daemon=True)
        self._thread.start()

    def renew(self) -> None:
        now = datetime.now(timezone.utc)
        name = lease_name(self.release)
        try:
            current = self.coordination.read_namespaced_lease(name, self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
            self.coordination.create_namespaced_lease(
                self.namespace, lease_body(self.release, self.holder, self.grace_seconds, now)
            )
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
        self.coordination.replace_namespaced_lease(name, self.namespace, body)

    def _loop(self) -> None:
        interval = renew_interval(self.grace_seconds)
        while not self._stop.wait(interval):
            try:
                self.renew()
            except (ApiException, HTTPError, OSError) as error:  # apiserver away (restarting, network): the next
                # renewal retries, the grace covers a few misses; the thread must never die of it
                logger.warning("renewing the lease of release %s failed: %s", self.release, error)

    def stop(self) -> None:
        """Stops renewing; the Lease stays (a reaper acts once it is older than the grace period)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    def delete(self) -> None:
        try:
            self.coordination.delete_namespaced_lease(lease_name(self.release), self.namespace)
        except ApiException as error:
            if error.status != 404:
                raise
