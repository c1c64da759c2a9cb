"""AReaL's real worker server and our stand-in (localworker.reference_guard) answer requests alike.

Both run on 127.0.0.1 with the same flags: `python -m areal.infra.rpc.rpc_server` of areal 1.0.4 (the
interpreter `make areal-worker` installs as .tools/areal-worker/bin/python) and `python -m
localworker.reference_guard`.  Every request goes to both, and the answers must agree on what the adapter
reads: the status code; on success AReaL's keys (ours may add keys only to /health), their values where they
are deterministic and "status"; on errors the keys and, unless AReaL's text comes from pydantic or Python's
own exception text for a type we name differently, the "error" text, and always whether it says "Failed to
import" (the adapter's EngineImportError).  The differences that remain are pinned in
test_the_known_differences_remain and listed in the docstring of tools/localworker/reference_guard.

AReaL's /create_engine takes only TrainEngine subclasses, so the engines differ by path:
localworker.areal_engines.Counter on AReaL, localworker.engines.Counter on ours (the same probes).

Marked `areal_worker`: it needs AReaL's environment and fails, not skips, without it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests

from repo_paths import AREAL_WORKER_PYTHON, LOCALWORKER_PATH

pytestmark = pytest.mark.areal_worker

STARTUP_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
HTTP_TIMEOUT = 60.0
LOG_TIMEOUT = 20.0
ABSENT = object()
JSON = "application/json"
BANNER = "areal-guard listening on "

# Importable by both servers (PYTHONPATH), written into the run's temporary directory.
HELPER_MODULES = {
    "conformance_helpers.py": (
        "from dataclasses import dataclass\n\n\n"
        "@dataclass\nclass Config:\n    seed: int = 1\n    name: str = ''\n\n\n"
        "@dataclass\nclass NoSeed:\n    name: str = ''\n"
    ),
    "conformance_import_raises.py": "raise RuntimeError('this module refuses to be imported')\n",
    "conformance_import_type_error.py": "raise TypeError('this module has a type error at import time')\n",
}


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any] | None  # None: not a JSON object (werkzeug's HTML error pages)
    text: str
    closes: bool

    @property
    def error(self) -> str:
        assert self.body is not None and "error" in self.body, self.text
        return str(self.body["error"])


@dataclass
class Server:
    name: str
    process: subprocess.Popen[bytes]
    url: str
    workdir: Path
    counter: str  # import path of the Counter engine on this server
    broken: str

    def send(
        self, method: str, path: str, body: Any = ABSENT, raw: bytes | None = None, content_type: str | None = JSON
    ) -> Answer:
        data = raw if raw is not None else (None if body is ABSENT else json.dumps(body).encode())
        headers = {"Content-Type": content_type} if content_type and data is not None else {}
        response = requests.request(method, self.url + path, data=data, headers=headers, timeout=HTTP_TIMEOUT)
        try:
            decoded = response.json()
        except ValueError:
            decoded = None
        return Answer(
            response.status_code,
            decoded if isinstance(decoded, dict) else None,
            response.text,
            response.headers.get("Connection", "").lower() == "close",
        )

    def log_dir(self) -> Path:
        """AReaL's fork log directory: <fileroot>/logs/<user>/<experiment>/<trial>."""
        [directory] = (self.workdir / "logs").glob("*/e/t")
        return directory

    def output(self) -> str:
        return (self.workdir / "server.log").read_text(errors="replace")


@dataclass
class Pair:
    areal: Server
    ours: Server
    # Engines only ours created (AReaL refused them): left out where engine lists are compared.
    ours_only_engines: set[str]

    def both(self) -> tuple[Server, Server]:
        return self.areal, self.ours

    def exchange(
        self,
        method: str,
        path: str,
        body: Any = ABSENT,
        *,
        per_server: Callable[[Server], Any] | None = None,
        **options: Any,
    ) -> tuple[Answer, Answer]:
        answers = []
        for server in self.both():
            payload = per_server(server) if per_server is not None else body
            answers.append(server.send(method, path, payload, **options))
        return answers[0], answers[1]

    def same(
        self,
        method: str,
        path: str,
        body: Any = ABSENT,
        *,
        text: bool = True,
        values: tuple[str, ...] = (),
        per_server: Callable[[Server], Any] | None = None,
        **options: Any,
    ) -> tuple[Answer, Answer]:
        """Sends the request to both and asserts the answers agree (see the module docstring); ``text=False``
        compares error replies without their text, ``values`` lists success keys whose values must be equal."""
        areal, ours = self.exchange(method, path, body, per_server=per_server, **options)
        shown = (
            f"{method} {path} {body if body is not ABSENT else options.get('raw')!r}\n"
            f"  AReaL: {areal.status} {areal.text.strip()[:500]}\n  ours:  {ours.status} {ours.text.strip()[:500]}"
        )
        assert ours.status == areal.status, shown
        assert areal.body is not None and ours.body is not None, shown
        if areal.status == 200:
            assert set(areal.body) <= set(ours.body), shown
            if path != "/health":
                assert set(ours.body) == set(areal.body), shown
            assert ours.body.get("status") == areal.body.get("status"), shown
            for key in values:
                assert ours.body[key] == areal.body[key], shown
        else:
            assert set(ours.body) == set(areal.body) and "status" not in areal.body, shown
            assert ("Failed to import" in ours.error) == ("Failed to import" in areal.error), shown
            if text:
                assert self.comparable(ours.error) == self.comparable(areal.error), shown
        return areal, ours

    def comparable(self, message: str) -> str:
        for name in self.ours_only_engines:
            message = message.replace(f"'{name}', ", "").replace(f", '{name}'", "").replace(f"'{name}'", "")
        return message

    def health(self) -> tuple[dict[str, Any], dict[str, Any]]:
        areal, ours = self.same("GET", "/health")
        assert areal.body is not None and ours.body is not None
        return areal.body, ours.body


def areal_python() -> Path:
    if not AREAL_WORKER_PYTHON.exists():
        pytest.fail(
            f"AReaL's worker environment is missing ({AREAL_WORKER_PYTHON}): `make areal-worker` installs it "
            "(areal 1.0.4 on CPU torch, about 7 GB)",
            pytrace=False,
        )
    return AREAL_WORKER_PYTHON


def server_flags(workdir: Path) -> list[str]:
    return [
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--experiment-name",
        "e",
        "--trial-name",
        "t",
        "--role",
        "r",
        "--worker-index",
        "0",
        "--name-resolve-type",
        "nfs",
        "--nfs-record-root",
        str(workdir / "nr"),
        "--fileroot",
        str(workdir),
    ]


def launch(python: Path | str, module: str, pythonpath: list[Path], workdir: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(path) for path in pythonpath)}
    with (workdir / "server.log").open("wb") as log:
        return subprocess.Popen(
            [str(python), "-m", module, *server_flags(workdir)],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_for_address(process: subprocess.Popen[bytes], workdir: Path, find: Callable[[], str | None]) -> str:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while (address := find()) is None:
        log = (workdir / "server.log").read_text(errors="replace")[-3000:]
        if process.poll() is not None:
            pytest.fail(f"server exited with {process.returncode}:\n{log}", pytrace=False)
        if time.monotonic() > deadline:
            pytest.fail(f"server did not start within {STARTUP_TIMEOUT}s:\n{log}", pytrace=False)
        time.sleep(0.1)
    return f"http://{address}"


def name_resolve_address(workdir: Path) -> str | None:
    """AReaL registers "ip:port" in name_resolve (nfs: <root>/<user>/e/t/workers/r/0/ENTRY) once it listens."""
    entries = list((workdir / "nr").glob("*/e/t/workers/r/0/ENTRY"))
    return entries[0].read_text().strip() or None if entries else None


def banner_address(workdir: Path) -> str | None:
    first_line = (workdir / "server.log").read_text(errors="replace").partition("\n")[0]
    return first_line.removeprefix(BANNER) if first_line.startswith(BANNER) else None


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)  # both stop their forked children on SIGTERM
    try:
        process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pair]:
    python = areal_python()
    helpers = tmp_path_factory.mktemp("helpers")
    for name, source in HELPER_MODULES.items():
        (helpers / name).write_text(source)
    areal_dir, ours_dir = tmp_path_factory.mktemp("areal"), tmp_path_factory.mktemp("ours")
    processes = [
        launch(python, "areal.infra.rpc.rpc_server", [LOCALWORKER_PATH, helpers], areal_dir),
        launch(sys.executable, "localworker.reference_guard", [LOCALWORKER_PATH, helpers], ours_dir),
    ]
    try:
        areal_url = wait_for_address(processes[0], areal_dir, lambda: name_resolve_address(areal_dir))
        ours_url = wait_for_address(processes[1], ours_dir, lambda: banner_address(ours_dir))
        yield Pair(
            Server(
                "AReaL",
                processes[0],
                areal_url,
                areal_dir,
                "localworker.areal_engines.Counter",
                "localworker.areal_engines.Broken",
            ),
            Server(
                "ours",
                processes[1],
                ours_url,
                ours_dir,
                "localworker.engines.Counter",
                "localworker.engines.Broken",
            ),
            set(),
        )
    finally:
        for process in processes:
            stop(process)


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + LOG_TIMEOUT
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {LOG_TIMEOUT}s waiting for {what}")
        time.sleep(0.1)


def serialized(class_name: str, **data: Any) -> dict[str, Any]:
    """A dataclass as AReaL's serialize_value puts it on the wire."""
    return {"type": "dataclass", "class_path": f"conformance_helpers.{class_name}", "data": data}


# --------------------------------------------------------------------------- /health and bodies


def test_health_answers_alike(pair: Pair) -> None:
    areal, ours = pair.health()
    assert areal["status"] == "healthy"
    for key, value in areal.items():
        if key == "engines":
            assert [name for name in ours[key] if name not in pair.ours_only_engines] == value
        elif key == "engine_count":
            assert ours[key] - len(pair.ours_only_engines) == value
        else:
            assert ours[key] == value, key


@pytest.mark.parametrize("path", ["/alloc_ports", "/fork", "/kill_forked_worker", "/set_env", "/configure"])
@pytest.mark.parametrize(
    ("raw", "content_type"),
    [(b"{not json", JSON), (b"", JSON), (b'{"count": 1}', None), (b'{"count": 1}', "text/plain"), (b"null", JSON)],
)
def test_guard_routes_refuse_bodies_that_are_not_json(
    pair: Pair, path: str, raw: bytes, content_type: str | None
) -> None:
    areal, _ = pair.same("POST", path, raw=raw, content_type=content_type)
    assert areal.status == 400


@pytest.mark.parametrize("path", ["/create_engine", "/call"])
@pytest.mark.parametrize(
    ("raw", "content_type"),
    [(b"{not json", JSON), (b'{"method": "value", "engine_name": "x"}', None), (b"null", JSON), (b"[]", JSON)],
)
def test_engine_routes_read_unusable_bodies_as_no_fields(
    pair: Pair, path: str, raw: bytes, content_type: str | None
) -> None:
    areal, _ = pair.same("POST", path, raw=raw, content_type=content_type, text=False)  # pydantic's text
    assert areal.status == 400


@pytest.mark.parametrize("path", ["/alloc_ports", "/set_env", "/configure", "/create_engine", "/call"])
def test_a_json_body_that_is_not_an_object_is_a_500(pair: Pair, path: str) -> None:
    areal, ours = pair.same("POST", path, [1], text=False)  # AReaL's text is its own AttributeError
    assert areal.status == 500
    assert ours.error.startswith("Internal server error: ") and areal.error.startswith("Internal server error: ")


def test_unknown_routes_and_methods(pair: Pair) -> None:
    for method, path, status in [("GET", "/nope", 404), ("POST", "/health", 405), ("GET", "/alloc_ports", 405)]:
        areal, ours = pair.exchange(method, path)
        assert areal.status == ours.status == status


# --------------------------------------------------------------------------- /alloc_ports


def test_alloc_ports_hands_out_ports_alike(pair: Pair) -> None:
    areal, ours = pair.same("POST", "/alloc_ports", {"count": 3}, values=("host",))
    for answer in (areal, ours):
        assert answer.body is not None
        ports = answer.body["ports"]
        assert len(set(ports)) == 3 and ports == sorted(ports)
        assert all(10000 <= port <= 32767 for port in ports)
    areal, ours = pair.same("POST", "/alloc_ports", {"count": True})  # isinstance(True, int)
    assert areal.body is not None and ours.body is not None
    assert len(areal.body["ports"]) == len(ours.body["ports"]) == 1


@pytest.mark.parametrize(
    "body",
    [{}, {"count": None}, {"count": 0}, {"count": -1}, {"count": "2"}, {"count": 1.5}, {"count": [2]}],
)
def test_alloc_ports_refuses_invalid_counts_alike(pair: Pair, body: dict[str, Any]) -> None:
    areal, _ = pair.same("POST", "/alloc_ports", body)
    assert areal.status == 400


def test_alloc_ports_beyond_the_range_is_a_500(pair: Pair) -> None:
    areal, ours = pair.same("POST", "/alloc_ports", {"count": 10**6}, text=False)  # counts held ports
    assert areal.status == 500
    for answer in (areal, ours):
        assert answer.error.startswith("Internal server error: Cannot find 1000000 ports in range (10000, 32767)")


# --------------------------------------------------------------------------- /set_env and /configure


def test_set_env_reaches_engines_alike(pair: Pair) -> None:
    pair.same("POST", "/set_env", {"env": {"CONFORMANCE_TEXT": "v", "CONFORMANCE_NUMBER": 5}})
    pair.same(
        "POST",
        "/create_engine",
        per_server=lambda s: {"engine": s.counter, "engine_name": "env-probe"},
        values=("message", "engine_name", "result"),
    )
    for name, value in [("CONFORMANCE_TEXT", "v"), ("CONFORMANCE_NUMBER", "5")]:
        areal, _ = pair.same(
            "POST", "/call", {"method": "env", "engine_name": "env-probe", "args": [name]}, values=("result",)
        )
        assert areal.body is not None and areal.body["result"] == value


@pytest.mark.parametrize(
    ("body", "status"),
    [
        ({}, 400),
        ({"env": None}, 400),
        ({"env": ["A=1"]}, 400),
        ({"env": {"A=B": "1"}}, 500),
        ({"env": {"": "1"}}, 500),
    ],
)
def test_set_env_refuses_alike(pair: Pair, body: dict[str, Any], status: int) -> None:
    areal, _ = pair.same("POST", "/set_env", body)
    assert areal.status == status


def test_configure_alike(pair: Pair) -> None:
    body = {"config": serialized("Config", seed=3, name="x"), "role": "r", "rank": 0}
    areal, _ = pair.same("POST", "/configure", body, values=("message", "result"))
    assert areal.status == 200


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        ({"role": "r", "rank": 0}, 400, True),
        ({"config": serialized("Config", seed=1), "role": "r"}, 400, True),
        ({"config": {"seed": 1}, "role": "r", "rank": 0}, 500, True),  # a plain dict: no attribute seed
        ({"config": 5, "role": "r", "rank": 0}, 500, True),
        # AReaL names the rebuilt class ('NoSeed' object has no attribute 'seed'), ours the dict.
        ({"config": serialized("NoSeed", name="x"), "role": "r", "rank": 0}, 500, False),
    ],
)
def test_configure_refuses_alike(pair: Pair, body: dict[str, Any], status: int, text: bool) -> None:
    areal, ours = pair.same("POST", "/configure", body, text=text)
    assert areal.status == status
    if status == 500:
        assert "object has no attribute 'seed'" in areal.error and "object has no attribute 'seed'" in ours.error


# --------------------------------------------------------------------------- /fork and /kill_forked_worker


def test_fork_and_kill_alike(pair: Pair) -> None:
    before, _ = pair.health()
    forks = {
        "first": pair.same(
            "POST", "/fork", {"role": "sleeper", "worker_index": 0, "raw_cmd": ["sleep", "60"]}, values=("host",)
        )
    }
    # AReaL replaces the entry of a second fork of the same key and keeps counting the first child.
    forks["second"] = pair.same("POST", "/fork", {"role": "sleeper", "worker_index": 0, "raw_cmd": ["sleep", "60"]})
    areal, ours = pair.health()
    assert areal["forked_children"] == ours["forked_children"] == before["forked_children"] + 2

    killed = pair.same("POST", "/kill_forked_worker", {"role": "sleeper", "worker_index": 0})
    for answer, forked in zip(killed, forks["second"]):
        assert answer.body is not None and forked.body is not None
        assert answer.body["message"] == f"Killed forked worker sleeper/0 (pid={forked.body['pid']})"
    pair.same("POST", "/kill_forked_worker", {"role": "sleeper", "worker_index": 0})  # 404 now
    pair.same("POST", "/kill_forked_worker", {"role": "never-forked", "worker_index": 3})
    areal, ours = pair.health()
    assert areal["forked_children"] == ours["forked_children"] == before["forked_children"] + 1


def test_a_fork_that_cannot_start_its_command_still_succeeds(pair: Pair) -> None:
    pair.same("POST", "/fork", {"role": "ghost", "worker_index": 0, "raw_cmd": ["/no/such/executable", "--x"]})
    for server in pair.both():
        # Both stream the failure into <role>.log and, prefixed, merged.log under --fileroot.
        wait_for(
            lambda: (
                (server.log_dir() / "ghost.log").is_file()
                and "/no/such/executable" in (server.log_dir() / "ghost.log").read_text(errors="replace")
            ),
            f"{server.name}'s ghost.log",
        )
        wait_for(
            lambda: "[ghost]   " in (server.log_dir() / "merged.log").read_text(errors="replace"),
            f"{server.name}'s merged.log",
        )
        assert "/no/such/executable" in server.output()  # and into the server's own output
    pair.same("POST", "/kill_forked_worker", {"role": "ghost", "worker_index": 0})  # 200: it already exited
    pair.same("POST", "/fork", {"role": "empty", "worker_index": 0, "raw_cmd": []})
    pair.same("POST", "/kill_forked_worker", {"role": "empty", "worker_index": 0})


def test_fork_keys_are_the_values_sent(pair: Pair) -> None:
    pair.same("POST", "/fork", {"role": 7, "worker_index": "0", "raw_cmd": ["sleep", 30]})
    pair.same("POST", "/kill_forked_worker", {"role": "7", "worker_index": "0"})  # 404: "7" is not 7
    areal, _ = pair.same("POST", "/kill_forked_worker", {"role": 7, "worker_index": "0"})
    assert areal.status == 200


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        ({"worker_index": 0, "raw_cmd": ["true"]}, 400, True),
        ({"role": "bad", "raw_cmd": ["true"]}, 400, True),
        ({"role": "bad", "worker_index": 0}, 400, True),
        ({"role": "bad", "worker_index": 0, "raw_cmd": ["true"], "env": None}, 500, False),
        ({"role": "bad", "worker_index": 0, "raw_cmd": ["true"], "env": ["A=1"]}, 500, False),
        ({"role": "bad", "worker_index": 0, "raw_cmd": ["true"], "env": {"A": 1}}, 500, True),
    ],
)
def test_fork_refuses_alike(pair: Pair, body: dict[str, Any], status: int, text: bool) -> None:
    areal, _ = pair.same("POST", "/fork", body, text=text)
    assert areal.status == status


@pytest.mark.parametrize("body", [{"worker_index": 0}, {"role": "r"}])
def test_kill_forked_worker_refuses_alike(pair: Pair, body: dict[str, Any]) -> None:
    areal, _ = pair.same("POST", "/kill_forked_worker", body)
    assert areal.status == 400


# --------------------------------------------------------------------------- /create_engine


def test_create_engine_alike(pair: Pair) -> None:
    create = {"engine_name": "counter", "init_args": [], "init_kwargs": {"start": 5}}
    pair.same(
        "POST",
        "/create_engine",
        per_server=lambda s: {**create, "engine": s.counter},
        values=("message", "engine_name", "result"),
    )
    areal, _ = pair.same("POST", "/create_engine", per_server=lambda s: {**create, "engine": s.counter})
    assert areal.status == 400 and "already exists" in areal.error
    areal, _ = pair.same("POST", "/create_engine", per_server=lambda s: {"engine": s.broken, "engine_name": "b"})
    assert areal.status == 500 and areal.error == "Failed to instantiate engine: Broken engine refuses to start"
    areal, ours = pair.health()
    assert "counter" in areal["engines"] and "b" not in ours["engines"]


@pytest.mark.parametrize(
    ("engine", "status"),
    [
        ("no_such_module_anywhere.Engine", 400),
        ("os.NoSuchClass", 400),
        ("NoDotsAtAll", 400),
        (".Leading", 400),
        ("os.path.join", 400),  # not a class
        ("conformance_import_raises.Engine", 500),  # its module raises at import
        ("conformance_import_type_error.Engine", 400),
    ],
)
def test_create_engine_import_failures_alike(pair: Pair, engine: str, status: int) -> None:
    areal, _ = pair.same("POST", "/create_engine", {"engine": engine, "engine_name": "never-created"})
    assert areal.status == status


@pytest.mark.parametrize(
    "body",
    [
        {"engine_name": "e"},
        {"engine": "x.Y"},
        {"engine": "", "engine_name": "e"},
        {"engine": "x.Y", "engine_name": ""},
        {"engine": "x.Y", "engine_name": "e", "init_args": None},
        {"engine": "x.Y", "engine_name": "e", "init_args": {"a": 1}},
        {"engine": "x.Y", "engine_name": "e", "init_kwargs": [1]},
    ],
)
def test_create_engine_validation_alike(pair: Pair, body: dict[str, Any]) -> None:
    areal, _ = pair.same("POST", "/create_engine", body, text=False)  # AReaL's text is pydantic's
    assert areal.status == 400


# --------------------------------------------------------------------------- /call


@pytest.fixture(scope="module")
def caller(pair: Pair) -> str:
    """An engine on both servers that the /call tests share."""
    pair.same(
        "POST",
        "/create_engine",
        per_server=lambda s: {"engine": s.counter, "engine_name": "caller", "init_kwargs": {"start": 10}},
    )
    return "caller"


@pytest.mark.parametrize(
    ("call", "status"),
    [
        ({"method": "value"}, 200),
        ({"method": "increment", "args": [2]}, 200),
        ({"method": "increment", "kwargs": {"n": 3}, "rpc_meta": None}, 200),
        ({"method": "increment", "rpc_meta": {"broadcast": False}}, 200),
        ({"method": "env", "args": ["CONFORMANCE_NEVER_SET"]}, 200),
        ({"method": "no_such_method"}, 400),
        ({"method": "_count"}, 500),  # an attribute that is not callable is called all the same
        ({"method": "fail"}, 500),
        ({"method": "fail", "args": ["boom"]}, 500),
        ({"method": "increment", "args": ["x"]}, 500),
        ({"method": "increment", "kwargs": {"bogus": 1}}, 500),
        ({"method": "increment", "rpc_meta": {"broadcast": "yes"}}, 500),
        ({"method": "increment", "engine_name": "ghost"}, 404),
        ({"method": "increment", "engine_name": "ghost", "rpc_meta": {"broadcast": "yes"}}, 404),
    ],
)
def test_call_alike(pair: Pair, caller: str, call: dict[str, Any], status: int) -> None:
    areal, _ = pair.same("POST", "/call", {"engine_name": caller, **call}, values=("result",) if status == 200 else ())
    assert areal.status == status


@pytest.mark.parametrize(
    "call",
    [
        {"engine_name": "caller"},
        {"method": "value"},
        {"method": "", "engine_name": "caller"},
        {"method": 5, "engine_name": "caller"},
        {"method": "value", "engine_name": "caller", "args": None},
        {"method": "value", "engine_name": "caller", "kwargs": None},
        {"method": "value", "engine_name": "caller", "args": {"a": 1}},
        {"method": "value", "engine_name": "caller", "rpc_meta": [1]},
        {"method": "value", "engine_name": "ghost", "args": None},  # validation before the engine lookup
    ],
)
def test_call_validation_alike(pair: Pair, caller: str, call: dict[str, Any]) -> None:
    areal, _ = pair.same("POST", "/call", call, text=False)  # AReaL's text is pydantic's
    assert areal.status == 400


# --------------------------------------------------------------------------- what still differs


def test_the_known_differences_remain(pair: Pair) -> None:
    """The differences the reference guard's docstring lists; when one goes away, update both."""
    # Any class is an engine for the stand-in; AReaL wants a TrainEngine/InferenceEngine subclass (needs torch).
    areal, ours = pair.exchange(
        "POST", "/create_engine", {"engine": "collections.OrderedDict", "engine_name": "not-an-engine"}
    )
    pair.ours_only_engines.add("not-an-engine")
    assert (areal.status, ours.status) == (400, 200)
    assert areal.error.startswith("Engine class must be a subclass of TrainEngine or InferenceEngine")

    # AReaL rebuilds the config's dataclass and fails when it cannot import it; the stand-in does not import it.
    unimportable = {"type": "dataclass", "class_path": "no_such_module.Config", "data": {"seed": 1}}
    areal, ours = pair.exchange("POST", "/configure", {"config": unimportable, "role": "r", "rank": 0})
    assert (areal.status, ours.status) == (500, 200)

    # The stand-in insists on a list; AReaL runs a string's characters as a command.
    areal, ours = pair.exchange("POST", "/fork", {"role": "chars", "worker_index": 0, "raw_cmd": "true"})
    assert (areal.status, ours.status) == (200, 400)

    # werkzeug closes every connection and answers unknown routes with HTML.
    areal, ours = pair.exchange("GET", "/health")
    assert (areal.closes, ours.closes) == (True, False)
    areal, ours = pair.exchange("GET", "/nope")
    assert areal.body is None and ours.body is not None and "/nope" in ours.error
