"""The scheduler's Prometheus metrics (docs/en/observability.md): what it counted (rollbacks, worker failures, waits,
guard requests, through the Observer hooks) and its release's state read at each scrape (workers desired and ready
per role, the revision and the last all-ready one, the Lease's age). Each scheduler has a registry of its own, served
on its own address, so two schedulers of one process never share a series. Needs prometheus-client (the `metrics`
extra): the scheduler imports this module only when metrics_address is set."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from urllib3.exceptions import HTTPError

from .. import naming
from ..config import split_address
from ..errors import WorkerTimeoutError, diagnosed_reason
from ..observer import Observer
from ..pods.watch import PodWatch, is_ready
from ..reasons import diagnosis_reason
from ..release.model import ReleaseModel
from .lease import ReleaseLease

logger = logging.getLogger(__name__)

PREFIX = "areal_workers"
WAIT_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0)
# Engine calls run from milliseconds (a health-like call) to hours (a training step, http_timeout 7200 s).
REQUEST_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 7200.0)


def failure_kind(error: BaseException) -> str:
    """A bounded label for why a worker failed: the diagnosis' verdict when reasons.Reason names it ("OOMKilled",
    "ErrImagePull"), Timeout for a time-out, else Other."""
    if isinstance(error, WorkerTimeoutError):
        return "Timeout"
    known = diagnosis_reason(diagnosed_reason(error) or "")
    return str(known) if known is not None else "Other"


class Driven(Protocol):
    """What the metrics read of a release's driver (orchestration/driver.py's ReleaseDriver)."""

    name: str
    model: ReleaseModel
    good_revision: int | None
    pods: PodWatch


@dataclass(frozen=True)
class ReleaseState:
    """The release as one scrape saw it (None: unknown or none)."""

    desired: dict[str, int] = field(default_factory=dict)
    ready: dict[str, int] | None = None  # None: the pods could not be listed
    revision: int | None = None
    ready_revision: int | None = None
    lease_age: float | None = None


def ready_by_role(pods: Iterable[client.V1Pod], roles: Iterable[str]) -> dict[str, int]:
    """Ready pods (not being deleted) per role label, for each of `roles` (0 when none)."""
    counts = dict.fromkeys(roles, 0)
    for pod in pods:
        role = (pod.metadata.labels or {}).get(naming.LABEL_ROLE)
        if role in counts and is_ready(pod):
            counts[role] += 1
    return counts


def read_state(driver: Driven, lease: ReleaseLease | None) -> ReleaseState:
    """The release's state now: one pod listing (a failed one leaves `ready` unknown; the scrape still answers)."""
    model = driver.model
    with_pods = [*model.roles, *(fork for fork in model.forks if not model.is_process_fork(fork))]
    desired = {workload: model.replicas(workload) for workload in sorted(with_pods)}
    ready: dict[str, int] | None = None
    if model.installed:
        try:
            pods, _ = driver.pods.list(naming.release_selector(driver.name))
        except (ApiException, HTTPError) as error:
            logger.debug("metrics: listing the pods of release %s failed: %s", driver.name, error)
        else:
            ready = ready_by_role(pods, desired)
    return ReleaseState(
        desired,
        ready,
        model.revision,
        driver.good_revision,
        None if lease is None else lease.renewal_age,
    )


def state_families(release: str, state: ReleaseState) -> list[Metric]:
    """The gauges of one scrape; a family without samples is still declared (its HELP and TYPE)."""
    desired = GaugeMetricFamily(
        f"{PREFIX}_workers_desired", "Workers each role (or pod-mode fork) should have.", labels=["release", "role"]
    )
    ready = GaugeMetricFamily(
        f"{PREFIX}_workers_ready", "Ready worker pods of each role, at the scrape.", labels=["release", "role"]
    )
    for role, count in state.desired.items():
        desired.add_metric([release, role], count)
    for role, count in (state.ready or {}).items():
        ready.add_metric([release, role], count)
    revision = GaugeMetricFamily(
        f"{PREFIX}_release_revision", "The release's current helm revision.", labels=["release"]
    )
    good = GaugeMetricFamily(
        f"{PREFIX}_release_ready_revision",
        "The release's last revision whose workers were all ready (what a rollback returns to).",
        labels=["release"],
    )
    lease = GaugeMetricFamily(
        f"{PREFIX}_lease_renewal_age_seconds",
        "Seconds since the scheduler last renewed its release's Lease (absent: it holds none).",
        labels=["release"],
    )
    for family, value in ((revision, state.revision), (good, state.ready_revision), (lease, state.lease_age)):
        if value is not None:
            family.add_metric([release], value)
    return [desired, ready, revision, good, lease]


class StateCollector(Collector):
    def __init__(self, release: str, read: Callable[[], ReleaseState]) -> None:
        self.release, self.read = release, read

    def collect(self) -> Iterator[Metric]:
        yield from state_families(self.release, self.read())

    def describe(self) -> Iterator[Metric]:
        # Declared without reading the cluster: registering must not list pods.
        yield from state_families(self.release, ReleaseState())


class PrometheusObserver(Observer):
    """The counters and histograms of one scheduler, in a registry of its own; `watch` adds its release's state and
    `serve` its HTTP endpoint."""

    def __init__(self, release: str) -> None:
        self.release = release
        self.registry = CollectorRegistry(auto_describe=True)
        self.waits = self._histogram(
            "wait_seconds",
            "Duration of the scheduler's create_workers, scale_workers, update_workers and get_workers calls.",
            ["operation", "role", "outcome"],
            WAIT_BUCKETS,
        )
        self.rollbacks = self._counter(
            "rollbacks",
            "Changes undone after their workers failed, by what became of the release and the failure's reason.",
            ["action", "reason"],
        )
        self.failures = self._counter(
            "worker_failures",
            "Workers found with a fatal problem (by a wait or a liveness check), by role and diagnosis reason.",
            ["role", "reason"],
        )
        self.requests = self._histogram(
            "guard_request_seconds",
            "Duration of one attempt of a request to a worker's guard, by endpoint.",
            ["endpoint"],
            REQUEST_BUCKETS,
        )
        self.request_errors = self._counter(
            "guard_request_errors",
            "Attempts of guard requests without a reply or with an HTTP error status, by endpoint and kind.",
            ["endpoint", "kind"],
        )
        self._server: tuple[object, threading.Thread] | None = None
        self.address: tuple[str, int] | None = None

    # Every series of this scheduler: named under PREFIX, labelled with its release first, in its own registry.

    def _counter(self, name: str, documentation: str, labels: list[str]) -> Counter:
        return Counter(f"{PREFIX}_{name}", documentation, ["release", *labels], registry=self.registry)

    def _histogram(self, name: str, documentation: str, labels: list[str], buckets: tuple[float, ...]) -> Histogram:
        return Histogram(
            f"{PREFIX}_{name}", documentation, ["release", *labels], buckets=buckets, registry=self.registry
        )

    def waited(self, operation: str, role: str, outcome: str, seconds: float) -> None:
        self.waits.labels(self.release, operation, role, outcome).observe(seconds)

    def rolled_back(self, action: str, error: BaseException) -> None:
        self.rollbacks.labels(self.release, action, failure_kind(error)).inc()

    def worker_failed(self, role: str, error: BaseException) -> None:
        self.failures.labels(self.release, role, failure_kind(error)).inc()

    def guard_request(self, endpoint: str, seconds: float, error: str | None) -> None:
        self.requests.labels(self.release, endpoint).observe(seconds)
        if error is not None:
            self.request_errors.labels(self.release, endpoint, error).inc()

    def watch(self, driver: Driven, lease: ReleaseLease | None) -> None:
        self.registry.register(StateCollector(self.release, lambda: read_state(driver, lease)))

    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Serves /metrics (any path) on host:port (port 0: a free one) from a daemon thread; the bound address."""
        server, thread = start_http_server(port, addr=host, registry=self.registry)
        self._server = (server, thread)
        bound = server.server_address
        self.address = (str(bound[0]), int(bound[1]))
        logger.info("serving the metrics of release %s on %s:%s", self.release, *self.address)
        return self.address

    def close(self) -> None:
        if self._server is not None:
            server, thread = self._server
            self._server = None
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]
            thread.join(timeout=5)

    def metric_names(self) -> set[str]:
        """Every series name the registry may expose, samples or not yet (a counter's _total and _created, a
        histogram's _bucket, _count, _sum and _created)."""
        suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_count", "_sum", "_created")}
        return {
            family.name + suffix for family in self.registry.collect() for suffix in suffixes.get(family.type, ("",))
        }


def start(address: str, release: str, driver: Driven, lease: ReleaseLease | None) -> PrometheusObserver:
    """A PrometheusObserver of `driver`'s release, serving on `address` (host:port)."""
    host, port = split_address(address)
    observer = PrometheusObserver(release)
    observer.watch(driver, lease)
    observer.serve(host, port)
    return observer
