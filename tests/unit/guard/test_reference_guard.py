import functools
import getpass
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from guardlib import (
    BROKEN,
    COUNTER,
    EXIT_TIMEOUT,
    HTTP_TIMEOUT,
    STARTUP_TIMEOUT,
    ProcessJanitor,
    RunningGuard,
    guard_command,
    guard_env,
    janitor_for,
    launch_guard,
)
from localworker.reference_guard.cli import shut_down
from localworker.reference_guard.ports import PortAllocator
from localworker.reference_guard.routes import GuardIdentity, GuardState
from localworker.reference_guard.server import GuardServer


def pid_is_gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def janitor(request: pytest.FixtureRequest) -> ProcessJanitor:
    return janitor_for(request)


@pytest.fixture
def start_guard(janitor: ProcessJanitor, tmp_path: Path) -> Callable[..., RunningGuard]:
    return functools.partial(launch_guard, janitor, tmp_path)


@pytest.fixture
def guard(start_guard: Callable[..., RunningGuard]) -> RunningGuard:
    return start_guard()


@pytest.fixture(scope="module")
def shared_guard(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> RunningGuard:
    """One guard for the tests that only send invalid requests and so change no state."""
    return launch_guard(janitor_for(request), tmp_path_factory.mktemp("shared-guard"))


def assert_error(response: requests.Response, status: int, fragment: str = "") -> dict[str, Any]:
    """AReaL's error replies: {"error": message}, no "status"."""
    assert response.status_code == status, response.text
    body = response.json()
    assert "status" not in body
    assert fragment in body["error"], body["error"]
    return body


def serialized_config(**data: Any) -> dict[str, Any]:
    """A config as AReaL's serialize_value sends a dataclass."""
    return {"type": "dataclass", "class_path": "exp.Config", "data": data}


def create_counter(guard: RunningGuard, engine_name: str = "counter", **init_kwargs: Any) -> None:
    response = guard.post(
        "/create_engine",
        {"engine": COUNTER, "engine_name": engine_name, "init_args": [], "init_kwargs": init_kwargs},
    )
    assert response.status_code == 200, response.text


def call(guard: RunningGuard, method: str, *args: Any, engine_name: str = "counter", **kwargs: Any) -> Any:
    response = guard.post(
        "/call",
        {"method": method, "engine_name": engine_name, "args": list(args), "kwargs": kwargs, "rpc_meta": None},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["status"] == "success"
    return body["result"]


def fork(guard: RunningGuard, janitor: ProcessJanitor, role: str, command: list[str], **extra: Any) -> dict:
    response = guard.post("/fork", {"role": role, "worker_index": 0, "raw_cmd": command, **extra})
    assert response.status_code == 200, response.text
    body = response.json()
    janitor.track_forked(body["pid"], command)
    return body


def sleeper_command(seconds: int = 60) -> list[str]:
    return [sys.executable, "-c", f"import time; time.sleep({seconds})"]


# --------------------------------------------------------------------------- CLI and /health


def test_health_reports_identity_and_requests_are_logged(guard: RunningGuard) -> None:
    health = guard.health()

    assert health["status"] == "healthy"
    assert health["forked_children"] == 0
    assert health["engine_count"] == 0 and health["engines"] == []
    assert (health["role"], health["worker_index"]) == ("actor", 0)
    assert (health["host"], health["port"], health["pid"]) == ("127.0.0.1", guard.port, guard.process.pid)
    assert health["name_resolve"]["nfs_record_root"] == "/nonexistent/name_resolve"
    # The request's log line is written just after its reply.
    wait_until(
        lambda: re.search(r"GET /health 200 [0-9.]+ms", guard.stderr()) is not None,
        EXIT_TIMEOUT,
        "the request's log line",
    )


@pytest.mark.parametrize("drop_option", ["--role", "--experiment-name", "--trial-name", "--worker-index"])
def test_cli_requires_identity(drop_option: str) -> None:
    command = guard_command()
    position = command.index(drop_option)
    del command[position : position + 2]

    finished = subprocess.run(command, env=guard_env(), capture_output=True, timeout=EXIT_TIMEOUT)

    assert finished.returncode == 2
    assert finished.stdout == b""


def test_guard_binds_the_given_loopback_address(start_guard: Callable[..., RunningGuard]) -> None:
    pod_guard = start_guard(host="127.3.0.7", role="rollout", worker_index=5)

    assert pod_guard.host == "127.3.0.7"
    health = pod_guard.health()
    assert (health["host"], health["role"], health["worker_index"]) == ("127.3.0.7", "rollout", 5)
    allocation = pod_guard.post("/alloc_ports", {"count": 2}).json()
    assert allocation["host"] == "127.3.0.7"
    for port in allocation["ports"]:
        with socket.socket() as probe:
            probe.bind(("127.3.0.7", port))


def test_unknown_endpoint_is_404_and_wrong_method_is_405(shared_guard: RunningGuard) -> None:
    assert_error(shared_guard.get("/nope"), 404, "/nope")
    assert_error(shared_guard.get("/alloc_ports"), 405)
    assert_error(shared_guard.post("/health", {}), 405)


# --------------------------------------------------------------------------- /alloc_ports


def test_alloc_ports_returns_distinct_bindable_ports(guard: RunningGuard) -> None:
    first = guard.post("/alloc_ports", {"count": 3})
    second = guard.post("/alloc_ports", {"count": 4})

    assert first.status_code == second.status_code == 200
    assert first.json()["status"] == "success" and first.json()["host"] == "127.0.0.1"
    assert first.json()["ports"] == sorted(first.json()["ports"])
    ports = first.json()["ports"] + second.json()["ports"]
    assert len(ports) == 7 and len(set(ports)) == 7
    assert guard.port not in ports
    assert all(10000 <= port <= 32767 for port in ports)  # AReaL's range, below the ephemeral ports
    for port in ports:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", port))


@pytest.mark.parametrize("body", [{}, {"count": 0}, {"count": -2}, {"count": "2"}, {"count": 1.5}, {"count": None}])
def test_alloc_ports_rejects_invalid_count(shared_guard: RunningGuard, body: Any) -> None:
    assert_error(shared_guard.post("/alloc_ports", body), 400)


def test_alloc_ports_quirks_follow_areal(shared_guard: RunningGuard) -> None:
    # isinstance(True, int): AReaL hands out one port.
    assert len(shared_guard.post("/alloc_ports", {"count": True}).json()["ports"]) == 1
    assert_error(shared_guard.post("/alloc_ports", {"count": 10**6}), 500, "Cannot find 1000000 ports")


def test_invalid_json_body_is_400(shared_guard: RunningGuard) -> None:
    assert_error(shared_guard.post_raw("/alloc_ports", b"{not json"), 400, "Invalid JSON")
    assert_error(shared_guard.post_raw("/alloc_ports", b""), 400, "Invalid JSON")


def test_bodies_are_json_only_with_a_json_content_type(shared_guard: RunningGuard) -> None:
    """Flask's get_json(silent=True): the guard routes refuse the body, the engine routes see no fields."""
    valid = b'{"count": 1}'
    assert_error(shared_guard.post_raw("/alloc_ports", valid), 400, "Invalid JSON")
    typed = requests.post(
        shared_guard.url + "/alloc_ports",
        data=valid,
        headers={"Content-Type": "application/json; charset=utf-8"},
        timeout=HTTP_TIMEOUT,
    )
    assert typed.status_code == 200, typed.text
    assert_error(shared_guard.post_raw("/call", b'{"method": "value", "engine_name": "e"}'), 400, "'method'")


@pytest.mark.parametrize("path", ["/alloc_ports", "/set_env", "/create_engine", "/call"])
def test_a_json_body_that_is_not_an_object_is_500(shared_guard: RunningGuard, path: str) -> None:
    assert_error(shared_guard.post(path, [1]), 500, "Internal server error")


# --------------------------------------------------------------------------- /fork and /kill_forked_worker


def test_fork_starts_a_guard_that_kill_forked_worker_stops(
    start_guard: Callable[..., RunningGuard], janitor: ProcessJanitor, tmp_path: Path
) -> None:
    fileroot = tmp_path / "fileroot"
    parent = start_guard(fileroot=fileroot)
    port = parent.post("/alloc_ports", {"count": 1}).json()["ports"][0]
    child_command = guard_command(port=port, role="ref", fileroot=fileroot)

    forked = fork(parent, janitor, "ref", child_command, env={"AREAL_WORKERS_TEST_MARK": "from-fork"})

    assert forked["status"] == "success" and forked["host"] == "127.0.0.1"
    child = RunningGuard(parent.process, forked["host"], port, parent.stderr_path)
    wait_until(lambda: child_answers_health(child), STARTUP_TIMEOUT, "the forked guard's /health")
    child_health = child.health()
    assert (child_health["role"], child_health["pid"]) == ("ref", forked["pid"])
    create_counter(child)
    assert call(child, "env", "AREAL_WORKERS_TEST_MARK") == "from-fork"
    parent_health = parent.health()
    assert parent_health["forked_children"] == 1
    assert parent_health["forked"][0]["pid"] == forked["pid"] and parent_health["forked"][0]["alive"]
    # AReaL's layout and streams: <fileroot>/logs/<user>/<experiment>/<trial>/<role>.log, merged.log, stdout.
    [child_log] = fileroot.rglob("ref.log")
    assert child_log.parent == fileroot / "logs" / getpass.getuser() / "exp" / "trial"
    assert "areal-guard listening on" in child_log.read_text()
    merged_line = "[ref]".ljust(10) + "areal-guard listening on"
    wait_until(
        lambda: merged_line in (child_log.parent / "merged.log").read_text(),
        STARTUP_TIMEOUT,
        "the child's output in merged.log",
    )
    assert "areal-guard listening on" in "".join(parent.stdout().splitlines(keepends=True)[1:])

    killed = parent.post("/kill_forked_worker", {"role": "ref", "worker_index": 0})
    assert killed.status_code == 200, killed.text
    assert killed.json()["status"] == "success"
    assert pid_is_gone(forked["pid"])
    assert not child_answers_health(child)
    assert parent.health()["forked_children"] == 0
    assert_error(parent.post("/kill_forked_worker", {"role": "ref", "worker_index": 0}), 404, "not found")


def child_answers_health(child: RunningGuard) -> bool:
    try:
        return requests.get(child.url + "/health", timeout=1.0).status_code == 200
    except requests.ConnectionError:
        return False


def test_a_second_fork_of_a_key_replaces_it_as_in_areal(guard: RunningGuard, janitor: ProcessJanitor) -> None:
    """AReaL keeps every child in its list (forked_children counts both) and the newest in its map,
    so /kill_forked_worker stops the newest; the older one is stopped at shutdown."""
    first = fork(guard, janitor, "twice", sleeper_command())
    second = fork(guard, janitor, "twice", sleeper_command())
    assert second["pid"] != first["pid"]
    assert guard.health()["forked_children"] == 2

    assert guard.post("/kill_forked_worker", {"role": "twice", "worker_index": 0}).status_code == 200
    assert pid_is_gone(second["pid"]) and not pid_is_gone(first["pid"])
    assert guard.health()["forked_children"] == 1
    assert_error(guard.post("/kill_forked_worker", {"role": "twice", "worker_index": 0}), 404)

    guard.process.send_signal(signal.SIGTERM)
    assert guard.process.wait(timeout=EXIT_TIMEOUT) == 0
    assert pid_is_gone(first["pid"])


def test_kill_of_a_child_that_already_exited_succeeds(guard: RunningGuard, janitor: ProcessJanitor) -> None:
    fork(guard, janitor, "short", [sys.executable, "-c", "pass"])
    wait_until(lambda: not guard.health()["forked"][0]["alive"], EXIT_TIMEOUT, "the short child to exit")
    assert guard.health()["forked"][0]["exit_code"] == 0

    assert guard.post("/kill_forked_worker", {"role": "short", "worker_index": 0}).status_code == 200
    assert guard.health()["forked_children"] == 0


def test_kill_forked_worker_escalates_to_sigkill(
    start_guard: Callable[..., RunningGuard], janitor: ProcessJanitor, tmp_path: Path
) -> None:
    parent = start_guard(fileroot=tmp_path / "fileroot")
    stubborn = [
        sys.executable,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); "
        "time.sleep(60)",
    ]
    forked = fork(parent, janitor, "stubborn", stubborn)
    wait_until(
        lambda: any("ready" in log.read_text() for log in (tmp_path / "fileroot").rglob("stubborn.log")),
        STARTUP_TIMEOUT,
        "the stubborn child to ignore SIGTERM",
    )

    started = time.monotonic()
    killed = parent.post("/kill_forked_worker", {"role": "stubborn", "worker_index": 0})

    assert killed.status_code == 200, killed.text
    assert time.monotonic() - started >= 2.5  # it waited out the SIGTERM grace period
    assert pid_is_gone(forked["pid"])


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"worker_index": 0, "raw_cmd": ["true"]}, "'role'"),
        ({"role": "r", "raw_cmd": ["true"]}, "'worker_index'"),
        ({"role": "r", "worker_index": [0], "raw_cmd": ["true"]}, "'worker_index'"),
        ({"role": "r", "worker_index": 0}, "'raw_cmd'"),
        ({"role": "r", "worker_index": 0, "raw_cmd": "true"}, "'raw_cmd'"),
    ],
)
def test_fork_rejects_bad_requests(shared_guard: RunningGuard, body: dict, fragment: str) -> None:
    assert_error(shared_guard.post("/fork", body), 400, fragment)


@pytest.mark.parametrize("env", [["A=1"], None, {"A": 1}, {"A=B": "1"}])
def test_fork_with_an_unusable_env_is_500(shared_guard: RunningGuard, env: Any) -> None:
    response = shared_guard.post("/fork", {"role": "bad-env", "worker_index": 0, "raw_cmd": ["true"], "env": env})

    assert_error(response, 500, "Internal server error")
    assert shared_guard.health()["forked_children"] == 0


def test_fork_of_a_missing_executable_starts_a_child_that_exits_127(
    guard: RunningGuard, janitor: ProcessJanitor, tmp_path: Path
) -> None:
    """AReaL starts every fork through a shell, so the fork succeeds and the child fails."""
    forked = fork(guard, janitor, "missing", ["/nonexistent/worker", "--flag"])

    wait_until(lambda: not guard.health()["forked"][0]["alive"], EXIT_TIMEOUT, "the child to exit")
    assert guard.health()["forked"][0]["exit_code"] == 127
    [log] = tmp_path.rglob("missing.log")
    assert "/nonexistent/worker" in log.read_text()
    assert forked["status"] == "success"


def test_fork_of_an_empty_command_succeeds(guard: RunningGuard, janitor: ProcessJanitor) -> None:
    fork(guard, janitor, "empty", [])

    wait_until(lambda: not guard.health()["forked"][0]["alive"], EXIT_TIMEOUT, "the child to exit")
    assert guard.health()["forked"][0]["exit_code"] == 0


def test_kill_forked_worker_rejects_bad_requests(shared_guard: RunningGuard) -> None:
    assert_error(shared_guard.post("/kill_forked_worker", {"worker_index": 0}), 400, "'role'")
    assert_error(shared_guard.post("/kill_forked_worker", {"role": "r"}), 400, "'worker_index'")
    assert_error(shared_guard.post("/kill_forked_worker", {"role": "never", "worker_index": 3}), 404, "never/3")


# --------------------------------------------------------------------------- /set_env and /configure


def test_set_env_is_visible_to_engines_created_later(guard: RunningGuard) -> None:
    response = guard.post("/set_env", {"env": {"RANK": "3", "WORLD_SIZE": 8}})

    assert response.status_code == 200 and response.json() == {"status": "success"}
    create_counter(guard)
    assert call(guard, "env", "RANK") == "3"
    assert call(guard, "env", "WORLD_SIZE") == "8"
    assert call(guard, "env", "AREAL_WORKERS_NEVER_SET") is None


def test_set_env_rejects_bad_requests(shared_guard: RunningGuard) -> None:
    assert_error(shared_guard.post("/set_env", {}), 400, "'env'")
    assert_error(shared_guard.post("/set_env", {"env": ["RANK=0"]}), 400, "'env'")
    assert_error(shared_guard.post("/set_env", {"env": {"A=B": "1"}}), 500, "illegal environment variable name")


def test_set_env_does_not_wait_for_a_running_engine_call(guard: RunningGuard) -> None:
    """AReaL's guard-level /set_env shadows the engine blueprint's serialized one."""
    create_counter(guard)
    sleeper = threading.Thread(target=call, args=(guard, "sleep", 3.0))
    sleeper.start()
    try:
        time.sleep(0.5)  # the call reaches the engine thread (if not, the test passes without proving much)
        assert guard.post("/set_env", {"env": {"AREAL_WORKERS_DURING_CALL": "1"}}).status_code == 200
        assert sleeper.is_alive()  # set_env answered while the engine thread was still busy
    finally:
        sleeper.join(timeout=HTTP_TIMEOUT)
    assert call(guard, "env", "AREAL_WORKERS_DURING_CALL") == "1"


def test_configure_stores_the_configuration(guard: RunningGuard) -> None:
    response = guard.post("/configure", {"config": serialized_config(seed=1), "role": "other", "rank": 2})

    assert response.status_code == 200, response.text
    assert response.json() == {"status": "success", "message": "Worker configured successful.", "result": None}
    # AReaL seeds with the guard's own role, whatever the controller sends.
    assert guard.health()["configured"] == {"role": "actor", "rank": 2}


@pytest.mark.parametrize(
    ("body", "status", "fragment"),
    [
        ({"role": "actor", "rank": 0}, 400, "'config'"),
        ({"config": serialized_config(seed=1), "role": "actor"}, 400, "'rank'"),
        ({"config": {"seed": 1}, "rank": 0}, 500, "'dict' object has no attribute 'seed'"),
        ({"config": serialized_config(name="x"), "rank": 0}, 500, "no attribute 'seed'"),
        ({"config": 5, "rank": 0}, 500, "'int' object has no attribute 'seed'"),
    ],
)
def test_configure_needs_a_dataclass_config_with_a_seed(
    shared_guard: RunningGuard, body: dict, status: int, fragment: str
) -> None:
    assert_error(shared_guard.post("/configure", body), status, fragment)


# --------------------------------------------------------------------------- /create_engine


def test_create_engine_registers_the_engine(guard: RunningGuard) -> None:
    response = guard.post(
        "/create_engine",
        {"engine": COUNTER, "engine_name": "actor/0", "init_args": [10], "init_kwargs": {}},
    )

    assert response.status_code == 200, response.text
    assert response.json()["status"] == "success" and response.json()["engine_name"] == "actor/0"
    health = guard.health()
    assert (health["engine_count"], health["engines"]) == (1, ["actor/0"])
    assert call(guard, "value", engine_name="actor/0") == 10


def test_create_engine_rejects_a_duplicate_name(guard: RunningGuard) -> None:
    create_counter(guard, "dup")

    assert_error(guard.post("/create_engine", {"engine": COUNTER, "engine_name": "dup"}), 400, "already exists")
    assert guard.health()["engine_count"] == 1


@pytest.mark.parametrize(
    "import_path",
    ["no_such_module_anywhere.Engine", "localworker.engines.NoSuchClass", "NoDotsAtAll"],
)
def test_create_engine_reports_import_failures_as_400(shared_guard: RunningGuard, import_path: str) -> None:
    response = shared_guard.post("/create_engine", {"engine": import_path, "engine_name": "e"})

    assert_error(response, 400, "Failed to import")
    assert shared_guard.health()["engine_count"] == 0


def test_create_engine_reports_a_failing_constructor_as_500(shared_guard: RunningGuard) -> None:
    response = shared_guard.post("/create_engine", {"engine": BROKEN, "engine_name": "broken"})

    assert_error(response, 500, "Failed to instantiate engine: Broken engine refuses to start")
    assert shared_guard.health()["engine_count"] == 0


@pytest.mark.parametrize(
    "body",
    [
        {"engine_name": "e"},
        {"engine": COUNTER},
        {"engine": COUNTER, "engine_name": ""},
        {"engine": COUNTER, "engine_name": "e", "init_args": {"a": 1}},
        {"engine": COUNTER, "engine_name": "e", "init_kwargs": [1]},
        {"engine": COUNTER, "engine_name": "e", "init_args": None},
        {"engine": "os.path.join", "engine_name": "e"},
    ],
)
def test_create_engine_rejects_invalid_requests(shared_guard: RunningGuard, body: dict) -> None:
    assert_error(shared_guard.post("/create_engine", body), 400)


# --------------------------------------------------------------------------- /call


def test_call_invokes_engine_methods(guard: RunningGuard) -> None:
    create_counter(guard)

    assert call(guard, "increment") == 1
    assert call(guard, "increment", n=5) == 6
    assert call(guard, "increment", 4) == 10
    assert call(guard, "value") == 10
    assert call(guard, "pid") == guard.process.pid


def test_call_error_statuses(guard: RunningGuard) -> None:
    create_counter(guard)

    assert_error(guard.post("/call", {"method": "no_such_method", "engine_name": "counter"}), 400, "no_such_method")
    assert_error(guard.post("/call", {"method": "value", "engine_name": "ghost"}), 404, "ghost")
    assert_error(
        guard.post("/call", {"method": "fail", "engine_name": "counter", "args": ["boom from test"]}),
        500,
        "Engine method 'fail' failed: boom from test",
    )
    assert "RuntimeError: boom from test" in guard.stderr()  # the traceback goes to the log
    # A non-callable attribute is called, as AReaL does.
    assert_error(guard.post("/call", {"method": "_count", "engine_name": "counter"}), 500, "not callable")
    assert_error(guard.post("/call", {"engine_name": "counter"}), 400, "'method'")
    assert_error(guard.post("/call", {"method": "value"}), 400, "'engine_name'")
    assert_error(guard.post("/call", {"method": "value", "engine_name": "counter", "args": 1}), 400, "'args'")
    assert_error(guard.post("/call", {"method": "value", "engine_name": "counter", "args": None}), 400, "'args'")
    assert_error(guard.post("/call", {"method": "value", "engine_name": "counter", "rpc_meta": 1}), 400, "rpc_meta")
    bad_broadcast = {"method": "value", "engine_name": "counter", "rpc_meta": {"broadcast": "yes"}}
    assert_error(guard.post("/call", bad_broadcast), 500, "Invalid rpc_meta.broadcast")
    assert_error(guard.post("/call", {**bad_broadcast, "engine_name": "ghost"}), 404, "ghost")
    assert call(guard, "value") == 0  # the engine survived all of that


def test_health_answers_while_an_engine_call_runs(guard: RunningGuard) -> None:
    create_counter(guard)
    slept: list[float] = []
    sleeper = threading.Thread(target=lambda: slept.append(call(guard, "sleep", 3.0)))
    sleeper.start()
    try:
        time.sleep(0.2)
        started = time.monotonic()
        assert guard.health()["engine_count"] == 1
        assert not slept  # answered while the engine call still ran
        # Engine work is serial, as in AReaL: this call waits for the sleep to finish.
        assert call(guard, "increment") == 1
        assert time.monotonic() - started > 0.6
    finally:
        sleeper.join(timeout=HTTP_TIMEOUT)
    assert slept and slept[0] >= 1.0


# --------------------------------------------------------------------------- shutdown


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stop_signal_destroys_engines_and_kills_children(
    guard: RunningGuard, janitor: ProcessJanitor, tmp_path: Path, signum: signal.Signals
) -> None:
    marker = tmp_path / "destroyed.txt"
    create_counter(guard, destroy_marker=str(marker))
    forked = fork(guard, janitor, "helper", sleeper_command())
    assert not pid_is_gone(forked["pid"])

    guard.process.send_signal(signum)

    assert guard.process.wait(timeout=EXIT_TIMEOUT) == 0
    assert marker.read_text() == "destroyed"
    assert pid_is_gone(forked["pid"])
    assert f"received {signum.name}" in guard.stderr()


# --------------------------------------------------------------------------- replies on the wire


class SendRecorder:
    """Stands in for an accepted socket: records each send, and whether TCP_NODELAY was on for it."""

    def __init__(self, connection: socket.socket, sends: list[tuple[bytes, bool]]) -> None:
        self._connection = connection
        self._sends = sends

    def _record(self, data: bytes) -> None:
        nodelay = self._connection.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
        self._sends.append((bytes(data), nodelay))

    def sendall(self, data: bytes, *flags: int) -> None:
        self._record(data)
        self._connection.sendall(data, *flags)

    def send(self, data: bytes, *flags: int) -> int:
        sent = self._connection.send(data, *flags)
        self._record(data[:sent])
        return sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._connection, name)


@pytest.fixture
def recording_server() -> Iterator[tuple[GuardServer, list[tuple[bytes, bool]]]]:
    """A guard served in this process whose accepted sockets record what the guard sends."""
    sends: list[tuple[bytes, bool]] = []

    class RecordingServer(GuardServer):
        def get_request(self) -> tuple[Any, Any]:
            connection, address = super().get_request()
            return SendRecorder(connection, sends), address

    identity = GuardIdentity(
        experiment_name="exp",
        trial_name="trial",
        role="actor",
        worker_index=0,
        name_resolve_type="nfs",
        nfs_record_root="/nonexistent/name_resolve",
        etcd3_addr="127.0.0.1:2379",
        fileroot=None,
    )

    def new_state(port: int) -> GuardState:
        ports = PortAllocator("127.0.0.1")
        ports.hold(port)
        return GuardState(identity=identity, host="127.0.0.1", port=port, ports=ports)

    server = RecordingServer("127.0.0.1", 0, new_state)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    serving.start()
    try:
        yield server, sends
    finally:
        server.shutdown()
        shut_down(server.state)
        server.server_close()


def test_each_reply_is_one_send_on_a_no_delay_socket(
    recording_server: tuple[GuardServer, list[tuple[bytes, bool]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reply written as headers, then body, on a keep-alive connection waits for the client's
    delayed ACK of the first write (Nagle's algorithm): every request took ~44 ms instead of < 1 ms
    (bench/results/reference-guard-latency.md).  Every reply must be a single send, on a socket with
    TCP_NODELAY set for the replies http.server writes itself."""
    server, sends = recording_server
    monkeypatch.setenv("AREAL_WORKERS_REPLY_TEST", "before")  # /set_env changes this process's environment
    exchanges = [
        ("GET", "/health", None),
        ("POST", "/set_env", {"env": {"AREAL_WORKERS_REPLY_TEST": "after"}}),
        ("POST", "/alloc_ports", {"count": 0}),  # an error reply
    ] * 5
    connection = http.client.HTTPConnection("127.0.0.1", server.server_address[1], timeout=HTTP_TIMEOUT)
    try:
        for number, (method, path, body) in enumerate(exchanges, 1):
            encoded = None if body is None else json.dumps(body).encode()
            connection.request(method, path, body=encoded, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            payload = response.read()

            assert not response.will_close  # one persistent connection throughout
            assert len(sends) == number, f"reply {number} ({method} {path}) was written in several sends: {sends}"
            data, nodelay = sends[-1]
            assert data.startswith(b"HTTP/1.1 ") and data.endswith(b"\r\n\r\n" + payload)
            assert nodelay
    finally:
        connection.close()
    assert os.environ["AREAL_WORKERS_REPLY_TEST"] == "after"
