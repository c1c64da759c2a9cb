"""GuardClient against real reference guard subprocesses on 127.0.0.1 (no HTTP mocks)."""

import asyncio
import gc
import socket
import uuid
import warnings
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from areal_workers.areal_types import Worker
from areal_workers.errors import (
    EngineCallError,
    EngineCreationError,
    EngineImportError,
    PortAllocationError,
    RPCConnectionError,
    SchedulerError,
    WorkerFailedError,
)
from areal_workers.guard.client import CallOptions, ForkError, GuardClient
from areal_workers.guard.replies import Reply, Retryable, call_outcome, created_engine_result
from guardlib import (
    BROKEN,
    COUNTER,
    EXIT_TIMEOUT,
    STARTUP_TIMEOUT,
    ProcessJanitor as Janitor,
    RunningGuard,
    guard_command,
    janitor_for,
    launch_guard,
    running_command,
)

MODES = ["sync", "async"]


# --------------------------------------------------------------------------- guard processes


class Guard(RunningGuard):
    """A reference guard with the shortcuts these tests use (the process helpers live in guardlib.py)."""

    def worker(self, worker_id: str = "actor/0") -> Worker:
        return Worker(id=worker_id, ip=self.host, worker_ports=[str(self.port), "0"])

    def new_counter(self, **init_kwargs: Any) -> str:
        engine_name = f"counter-{uuid.uuid4().hex[:8]}"
        body = {"engine": COUNTER, "engine_name": engine_name, "init_kwargs": init_kwargs}
        response = self.post("/create_engine", body)
        assert response.status_code == 200, response.text
        return engine_name

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=EXIT_TIMEOUT)


@pytest.fixture
def janitor(request: pytest.FixtureRequest) -> Janitor:
    return janitor_for(request)


@pytest.fixture
def guard(janitor: Janitor, tmp_path: Path) -> Guard:
    return launch_guard(janitor, tmp_path, Guard)


@pytest.fixture(scope="module")
def shared_guard(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Guard:
    """One guard for the tests that only use engines of their own (unique names)."""
    return launch_guard(janitor_for(request), tmp_path_factory.mktemp("shared-guard"), Guard)


def unreachable_worker() -> Worker:
    """A worker whose guard port refuses connections."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return Worker(id="actor/0", ip="127.0.0.1", worker_ports=[str(port)])


# --------------------------------------------------------------------------- the client under test


@dataclass
class LivenessProbe:
    """The scheduler's pod check: records its calls, raises WorkerFailedError from call `fail_from` on."""

    fail_from: int | None = None
    calls: list[str] = field(default_factory=list)

    def __call__(self, worker: Worker) -> None:
        self.calls.append(worker.id)
        if self.fail_from is not None and len(self.calls) >= self.fail_from:
            raise WorkerFailedError(worker.id, 137, "container terminated: OOMKilled")


@dataclass
class Sleeps:
    """Records the retry backoff instead of waiting it out."""

    delays: list[float] = field(default_factory=list)

    def sync(self, delay: float) -> None:
        self.delays.append(delay)

    async def async_(self, delay: float) -> None:
        self.delays.append(delay)


@pytest.fixture
def liveness() -> LivenessProbe:
    return LivenessProbe()


@pytest.fixture
def sleeps() -> Sleeps:
    return Sleeps()


def make_client(liveness: LivenessProbe, sleeps: Sleeps) -> GuardClient:
    return GuardClient(liveness, connect_timeout=2.0, retry_sleep=sleeps.sync, async_retry_sleep=sleeps.async_)


@pytest.fixture
def client(liveness: LivenessProbe, sleeps: Sleeps) -> Iterator[GuardClient]:
    guard_client = make_client(liveness, sleeps)
    yield guard_client
    guard_client.close()


def call(
    client: GuardClient, mode: str, worker: Worker, method: str, engine_name: str, *args: Any, **options: Any
) -> Any:
    """client.call, or client.async_call in a fresh asyncio.run() loop."""
    kwargs = options.pop("kwargs", {})
    if mode == "sync":
        return client.call(worker, method, engine_name, list(args), kwargs, CallOptions(**options))
    return asyncio.run(client.async_call(worker, method, engine_name, list(args), kwargs, CallOptions(**options)))


# --------------------------------------------------------------------------- create_engine


def test_create_engine_returns_the_raw_result(
    shared_guard: Guard, client: GuardClient, liveness: LivenessProbe
) -> None:
    worker = shared_guard.worker()

    result = asyncio.run(client.create_engine(worker, COUNTER, "created-by-client", [7], {}))

    assert result is None  # the reference guard's "result", passed through as AReaL does
    assert client.call(worker, "value", "created-by-client", [], {}) == 7
    assert liveness.calls == [worker.id]  # only call()'s check: create_engine checks on connection errors


def test_create_engine_import_failure_is_engine_import_error(shared_guard: Guard, client: GuardClient) -> None:
    with pytest.raises(EngineImportError) as raised:
        asyncio.run(client.create_engine(shared_guard.worker(), "no_such_module.Engine", "e", [], {}))

    assert raised.value.import_path == "no_such_module.Engine"
    assert "Failed to import" in raised.value.reason


def test_create_engine_duplicate_is_a_400_creation_error(shared_guard: Guard, client: GuardClient) -> None:
    engine_name = shared_guard.new_counter()

    with pytest.raises(EngineCreationError) as raised:
        asyncio.run(client.create_engine(shared_guard.worker(), COUNTER, engine_name, [], {}))

    assert raised.value.status_code == 400
    assert "already exists" in raised.value.reason


def test_create_engine_failing_constructor_is_a_500_error(shared_guard: Guard, client: GuardClient) -> None:
    with pytest.raises(EngineCreationError) as raised:
        asyncio.run(client.create_engine(shared_guard.worker(), BROKEN, "broken", [], {}))

    assert raised.value.status_code == 500
    assert "Broken engine refuses to start" in raised.value.reason


def test_create_engine_rejects_a_non_string_engine_without_a_request(
    client: GuardClient, liveness: LivenessProbe
) -> None:
    from localworker.engines import Counter

    # Unreachable: a request would have raised RPCConnectionError instead.
    with pytest.raises(EngineCreationError) as raised:
        asyncio.run(client.create_engine(unreachable_worker(), Counter, "e", [], {}))  # type: ignore[arg-type]

    assert raised.value.reason == f"Engine must be a string import path, got {type(Counter)}"
    assert raised.value.status_code is None
    assert liveness.calls == []


@pytest.mark.parametrize("worker_is_dead", [True, False])
def test_create_engine_connection_error_asks_liveness(
    client: GuardClient, liveness: LivenessProbe, worker_is_dead: bool
) -> None:
    worker = unreachable_worker()
    liveness.fail_from = 1 if worker_is_dead else None

    expected = WorkerFailedError if worker_is_dead else RPCConnectionError
    with pytest.raises(expected) as raised:
        asyncio.run(client.create_engine(worker, COUNTER, "e", [], {}))

    assert liveness.calls == [worker.id]
    if not worker_is_dead:
        error = raised.value
        assert (error.worker_id, error.host, error.port) == (worker.id, "127.0.0.1", int(worker.worker_ports[0]))


def test_create_engine_and_set_env_time_out(client: GuardClient) -> None:
    """A guard that accepts the request but does not answer in time: both calls time out with AReaL's errors."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        worker = Worker(id="actor/0", ip="127.0.0.1", worker_ports=[str(silent.getsockname()[1])])
        with pytest.raises(EngineCreationError) as creation:
            asyncio.run(client.create_engine(worker, COUNTER, "late", [], {}, timeout=0.2))
        with pytest.raises(SchedulerError) as set_env:
            asyncio.run(client.set_env(worker, {"A": "1"}, timeout=0.2))

    assert creation.value.reason.startswith("Request timed out: ")
    assert creation.value.status_code is None
    assert type(set_env.value) is SchedulerError
    assert set_env.value.args[0] == "actor/0" and set_env.value.args[1].startswith("set_env timed out: ")


# --------------------------------------------------------------------------- set_env


def test_set_env_is_visible_to_engines(shared_guard: Guard, client: GuardClient, liveness: LivenessProbe) -> None:
    worker = shared_guard.worker()
    engine_name = shared_guard.new_counter()

    asyncio.run(client.set_env(worker, {"AREAL_WORKERS_GUARD_CLIENT_TEST": "yes"}))

    assert liveness.calls == [worker.id]
    assert client.call(worker, "env", engine_name, ["AREAL_WORKERS_GUARD_CLIENT_TEST"], {}) == "yes"


def test_set_env_with_an_empty_env_only_checks_liveness(client: GuardClient, liveness: LivenessProbe) -> None:
    worker = unreachable_worker()  # a request would fail

    asyncio.run(client.set_env(worker, {}))

    assert liveness.calls == [worker.id]


def test_set_env_rejected_is_a_bare_scheduler_error(shared_guard: Guard, client: GuardClient) -> None:
    with pytest.raises(SchedulerError) as raised:
        asyncio.run(client.set_env(shared_guard.worker(), {"A=B": "1"}))

    assert type(raised.value) is SchedulerError
    assert raised.value.args == (
        "actor/0",
        "Failed to set env on worker (status=500): Internal server error: illegal environment variable name",
    )


@pytest.mark.parametrize("worker_is_dead", [True, False])
def test_set_env_connection_error_asks_liveness(
    client: GuardClient, liveness: LivenessProbe, worker_is_dead: bool
) -> None:
    worker = unreachable_worker()
    liveness.fail_from = 2 if worker_is_dead else None  # the first check, before the request, passes

    with pytest.raises(WorkerFailedError if worker_is_dead else RPCConnectionError):
        asyncio.run(client.set_env(worker, {"RANK": "0"}))

    assert liveness.calls == [worker.id, worker.id]


# --------------------------------------------------------------------------- call / async_call


@pytest.mark.parametrize("mode", MODES)
def test_call_returns_the_result(shared_guard: Guard, client: GuardClient, liveness: LivenessProbe, mode: str) -> None:
    worker, engine_name = shared_guard.worker(), shared_guard.new_counter()

    assert call(client, mode, worker, "increment", engine_name, 4) == 4
    assert call(client, mode, worker, "increment", engine_name, kwargs={"n": 5}) == 9
    assert liveness.calls == [worker.id, worker.id]  # one check per attempt


@pytest.mark.parametrize("mode", MODES)
def test_call_400_is_not_retried(
    shared_guard: Guard, client: GuardClient, liveness: LivenessProbe, sleeps: Sleeps, mode: str
) -> None:
    worker, engine_name = shared_guard.worker(), shared_guard.new_counter()

    with pytest.raises(EngineCallError) as raised:
        call(client, mode, worker, "no_such_method", engine_name)

    assert (raised.value.method, raised.value.attempt) == ("no_such_method", 1)
    assert "no_such_method" in raised.value.reason
    assert liveness.calls == [worker.id] and sleeps.delays == []  # a single attempt


@pytest.mark.parametrize("mode", MODES)
def test_call_500_is_not_retried(
    shared_guard: Guard, client: GuardClient, liveness: LivenessProbe, sleeps: Sleeps, mode: str
) -> None:
    worker, engine_name = shared_guard.worker(), shared_guard.new_counter()

    with pytest.raises(EngineCallError) as raised:
        call(client, mode, worker, "fail", engine_name, "boom from the test")

    assert raised.value.attempt == 1
    assert raised.value.reason == "Engine method 'fail' failed: boom from the test"  # AReaL's wording
    assert liveness.calls == [worker.id] and sleeps.delays == []


@pytest.mark.parametrize("mode", MODES)
def test_call_unknown_engine_404_is_retried_with_exponential_backoff(
    shared_guard: Guard, client: GuardClient, liveness: LivenessProbe, sleeps: Sleeps, mode: str
) -> None:
    worker = shared_guard.worker()

    with pytest.raises(EngineCallError) as raised:
        call(client, mode, worker, "value", "ghost", max_retries=3, retry_delay=0.25)

    assert raised.value.attempt == 3
    assert raised.value.reason.startswith("HTTP 404: Engine 'ghost' not found")
    assert sleeps.delays == [0.25, 0.5]  # none after the last attempt
    assert liveness.calls == [worker.id] * 3


@pytest.mark.parametrize("mode", MODES)
def test_call_with_zero_retries_sends_nothing(
    shared_guard: Guard, client: GuardClient, liveness: LivenessProbe, sleeps: Sleeps, mode: str
) -> None:
    worker, engine_name = shared_guard.worker(), shared_guard.new_counter()

    with pytest.raises(EngineCallError) as raised:
        call(client, mode, worker, "increment", engine_name, max_retries=0)

    assert (raised.value.reason, raised.value.attempt) == ("Max retries exceeded", 0)
    assert liveness.calls == [] and sleeps.delays == []
    assert client.call(worker, "value", engine_name, [], {}) == 0


@pytest.mark.parametrize("mode", MODES)
def test_call_connection_errors_are_retried(
    client: GuardClient, liveness: LivenessProbe, sleeps: Sleeps, mode: str
) -> None:
    worker = unreachable_worker()

    with pytest.raises(EngineCallError) as raised:
        call(client, mode, worker, "value", "counter", max_retries=2, retry_delay=0.5)

    assert raised.value.attempt == 2
    assert raised.value.reason.startswith("Connection error: ")
    assert raised.value.__cause__ is not None
    assert sleeps.delays == [0.5]
    assert liveness.calls == [worker.id] * 4  # before each attempt and after each connection error


@pytest.mark.parametrize("mode", MODES)
def test_call_after_the_guard_died_stops_at_the_liveness_check(
    guard: Guard, client: GuardClient, liveness: LivenessProbe, sleeps: Sleeps, mode: str
) -> None:
    worker, engine_name = guard.worker(), guard.new_counter()
    assert call(client, mode, worker, "increment", engine_name) == 1
    guard.stop()
    liveness.fail_from = 3  # 1: the call above; 2: before this attempt; 3: after its connection error

    with pytest.raises(WorkerFailedError) as raised:
        call(client, mode, worker, "increment", engine_name, max_retries=3)

    assert raised.value.exit_code == 137
    assert len(liveness.calls) == 3 and sleeps.delays == []  # no retry


@pytest.mark.parametrize("mode", MODES)
def test_call_timeouts_are_retried(guard: Guard, client: GuardClient, sleeps: Sleeps, mode: str) -> None:
    worker, engine_name = guard.worker(), guard.new_counter()

    with pytest.raises(EngineCallError) as raised:
        call(client, mode, worker, "sleep", engine_name, 0.6, http_timeout=0.2, max_retries=2, retry_delay=0.1)

    assert raised.value.attempt == 2
    assert raised.value.reason.startswith("Timeout: ")
    assert sleeps.delays == [0.1]


def test_sync_call_works_inside_a_running_event_loop(shared_guard: Guard, client: GuardClient) -> None:
    worker, engine_name = shared_guard.worker(), shared_guard.new_counter()

    async def from_a_coroutine() -> tuple[Any, bool]:
        result = client.call(worker, "increment", engine_name, [], {})
        return result, asyncio.get_running_loop() in client._loop_sessions

    assert asyncio.run(from_a_coroutine()) == (1, False)


# --------------------------------------------------------------------------- fork support and health


def test_fork_two_children_concurrently_then_kill_them(guard: Guard, client: GuardClient, janitor: Janitor) -> None:
    parent = guard.worker()

    async def fork_child(index: int) -> tuple[Worker, dict[str, Any], list[str]]:
        host, [port] = await client.alloc_ports(parent, 1)
        command = guard_command(port=port, role="ref", worker_index=index)
        forked = await client.fork(parent, "ref", index, command, env={"AREAL_WORKERS_FORK_MARK": f"fork-{index}"})
        janitor.forked.append((forked["pid"], command))
        await client.wait_healthy(host, port, timeout=STARTUP_TIMEOUT)
        return Worker(id=f"ref/{index}", ip=host, worker_ports=[str(port)]), forked, command

    async def fork_all() -> list[tuple[Worker, dict[str, Any], list[str]]]:
        return list(await asyncio.gather(fork_child(0), fork_child(1)))

    children = asyncio.run(fork_all())

    for index, (child, forked, _command) in enumerate(children):
        health = client.health(child)
        assert health is not None and (health["role"], health["pid"]) == ("ref", forked["pid"])
        assert forked["host"] == "127.0.0.1"
        asyncio.run(client.create_engine(child, COUNTER, "counter", [], {}))
        assert client.call(child, "env", "counter", ["AREAL_WORKERS_FORK_MARK"], {}) == f"fork-{index}"
    parent_health = client.health(parent)
    assert parent_health is not None and parent_health["forked_children"] == 2

    async def kill_all() -> list[int]:
        return list(await asyncio.gather(*(client.kill_forked(parent, "ref", index) for index in range(2))))

    assert asyncio.run(kill_all()) == [200, 200]
    assert asyncio.run(kill_all()) == [404, 404]  # already gone
    for _child, forked, command in children:
        assert running_command(forked["pid"]) != command
    gone = children[0][0]
    with pytest.raises(TimeoutError, match="not healthy within 0.3s; last error: ClientConnectorError"):
        asyncio.run(client.wait_healthy(gone.ip, int(gone.worker_ports[0]), timeout=0.3, interval=0.05))


def test_fork_support_errors(shared_guard: Guard, client: GuardClient) -> None:
    worker = shared_guard.worker()

    with pytest.raises(PortAllocationError, match="HTTP 400: .*'count' must be a positive integer"):
        asyncio.run(client.alloc_ports(worker, 0))
    with pytest.raises(ForkError) as raised:  # AReaL's guard refuses an env it cannot apply
        asyncio.run(client.fork(worker, "ref", 0, ["true"], env={"A": 1}))  # type: ignore[dict-item]
    assert raised.value.status == 500 and "Internal server error" in raised.value.text
    unreachable = unreachable_worker()
    requests_to_nowhere: list[Callable[[], Coroutine[Any, Any, Any]]] = [
        lambda: client.alloc_ports(unreachable, 1),
        lambda: client.fork(unreachable, "ref", 0, ["true"]),
        lambda: client.kill_forked(unreachable, "ref", 0),
    ]
    for request in requests_to_nowhere:
        with pytest.raises(RPCConnectionError):
            asyncio.run(request())


def test_health(shared_guard: Guard, client: GuardClient) -> None:
    health = client.health(shared_guard.worker())

    assert health is not None and health["status"] == "healthy"
    assert client.health(unreachable_worker()) is None


# --------------------------------------------------------------------------- sessions and event loops


def test_each_event_loop_gets_its_own_session_closed_with_the_loop(
    shared_guard: Guard, client: GuardClient, caplog: pytest.LogCaptureFixture
) -> None:
    worker, engine_name = shared_guard.worker(), shared_guard.new_counter()
    sessions = []

    async def use_the_client() -> None:
        await client.async_call(worker, "increment", engine_name, [], {})
        await client.async_call(worker, "increment", engine_name, [], {})
        sessions.append(client._session())

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        asyncio.run(use_the_client())
        asyncio.run(use_the_client())
        assert sessions[0] is not sessions[1]
        assert all(session.closed for session in sessions)
        assert len(client._loop_sessions) == 0
        sessions.clear()
        gc.collect()

    assert client.call(worker, "value", engine_name, [], {}) == 4
    assert [str(w.message) for w in caught if "Unclosed" in str(w.message)] == []
    assert "Unclosed" not in caplog.text


def test_aclose_closes_the_current_loops_session(shared_guard: Guard, client: GuardClient) -> None:
    worker, engine_name = shared_guard.worker(), shared_guard.new_counter()

    async def scenario() -> None:
        await client.async_call(worker, "increment", engine_name, [], {})
        first = client._session()
        await client.aclose()
        assert first.closed
        await client.async_call(worker, "increment", engine_name, [], {})
        assert client._session() is not first

    asyncio.run(scenario())


def test_no_session_is_made_outside_a_running_loop(client: GuardClient) -> None:
    with pytest.raises(RuntimeError):
        client._session()


# --------------------------------------------------------------------------- mappings the guard never produces


def test_mappings_the_reference_guard_cannot_produce() -> None:
    worker = Worker(id="actor/0", ip="127.0.0.1", worker_ports=["1"])

    with pytest.raises(EngineCreationError) as raised:
        created_engine_result(worker, COUNTER, Reply(418, b"teapot"))
    assert (raised.value.reason, raised.value.status_code) == ("Unexpected status code: 418", 418)

    unavailable = call_outcome(worker, "m", 1, Reply(503, b'{"error": "busy"}'))
    assert isinstance(unavailable, Retryable) and unavailable.reason == "HTTP 503: busy"
    proxy_page = call_outcome(worker, "m", 1, Reply(502, b"<html>Bad Gateway</html>"))
    assert isinstance(proxy_page, Retryable) and proxy_page.reason == "HTTP 502: <html>Bad Gateway</html>"
    undecodable = call_outcome(worker, "m", 1, Reply(200, b"not json"))
    assert isinstance(undecodable, Retryable)
    assert undecodable.reason.startswith("Unexpected error: invalid reply body")
    assert call_outcome(worker, "m", 1, Reply(200, b'{"status": "success", "result": [1, 2]}')) == [1, 2]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_without_the_first_attempt_check_a_healthy_call_checks_nothing_but_retries_still_do(
    shared_guard: Guard, liveness: LivenessProbe, sleeps: Sleeps, mode: str
) -> None:
    client = GuardClient(
        liveness,
        connect_timeout=2.0,
        check_first_attempt=False,
        retry_sleep=sleeps.sync,
        async_retry_sleep=sleeps.async_,
    )
    try:
        engine = shared_guard.new_counter()
        worker = shared_guard.worker()
        call = client.call if mode == "sync" else (lambda *a, **k: asyncio.run(client.async_call(*a, **k)))
        assert call(worker, "increment", engine, [1], {}) == 1
        assert liveness.calls == []
        with pytest.raises(EngineCallError):
            call(worker, "value", "no-such-engine", [], {}, CallOptions(max_retries=2, retry_delay=0.01))
        assert liveness.calls == [worker.id]  # before the retry only
    finally:
        client.close()


# --------------------------------------------------------------------------- destroy before deletion


def test_destroy_engines_calls_each_workers_own_engine(guard: Guard, client: GuardClient, tmp_path: Path) -> None:
    """AReaL's Slurm scheduler POSTs /call {"method": "destroy", "engine_name": <worker id>} before it ends workers."""
    marker = tmp_path / "destroyed"
    created = guard.post(
        "/create_engine", {"engine": COUNTER, "engine_name": "actor/0", "init_kwargs": {"destroy_marker": str(marker)}}
    )
    assert created.status_code == 200, created.text
    failures = asyncio.run(client.destroy_engines([guard.worker("actor/0")], timeout=30.0))
    assert failures == {}
    assert marker.read_text() == "destroyed"
    assert guard.process.poll() is None  # the guard itself keeps running until its pod goes


def test_destroy_engines_reports_workers_without_such_engine_and_never_raises(
    guard: Guard, client: GuardClient
) -> None:
    failures = asyncio.run(client.destroy_engines([guard.worker("actor/1"), unreachable_worker()], timeout=30.0))
    assert set(failures) == {"actor/1", "actor/0"}
    assert failures["actor/1"].startswith("HTTP 404")


def test_destroy_engines_is_bounded_by_its_timeout(client: GuardClient) -> None:
    """A worker that accepts the connection but never answers does not hold the deletion up."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        worker = Worker(id="actor/0", ip="127.0.0.1", worker_ports=[str(silent.getsockname()[1])])
        failures = asyncio.run(client.destroy_engines([worker], timeout=0.5))
    assert failures == {"actor/0": "no reply within 0.5s"}


def test_no_connection_to_a_live_worker_carries_the_unreachable_note(client: GuardClient) -> None:
    """Refused or dropped connections get the note (the release's NetworkPolicy); an answer, even an error, does
    not."""
    notes: list[str] = []
    client.unreachable_note = lambda worker: notes.append(worker.id) or f"NetworkPolicy note for {worker.id}"
    worker = unreachable_worker()

    with pytest.raises(RPCConnectionError) as connecting:
        asyncio.run(client.create_engine(worker, COUNTER, "e", [], {}))
    assert f"NetworkPolicy note for {worker.id}" in connecting.value.__notes__
    with pytest.raises(EngineCallError) as calling:
        client.call(worker, "step", "e", [], {}, CallOptions(max_retries=2, retry_delay=0.0))
    assert f"NetworkPolicy note for {worker.id}" in calling.value.__notes__
    with pytest.raises(RPCConnectionError) as allocating:
        asyncio.run(client.alloc_ports(worker, 1))
    assert f"NetworkPolicy note for {worker.id}" in allocating.value.__notes__

    with socket.socket() as silent:  # accepts, never answers: a time-out, not a dropped connection
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        late = Worker(id="actor/1", ip="127.0.0.1", worker_ports=[str(silent.getsockname()[1])])
        with pytest.raises(EngineCreationError) as timing_out:
            asyncio.run(client.create_engine(late, COUNTER, "late", [], {}, timeout=0.2))
    assert not getattr(timing_out.value, "__notes__", []) and notes == [worker.id] * 3
