"""The scheduler's Prometheus metrics (runtime/metrics.py, observer.py): the labels each hook counts under, the state
read at a scrape, the exposition served over HTTP (parsed with prometheus_client's own parser), one registry per
scheduler, and a scheduler on the in-memory cluster whose failed change moves the counters."""

from __future__ import annotations

import urllib.request

import pytest
import requests
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig
from areal_workers.areal_types import Job, SchedulingSpec, SchedulingStrategy, Worker
from areal_workers.config import ConfigError, split_address
from areal_workers.errors import SchedulerError, WorkerFailedError, WorkerTimeoutError, attach_diagnosis
from areal_workers.guard.replies import NoReply, Reply
from areal_workers.guard.transport import GuardTransport, attempt_error
from areal_workers.observer import Observer, timed
from areal_workers.runtime import metrics
from memory_backend import MemoryCluster, memory_connect

RELEASE = "aw-exp-trial"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of an exposition, by name and sorted labels (the parser raises on invalid text)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(address: tuple[str, int]) -> str:
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/metrics", timeout=5) as response:
        assert response.status == 200
        return response.read().decode()


def failed(diagnosis: str, reason: str | None = None) -> WorkerFailedError:
    return attach_diagnosis(WorkerFailedError("actor/1", 1, "crash"), diagnosis, reason)


def pod(role: str, index: int, ready: bool, deleting: bool = False) -> client.V1Pod:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=f"{RELEASE}-{role}-{index}",
            labels={"areal.io/role": role},
            deletion_timestamp="2026-01-01T00:00:00Z" if deleting else None,
        ),
        status=client.V1PodStatus(
            pod_ip=f"10.0.0.{index + 1}", conditions=[client.V1PodCondition(type="Ready", status=str(ready))]
        ),
    )


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (failed("aw-actor-1 (container worker) on node n1: OOMKilled [fatal]\n  events ...", "OOMKilled"), "OOMKilled"),
        (failed("aw-actor-1: ErrImagePull [fatal]", "ErrImagePull"), "ErrImagePull"),
        (failed("aw-actor-1: NewKubeletReason [fatal]", "NewKubeletReason"), "Other"),  # unknown: bounded label
        (failed("aw-actor-1 (container worker): OOMKilled [fatal]", None), "Other"),  # text alone is not parsed
        (WorkerFailedError("actor/1", 1, "no diagnosis"), "Other"),
        (WorkerTimeoutError("actor", 60), "Timeout"),
    ],
)
def test_a_failure_is_labelled_by_its_diagnosis_reason_word(error, kind):
    assert metrics.failure_kind(error) == kind


def test_ready_workers_are_ready_pods_not_being_deleted_per_role_label():
    pods = [pod("actor", 0, True), pod("actor", 1, False), pod("actor", 2, True, deleting=True), pod("other", 0, True)]
    assert metrics.ready_by_role(pods, ["actor", "critic"]) == {"actor": 1, "critic": 0}


def test_a_scrape_exposes_the_release_state_and_leaves_unknown_values_out():
    state = metrics.ReleaseState(desired={"actor": 3}, ready={"actor": 2}, revision=4, ready_revision=2, lease_age=1.5)
    families = {f.name: f for f in metrics.state_families(RELEASE, state)}
    values = {(f.name, s.labels.get("role")): s.value for f in families.values() for s in f.samples}
    assert values == {
        ("areal_workers_workers_desired", "actor"): 3,
        ("areal_workers_workers_ready", "actor"): 2,
        ("areal_workers_release_revision", None): 4,
        ("areal_workers_release_ready_revision", None): 2,
        ("areal_workers_lease_renewal_age_seconds", None): 1.5,
    }
    empty = metrics.state_families(RELEASE, metrics.ReleaseState())
    assert [f.name for f in empty] == list(families) and all(not f.samples for f in empty)


def test_the_hooks_count_under_their_labels_in_the_served_exposition():
    observer = metrics.PrometheusObserver(RELEASE)
    observer.watch(_Driven(), None)
    address = observer.serve("127.0.0.1", 0)
    try:
        before = samples(scrape(address))
        observer.rolled_back("rolled_back", failed("p: CrashLoopBackOff [fatal]", "CrashLoopBackOff"))
        observer.worker_failed("actor", failed("p: CrashLoopBackOff [fatal]", "CrashLoopBackOff"))
        observer.guard_request("/call", 0.2, None)
        observer.guard_request("/call", 3.0, "http_5xx")
        observer.waited("get_workers", "actor", "failed", 42.0)
        after = samples(scrape(address))
    finally:
        observer.close()
    rel = ("release", RELEASE)
    rollback = ("areal_workers_rollbacks_total", (("action", "rolled_back"), ("reason", "CrashLoopBackOff"), rel))
    assert before.get(rollback, 0) == 0 and after[rollback] == 1
    assert after[("areal_workers_worker_failures_total", (("reason", "CrashLoopBackOff"), rel, ("role", "actor")))] == 1
    assert after[("areal_workers_guard_request_seconds_count", (("endpoint", "/call"), rel))] == 2
    assert after[("areal_workers_guard_request_seconds_bucket", (("endpoint", "/call"), ("le", "0.5"), rel))] == 1
    assert after[("areal_workers_guard_request_errors_total", (("endpoint", "/call"), ("kind", "http_5xx"), rel))] == 1
    wait = (("operation", "get_workers"), ("outcome", "failed"), rel, ("role", "actor"))
    assert after[("areal_workers_wait_seconds_sum", wait)] == 42.0
    assert after[("areal_workers_workers_desired", (rel, ("role", "actor")))] == 2
    assert after[("areal_workers_workers_ready", (rel, ("role", "actor")))] == 1
    with pytest.raises(OSError):  # closed: the port no longer answers
        scrape(address)


def test_two_schedulers_observers_never_share_a_series():
    first, second = metrics.PrometheusObserver("aw-a"), metrics.PrometheusObserver("aw-b")
    first.rolled_back("uninstalled", WorkerTimeoutError("actor", 1))
    assert first.registry is not second.registry
    assert second.registry.get_sample_value("areal_workers_rollbacks_total", {"release": "aw-b"}) is None
    labels = {"release": "aw-a", "action": "uninstalled", "reason": "Timeout"}
    assert first.registry.get_sample_value("areal_workers_rollbacks_total", labels) == 1


def test_metric_names_hold_every_series_name_the_families_expose():
    observer = metrics.PrometheusObserver(RELEASE)
    observer.watch(_Driven(), None)
    names = observer.metric_names()
    assert {
        "areal_workers_rollbacks_total",
        "areal_workers_wait_seconds_bucket",
        "areal_workers_workers_ready",
    } <= names
    assert "areal_workers_rollbacks" not in names and "areal_workers_workers_ready_total" not in names


class _Recorder(Observer):
    def __init__(self) -> None:
        self.waits: list[tuple[str, str, str]] = []
        self.requests: list[tuple[str, str | None]] = []

    def waited(self, operation: str, role: str, outcome: str, seconds: float) -> None:
        self.waits.append((operation, role, outcome))

    def guard_request(self, endpoint: str, seconds: float, error: str | None) -> None:
        self.requests.append((endpoint, error))


class _Calls:
    def __init__(self) -> None:
        self.observer = _Recorder()

    @timed("get_workers")
    def get_workers(self, role: str, error: BaseException | None = None) -> str:
        if error is not None:
            raise error
        return role

    @timed("create_workers")
    def create_workers(self, job: Job) -> None:
        raise ValueError("refused")


def test_timed_reports_each_call_with_its_role_and_outcome_and_keeps_the_result_and_the_error():
    calls = _Calls()
    assert calls.get_workers("actor") == "actor"
    with pytest.raises(WorkerTimeoutError):
        calls.get_workers("actor", WorkerTimeoutError("actor", 1))
    with pytest.raises(WorkerFailedError):
        calls.get_workers("critic", WorkerFailedError("critic/0", 1))
    with pytest.raises(ValueError):
        calls.create_workers(Job(role="ref", replicas=1, tasks=[SchedulingSpec()]))
    # AReaL's controllers pass the job by keyword (RolloutController: `create_workers(job=job)`).
    with pytest.raises(ValueError):
        calls.create_workers(job=Job(role="rollout", replicas=1, tasks=[SchedulingSpec()]))
    assert calls.get_workers(role="ref") == "ref"
    assert calls.observer.waits == [
        ("get_workers", "actor", "ok"),
        ("get_workers", "actor", "timeout"),
        ("get_workers", "critic", "failed"),
        ("create_workers", "ref", "error"),
        ("create_workers", "rollout", "error"),
        ("get_workers", "ref", "ok"),
    ]


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (Reply(200, b"{}"), None),
        (Reply(404, b""), "http_4xx"),
        (Reply(503, b""), "http_5xx"),
        (NoReply("timeout", "slow", TimeoutError()), "timeout"),
        (NoReply("connection", "refused", ConnectionError()), "connection"),
    ],
)
def test_a_guard_attempt_error_is_why_no_reply_came_or_the_status_class(reply, error):
    assert attempt_error(reply) == error


def test_each_sync_guard_attempt_is_reported_with_its_endpoint():
    transport = GuardTransport()
    transport.observer = recorder = _Recorder()
    transport._http.close()

    class Refusing:
        def post(self, url: str, **kwargs: object) -> object:
            raise requests.ConnectionError("refused")

        def close(self) -> None:
            pass

    transport._http = Refusing()  # type: ignore[assignment]
    worker = Worker(id="a/0", ip="127.30.0.9", worker_ports=["8000"])
    reply = transport._sync_attempt(worker, "/configure", b"", 1.0)
    assert isinstance(reply, NoReply)
    assert recorder.requests == [("/configure", "connection")]

    def dead(worker: Worker) -> None:  # the liveness check after the connection error finds the pod gone
        raise WorkerFailedError(worker.id, -1, "pod deleted")

    transport._liveness = dead
    with pytest.raises(WorkerFailedError):
        transport._sync_attempt(worker, "/call", b"", 1.0)
    assert recorder.requests[-1] == ("/call", "connection")  # the attempt that mattered most is counted too


@pytest.mark.parametrize(
    ("address", "bound"), [("0.0.0.0:9090", ("0.0.0.0", 9090)), (":0", ("127.0.0.1", 0)), ("[::1]:9400", ("::1", 9400))]
)
def test_the_metrics_address_is_host_and_port(address, bound):
    assert split_address(address) == bound


@pytest.mark.parametrize("address", ["9090", "host:", "host:http", "host:70000"])
def test_a_metrics_address_without_a_port_is_refused(address):
    with pytest.raises(ConfigError, match="metrics_address must be host:port"):
        KubernetesSchedulerConfig(metrics_address=address)


def test_metrics_are_off_by_default_and_set_from_their_variable(tmp_path):
    assert KubernetesSchedulerConfig().metrics_address is None
    environ = {"AREAL_K8S_METRICS_ADDRESS": "0.0.0.0:9090"}
    config = KubernetesSchedulerConfig.from_env(environ, namespace_file=tmp_path / "none")
    assert config.metrics_address == "0.0.0.0:9090"
    with pytest.raises(ConfigError, match="^AREAL_K8S_METRICS_ADDRESS must be host:port"):  # the variable named
        KubernetesSchedulerConfig.from_env({"AREAL_K8S_METRICS_ADDRESS": "9090"}, namespace_file=tmp_path / "none")


def test_a_scheduler_on_the_memory_cluster_counts_its_failed_change_and_its_rollback():
    cluster = MemoryCluster(RELEASE)
    config = KubernetesSchedulerConfig(namespace="ns", release_name=RELEASE, metrics_address="127.0.0.1:0")
    scheduler = KubernetesScheduler(config=config, experiment_name="e", trial_name="t", connect=memory_connect(cluster))
    try:
        scheduler.create_workers(_job("actor", 2, "example.com/areal:1"))
        scheduler.get_workers("actor")
        scheduler.update_workers(_job("actor", 2, "example.com/broken:2"))
        with pytest.raises(WorkerFailedError):
            scheduler.get_workers("actor")
        scheduler.get_workers("actor")
        exposed = samples(scrape(scheduler.observer.address))  # type: ignore[attr-defined]
    finally:
        scheduler.close()
    rel = ("release", RELEASE)
    assert exposed[("areal_workers_rollbacks_total", (("action", "rolled_back"), ("reason", "Other"), rel))] == 1
    assert exposed[("areal_workers_worker_failures_total", (("reason", "Other"), rel, ("role", "actor")))] == 1
    ok, failure = (
        (("operation", "get_workers"), ("outcome", "ok"), rel, ("role", "actor")),
        (("operation", "get_workers"), ("outcome", "failed"), rel, ("role", "actor")),
    )
    assert exposed[("areal_workers_wait_seconds_count", ok)] == 2
    assert exposed[("areal_workers_wait_seconds_count", failure)] == 1
    assert exposed[("areal_workers_release_revision", (rel,))] == 3  # create, the update, the rollback
    assert exposed[("areal_workers_release_ready_revision", (rel,))] == 3
    assert exposed[("areal_workers_workers_ready", (rel, ("role", "actor")))] == 2


def _job(role: str, replicas: int, image: str) -> Job:
    task = SchedulingSpec(cpu=1, mem=1, gpu=0, port_count=2, image=image, cmd="python -m areal.infra.rpc.rpc_server")
    return Job(role=role, replicas=replicas, tasks=[task])


class _Driven:
    """A driver with one installed role of two workers, one of them Ready."""

    name = RELEASE
    good_revision = 1

    def __init__(self) -> None:
        from areal_workers.release.model import ReleaseModel

        self.model = ReleaseModel(topology={"roles": {"actor": {"replicas": 2}}}, revision=1)
        self.pods = self

    def list(self, selector: str) -> tuple[list[client.V1Pod], str]:
        return [pod("actor", 0, True), pod("actor", 1, False)], "1"


def test_a_colocated_roles_wait_is_one_sample_under_the_role_asked_for():
    cluster = MemoryCluster(RELEASE)
    config = KubernetesSchedulerConfig(namespace="ns", release_name=RELEASE)
    scheduler = KubernetesScheduler(config=config, experiment_name="e", trial_name="t", connect=memory_connect(cluster))
    try:
        scheduler.observer = recorder = _Recorder()
        scheduler.create_workers(_job("actor", 2, "example.com/areal:1"))
        colocated = _job("ref", 2, "example.com/areal:1")
        colocated.scheduling_strategy = SchedulingStrategy(type="colocation", target="actor", fork=False)
        scheduler.create_workers(colocated)
        recorder.waits.clear()
        scheduler.get_workers("ref")
    finally:
        scheduler.close()
    assert recorder.waits == [("get_workers", "ref", "ok")]  # not also ("get_workers", "actor", "ok")


def test_a_worker_gone_under_a_liveness_check_is_counted_and_recorded_like_a_waits_failure():
    cluster = MemoryCluster(RELEASE)
    config = KubernetesSchedulerConfig(namespace="ns", release_name=RELEASE)
    scheduler = KubernetesScheduler(config=config, experiment_name="e", trial_name="t", connect=memory_connect(cluster))
    try:
        scheduler.create_workers(_job("actor", 1, "example.com/areal:1"))
        (worker,) = scheduler.get_workers("actor")
        scheduler.driver.observer = recorder = _FailureRecorder()
        recorded: list[tuple[str, str]] = []
        scheduler.driver.events.worker_failed = lambda model, role, error: recorded.append((role, str(error)))  # type: ignore[method-assign]
        cluster.pods.clear()  # its node went away with the pod
        with pytest.raises(WorkerFailedError, match="is gone or was replaced"):
            scheduler.finder.check_alive(worker)
    finally:
        scheduler.close()
    assert recorder.failures == ["actor"]
    assert recorded and recorded[0][0] == "actor" and "gone or was replaced" in recorded[0][1]


class _FailureRecorder(Observer):
    def __init__(self) -> None:
        self.failures: list[str] = []

    def worker_failed(self, role: str, error: BaseException) -> None:
        self.failures.append(role)


def test_a_rollback_that_helm_could_not_do_is_not_counted():
    from areal_workers.release.client import HelmError

    cluster = MemoryCluster(RELEASE)
    config = KubernetesSchedulerConfig(namespace="ns", release_name=RELEASE)
    scheduler = KubernetesScheduler(config=config, experiment_name="e", trial_name="t", connect=memory_connect(cluster))
    rollbacks: list[str] = []

    class Rollbacks(Observer):
        def rolled_back(self, action: str, error: BaseException) -> None:
            rollbacks.append(action)

    async def refused(name: str, revision: int) -> None:
        raise HelmError(1, b"", b"Error: timed out waiting for the condition")

    try:
        scheduler.create_workers(_job("actor", 1, "example.com/areal:1"))
        scheduler.get_workers("actor")
        scheduler.update_workers(_job("actor", 1, "example.com/broken:2"))
        scheduler.driver.observer = Rollbacks()
        scheduler.driver.releases.rollback = refused  # type: ignore[method-assign]
        with pytest.raises(SchedulerError, match="timed out waiting for the condition"):
            scheduler.get_workers("actor")
    finally:
        scheduler.close()
    assert rollbacks == []
