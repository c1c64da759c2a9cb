"""A dependency-free reference implementation of AReaL's worker-side guard HTTP server.

AReaL's own guard (``python -m areal.infra.rpc.rpc_server``) needs torch, so it cannot run in
the integration tests, in lightweight demo containers or under ``doctor``.  This module speaks the
same HTTP API (same routes, request fields and status codes) with the standard library only::

    python -m areal_workers.reference_guard --host 127.0.0.1 --port 0 \\
        --experiment-name exp --trial-name trial --role actor --worker-index 0

The first line on stdout is ``areal-guard listening on HOST:PORT``; everything else (one line per
request: method, path, status, milliseconds) goes to stderr.

Scope and deliberate differences from AReaL:

* Values are plain JSON.  AReaL's typed payloads (tensors, arrays, dataclasses serialized as
  ``{"type": ...}`` dicts, RTensor references to ``/data/<id>``) are out of scope: they arrive as
  ordinary dicts and results must be JSON-serializable.  ``rpc_meta.broadcast`` is validated and
  otherwise ignored (there is no process group to broadcast over).
* No name_resolve registration: ``--name-resolve-type``, ``--nfs-record-root``, ``--etcd3-addr`` and
  ``--fileroot`` are accepted and reported by ``/health``.  ``--fileroot`` also sets where forked
  children log, as in AReaL.
* Any class can be an engine (AReaL insists on TrainEngine/InferenceEngine subclasses).
* As in AReaL, /set_env, /configure, /create_engine and /call run one at a time on a single engine
  thread, so a slow engine call delays them while /health, /alloc_ports and /fork stay responsive.
* POST /fork for a (role, worker_index) whose child is still running answers 409 (AReaL silently
  replaces the entry and loses track of the old child).  A child that already exited is replaced.
* Errors are ``{"status": "error", "error": "..."}`` (AReaL sends only ``error``).
"""

from __future__ import annotations

import argparse
import contextlib
import getpass
import importlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from queue import SimpleQueue
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

logger = logging.getLogger("areal_workers.reference_guard")

LISTENING_BANNER = "areal-guard listening on"
KILL_GRACE_SECONDS = 3.0  # same as AReaL's kill_process_tree(timeout=3)
KILL_CONFIRM_SECONDS = 2.0
ENGINE_THREAD_JOIN_SECONDS = 5.0
SERVE_POLL_SECONDS = 0.05  # how soon a stop signal is noticed
MAX_PORTS_PER_REQUEST = 1024
MAX_BODY_BYTES = 64 * 1024 * 1024
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})

JsonObject = dict[str, Any]


# --------------------------------------------------------------------------- errors


class HttpError(Exception):
    """Ends a request with ``status`` and ``{"status": "error", "error": message, **extra}``."""

    def __init__(self, status: HTTPStatus, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


def bad_request(message: str) -> HttpError:
    return HttpError(HTTPStatus.BAD_REQUEST, message)


class ChildKillError(Exception):
    """A forked child could not be signalled or did not die after SIGKILL."""


class EngineCodeError(Exception):
    """Engine code (constructor, method, import-time code) raised; carries a one-line summary."""

    def __init__(self, summary: str, traceback_text: str) -> None:
        super().__init__(summary)
        self.summary = summary
        self.traceback_text = traceback_text


class DuplicateEngineError(Exception):
    pass


def capture_engine_error(error: BaseException) -> EngineCodeError:
    # The last line of a traceback: "RuntimeError: message".
    summary = traceback.format_exception_only(type(error), error)[-1].strip()
    traceback_text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    return EngineCodeError(summary, traceback_text)


# --------------------------------------------------------------------------- request validation


def require_str(body: JsonObject, key: str) -> str:
    value = body.get(key)
    if value is None:
        raise bad_request(f"Missing '{key}' field in request")
    if not isinstance(value, str) or not value:
        raise bad_request(f"'{key}' must be a non-empty string")
    return value


def require_int(body: JsonObject, key: str) -> int:
    value = body.get(key)
    if value is None:
        raise bad_request(f"Missing '{key}' field in request")
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{key}' must be an integer")
    return value


def optional_list(body: JsonObject, key: str) -> list[Any]:
    value = body.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad_request(f"'{key}' must be a list")
    return value


def optional_dict(body: JsonObject, key: str) -> JsonObject:
    value = body.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad_request(f"'{key}' must be a dictionary")
    return value


def require_str_dict(body: JsonObject, key: str) -> dict[str, Any]:
    value = body.get(key)
    if value is None:
        raise bad_request(f"Missing '{key}' field in request")
    if not isinstance(value, dict):
        raise bad_request(f"'{key}' must be a dictionary")
    return value


def format_hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def address_family_for(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def advertised_host(bind_host: str) -> str:
    """The address peers should use: the bind address, or this host's IP for a wildcard bind."""
    if bind_host not in WILDCARD_HOSTS:
        return bind_host
    try:
        # In a Kubernetes pod the hostname resolves to the pod IP (kubelet writes /etc/hosts).
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


# --------------------------------------------------------------------------- ports


class PortAllocator:
    """Hands out ports that are free on the guard's host, each at most once per guard lifetime.

    Like AReaL, ports are never returned to the pool: the guard cannot know when the process it
    allocated them for has stopped using them.
    """

    def __init__(self, bind_host: str) -> None:
        self._bind_host = bind_host
        self._held_ports: set[int] = set()
        self._lock = threading.Lock()

    def hold(self, port: int) -> None:
        with self._lock:
            self._held_ports.add(port)

    def allocate(self, count: int) -> list[int]:
        with self._lock:
            ports: list[int] = []
            attempts_left = count * 20
            while len(ports) < count:
                if attempts_left == 0:
                    raise HttpError(
                        HTTPStatus.SERVICE_UNAVAILABLE,
                        f"Could not find {count} free ports on {self._bind_host}",
                    )
                attempts_left -= 1
                try:
                    port = self._probe_free_port()
                except OSError as error:
                    raise HttpError(
                        HTTPStatus.INTERNAL_SERVER_ERROR, f"Cannot probe ports on {self._bind_host}: {error}"
                    ) from error
                if port not in self._held_ports:
                    self._held_ports.add(port)
                    ports.append(port)
            return ports

    def _probe_free_port(self) -> int:
        family = address_family_for(self._bind_host)
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((self._bind_host, 0))
            return int(probe.getsockname()[1])


# --------------------------------------------------------------------------- forked children


@dataclass
class ForkedChild:
    role: str
    worker_index: int
    process: subprocess.Popen[bytes]
    log_path: Path | None

    def describe(self) -> JsonObject:
        exit_code = self.process.poll()
        return {
            "role": self.role,
            "worker_index": self.worker_index,
            "pid": self.process.pid,
            "alive": exit_code is None,
            "exit_code": exit_code,
            "log": str(self.log_path) if self.log_path else None,
        }


def signal_process_group(pgid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # the whole group is already gone
    except PermissionError as error:
        raise ChildKillError(f"Not allowed to send {signum.name} to process group {pgid}") from error


def stop_process_groups(processes: Iterable[subprocess.Popen[bytes]], grace_seconds: float) -> None:
    """SIGTERM each child's process group, SIGKILL what is left after the grace period.

    Children run in their own session (start_new_session=True), so their pid is also their
    process-group id and the signals reach the helpers they started, like AReaL's kill_process_tree.
    Raises ChildKillError naming every child that could not be stopped.
    """
    running = [process for process in processes if process.poll() is None]
    failures: list[str] = []
    for process in running:
        try:
            signal_process_group(process.pid, signal.SIGTERM)
        except ChildKillError as error:
            failures.append(str(error))
    deadline = time.monotonic() + grace_seconds
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in running:
        try:
            # Also sweeps group members that outlived an already-exited leader.
            signal_process_group(process.pid, signal.SIGKILL)
        except ChildKillError as error:
            failures.append(str(error))
        try:
            process.wait(timeout=KILL_CONFIRM_SECONDS)
        except subprocess.TimeoutExpired:
            failures.append(f"pid {process.pid} still running after SIGKILL")
    if failures:
        raise ChildKillError("; ".join(failures))


def forked_log_path(identity: GuardIdentity, role: str) -> Path | None:
    """AReaL's layout, <fileroot>/logs/<user>/<experiment>/<trial>/<role>.log, when --fileroot is set."""
    if identity.fileroot is None:
        return None
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid, common in containers
        user = str(os.getuid())
    return (
        Path(identity.fileroot) / "logs" / user / identity.experiment_name / identity.trial_name
        / f"{role}.log"
    )


class ForkedChildren:
    """Child processes started through /fork, keyed by (role, worker_index)."""

    def __init__(self) -> None:
        self._children: dict[tuple[str, int], ForkedChild] = {}
        self._lock = threading.Lock()

    def count(self) -> int:
        with self._lock:
            return len(self._children)

    def describe(self) -> list[JsonObject]:
        with self._lock:
            return [child.describe() for child in self._children.values()]

    def start(
        self, role: str, worker_index: int, command: list[str], env: dict[str, str], log_path: Path | None
    ) -> ForkedChild:
        key = (role, worker_index)
        # The lock is held across Popen so two concurrent forks of one key cannot both start.
        with self._lock:
            existing = self._children.get(key)
            if existing is not None and existing.process.poll() is None:
                raise HttpError(
                    HTTPStatus.CONFLICT,
                    f"Forked worker {role}/{worker_index} is already running "
                    f"(pid={existing.process.pid}); kill it first",
                )
            process = self._spawn(command, env, log_path)
            child = ForkedChild(role, worker_index, process, log_path)
            self._children[key] = child
            return child

    @staticmethod
    def _spawn(command: list[str], env: dict[str, str], log_path: Path | None) -> subprocess.Popen[bytes]:
        try:
            if log_path is None:
                return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, start_new_session=True)
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with log_path.open("ab") as log_file:
                return subprocess.Popen(
                    command,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except (OSError, ValueError) as error:  # missing executable, bad env entry, unwritable log
            raise HttpError(
                HTTPStatus.INTERNAL_SERVER_ERROR, f"Failed to start forked worker {command[0]!r}: {error}"
            ) from error

    def kill(self, role: str, worker_index: int) -> int:
        """Stops and forgets the child; returns its pid.  Raises HttpError 404 or 500."""
        key = (role, worker_index)
        with self._lock:
            child = self._children.pop(key, None)
        if child is None:
            raise HttpError(HTTPStatus.NOT_FOUND, f"Forked worker {role}/{worker_index} not found")
        try:
            stop_process_groups([child.process], KILL_GRACE_SECONDS)
        except ChildKillError as error:
            with self._lock:
                # Keep tracking it so a retry, or the guard's shutdown, tries again.
                self._children.setdefault(key, child)
            raise HttpError(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                f"Failed to kill forked worker {role}/{worker_index}: {error}",
                pid=child.process.pid,
            ) from error
        return child.process.pid

    def kill_all(self) -> None:
        with self._lock:
            children = list(self._children.values())
            self._children.clear()
        if not children:
            return
        logger.info("stopping %d forked children", len(children))
        try:
            stop_process_groups([child.process for child in children], KILL_GRACE_SECONDS)
        except ChildKillError as error:
            logger.error("some forked children survived: %s", error)


# --------------------------------------------------------------------------- engines


class EngineThread:
    """Runs submitted work one item at a time on a single daemon thread, as AReaL's guard does.

    A daemon thread (not a ThreadPoolExecutor, whose workers are joined at interpreter exit) so
    that an engine call that never returns cannot keep the guard alive after SIGTERM.
    """

    def __init__(self) -> None:
        self._work: SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="engine", daemon=True)
        self._thread.start()

    def run(self, work: Callable[[], Any]) -> Any:
        """Runs ``work`` on the engine thread and returns its result or raises its exception."""
        future: Future[Any] = Future()
        self._work.put((work, future))
        return future.result()

    def stop(self, timeout: float) -> None:
        self._work.put(None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            logger.warning("engine thread still busy after %.1fs; destroying engines anyway", timeout)

    def _run(self) -> None:
        while (item := self._work.get()) is not None:
            work, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(work())
            except BaseException as error:  # noqa: BLE001 - re-raised in the waiting request thread
                future.set_exception(error)


def import_engine_class(import_path: str) -> type:
    """Imports "package.module.ClassName"; raises HttpError 400 ("Failed to import") or 500."""
    module_name, _, class_name = import_path.rpartition(".")
    try:
        if not module_name:
            raise ValueError(f"'{import_path}' is not of the form 'module.path.ClassName'")
        module = importlib.import_module(module_name)
        engine_class = getattr(module, class_name)
    except (ImportError, AttributeError, ValueError) as error:
        raise bad_request(f"Failed to import engine '{import_path}': {error}") from error
    except Exception as error:  # the module's own top-level code raised: engine code, may raise anything
        engine_error = capture_engine_error(error)
        raise HttpError(
            HTTPStatus.INTERNAL_SERVER_ERROR,
            f"Engine module '{module_name}' raised while being imported: {engine_error.summary}",
            traceback=engine_error.traceback_text,
        ) from error
    if not isinstance(engine_class, type):
        raise bad_request(f"Engine '{import_path}' is not a class")
    return engine_class


class EngineHost:
    """The named engine instances of this guard and the thread that runs their code."""

    def __init__(self) -> None:
        self._engines: dict[str, Any] = {}
        self._lock = threading.Lock()
        self._thread = EngineThread()

    def names(self) -> list[str]:
        with self._lock:
            return list(self._engines)

    def exists(self, engine_name: str) -> bool:
        with self._lock:
            return engine_name in self._engines

    def get(self, engine_name: str) -> Any:
        with self._lock:
            engine = self._engines.get(engine_name)
            available = list(self._engines)
        if engine is None:
            raise HttpError(
                HTTPStatus.NOT_FOUND, f"Engine '{engine_name}' not found. Available engines: {available}"
            )
        return engine

    def run_serially(self, work: Callable[[], Any]) -> Any:
        return self._thread.run(work)

    def create(self, engine_name: str, engine_class: type, args: list[Any], kwargs: JsonObject) -> None:
        """Raises DuplicateEngineError or EngineCodeError."""

        def construct() -> None:
            # Checked again here: the engine thread serializes creations, the earlier check does not.
            if self.exists(engine_name):
                raise DuplicateEngineError(engine_name)
            try:
                engine = engine_class(*args, **kwargs)
            except Exception as error:  # engine constructors may raise anything
                raise capture_engine_error(error) from error
            with self._lock:
                self._engines[engine_name] = engine

        self._thread.run(construct)

    def call(self, engine: Any, method: Callable[..., Any], args: list[Any], kwargs: JsonObject) -> Any:
        """Raises EngineCodeError if the method raised."""

        def invoke() -> Any:
            try:
                result = method(*args, **kwargs)
                if isinstance(result, Future):  # AReaL waits for engines' future results too
                    result = result.result()
                return result
            except Exception as error:  # engine methods may raise anything
                raise capture_engine_error(error) from error

        return self._thread.run(invoke)

    def destroy_all(self) -> None:
        self._thread.stop(ENGINE_THREAD_JOIN_SECONDS)
        with self._lock:
            engines = list(self._engines.items())
            self._engines.clear()
        for engine_name, engine in engines:
            destroy = getattr(engine, "destroy", None)
            if not callable(destroy):
                continue
            try:
                destroy()
                logger.info("engine '%s' destroyed", engine_name)
            except Exception:  # engine code; one failing destroy must not skip the rest
                logger.exception("engine '%s' failed to destroy", engine_name)


# --------------------------------------------------------------------------- guard state and routes


@dataclass(frozen=True)
class GuardIdentity:
    experiment_name: str
    trial_name: str
    role: str
    worker_index: int
    name_resolve_type: str
    nfs_record_root: str
    etcd3_addr: str
    fileroot: str | None


@dataclass
class GuardState:
    identity: GuardIdentity
    host: str  # advertised to peers; differs from the bind address only for wildcard binds
    port: int
    ports: PortAllocator
    children: ForkedChildren = field(default_factory=ForkedChildren)
    engines: EngineHost = field(default_factory=EngineHost)
    configuration: JsonObject | None = None


def handle_health(state: GuardState, _body: JsonObject) -> JsonObject:
    identity = state.identity
    engine_names = state.engines.names()
    configuration = state.configuration
    return {
        "status": "healthy",
        "forked_children": state.children.count(),
        "engine_count": len(engine_names),
        "engines": engine_names,
        "role": identity.role,
        "worker_index": identity.worker_index,
        "pid": os.getpid(),
        "host": state.host,
        "port": state.port,
        "experiment_name": identity.experiment_name,
        "trial_name": identity.trial_name,
        "forked": state.children.describe(),
        "configured": None
        if configuration is None
        else {"role": configuration["role"], "rank": configuration["rank"]},
        "name_resolve": {
            "type": identity.name_resolve_type,
            "nfs_record_root": identity.nfs_record_root,
            "etcd3_addr": identity.etcd3_addr,
            "registered": False,
        },
        "fileroot": identity.fileroot,
    }


def handle_alloc_ports(state: GuardState, body: JsonObject) -> JsonObject:
    count = require_int(body, "count")
    if count <= 0:
        raise bad_request("'count' must be a positive integer")
    if count > MAX_PORTS_PER_REQUEST:
        raise bad_request(f"'count' must be at most {MAX_PORTS_PER_REQUEST}")
    return {"status": "success", "ports": state.ports.allocate(count), "host": state.host}


def handle_fork(state: GuardState, body: JsonObject) -> JsonObject:
    role = require_str(body, "role")
    worker_index = require_int(body, "worker_index")
    command = body.get("raw_cmd")
    if command is None:
        raise bad_request("Missing 'raw_cmd' field in request")
    if not isinstance(command, list) or not command or not all(isinstance(arg, str) for arg in command):
        raise bad_request("'raw_cmd' must be a non-empty list of strings")
    env_overrides = optional_dict(body, "env")
    if not all(isinstance(value, str) for value in env_overrides.values()):
        raise bad_request("'env' values must be strings")
    child_env = {**os.environ, **env_overrides}
    log_path = forked_log_path(state.identity, role)
    child = state.children.start(role, worker_index, command, child_env, log_path)
    logger.info("forked %s/%d as pid %d: %s", role, worker_index, child.process.pid, " ".join(command))
    return {"status": "success", "host": state.host, "pid": child.process.pid}


def handle_kill_forked_worker(state: GuardState, body: JsonObject) -> JsonObject:
    role = require_str(body, "role")
    worker_index = require_int(body, "worker_index")
    pid = state.children.kill(role, worker_index)
    message = f"Killed forked worker {role}/{worker_index} (pid={pid})"
    logger.info(message)
    return {"status": "success", "message": message}


def handle_set_env(state: GuardState, body: JsonObject) -> JsonObject:
    env_updates = require_str_dict(body, "env")
    for name in env_updates:
        if not name or "=" in name or "\0" in name:
            raise bad_request(f"Invalid environment variable name {name!r}")

    def apply() -> None:
        for name, value in env_updates.items():
            os.environ[name] = str(value)  # AReaL stringifies values the same way

    state.engines.run_serially(apply)
    return {"status": "success"}


def handle_configure(state: GuardState, body: JsonObject) -> JsonObject:
    if body.get("config") is None:
        raise bad_request("Missing 'config' field in request")
    # AReaL's guard reads its role from its own CLI arguments; the controller sends one anyway.
    role = body.get("role", state.identity.role)
    rank = require_int(body, "rank")
    configuration = {"config": body["config"], "role": role, "rank": rank}

    def store() -> None:
        state.configuration = configuration

    state.engines.run_serially(store)
    return {"status": "success", "message": "Worker configured successful.", "result": None}


def handle_create_engine(state: GuardState, body: JsonObject) -> JsonObject:
    import_path = require_str(body, "engine")
    engine_name = require_str(body, "engine_name")
    init_args = optional_list(body, "init_args")
    init_kwargs = optional_dict(body, "init_kwargs")
    if state.engines.exists(engine_name):
        raise duplicate_engine(engine_name)
    engine_class = import_engine_class(import_path)
    try:
        state.engines.create(engine_name, engine_class, init_args, init_kwargs)
    except DuplicateEngineError as error:
        raise duplicate_engine(engine_name) from error
    except EngineCodeError as error:
        raise HttpError(
            HTTPStatus.INTERNAL_SERVER_ERROR,
            f"Failed to instantiate engine: {error.summary}",
            traceback=error.traceback_text,
        ) from error
    logger.info("engine '%s' created from %s", engine_name, import_path)
    return {
        "status": "success",
        "message": f"Engine '{engine_name}' created and initialized",
        "engine_name": engine_name,
        "result": None,
    }


def duplicate_engine(engine_name: str) -> HttpError:
    return bad_request(
        f"Engine '{engine_name}' already exists. Use a different name or delete the existing engine first."
    )


def validate_rpc_meta(rpc_meta: Any) -> None:
    if rpc_meta is None:
        return
    if not isinstance(rpc_meta, dict):
        raise bad_request(f"Invalid rpc_meta: expected dict or None, got {type(rpc_meta).__name__}")
    if not isinstance(rpc_meta.get("broadcast", False), bool):
        raise bad_request("Invalid rpc_meta.broadcast: expected bool")


def handle_call(state: GuardState, body: JsonObject) -> JsonObject:
    method_name = require_str(body, "method")
    engine_name = require_str(body, "engine_name")
    args = optional_list(body, "args")
    kwargs = optional_dict(body, "kwargs")
    validate_rpc_meta(body.get("rpc_meta"))
    engine = state.engines.get(engine_name)
    method = getattr(engine, method_name, None)
    if not callable(method):
        raise bad_request(f"Engine does not have method '{method_name}'")
    try:
        result = state.engines.call(engine, method, args, kwargs)
    except EngineCodeError as error:
        raise HttpError(
            HTTPStatus.INTERNAL_SERVER_ERROR,
            f"Engine method '{method_name}' failed: {error.summary}",
            traceback=error.traceback_text,
        ) from error
    try:
        json.dumps(result)
    except (TypeError, ValueError) as error:
        raise HttpError(
            HTTPStatus.INTERNAL_SERVER_ERROR,
            f"Result of '{method_name}' is not JSON-serializable ({error}); "
            "typed tensor payloads are not supported by the reference guard",
        ) from error
    return {"status": "success", "result": result}


Handler = Callable[[GuardState, JsonObject], JsonObject]

ROUTES: dict[tuple[str, str], Handler] = {
    ("GET", "/health"): handle_health,
    ("POST", "/alloc_ports"): handle_alloc_ports,
    ("POST", "/fork"): handle_fork,
    ("POST", "/kill_forked_worker"): handle_kill_forked_worker,
    ("POST", "/set_env"): handle_set_env,
    ("POST", "/configure"): handle_configure,
    ("POST", "/create_engine"): handle_create_engine,
    ("POST", "/call"): handle_call,
}


# --------------------------------------------------------------------------- HTTP plumbing


class GuardServer(ThreadingHTTPServer):
    daemon_threads = True  # an engine call that never returns must not block shutdown

    def __init__(self, bind_host: str, port: int, state_factory: Callable[[int], GuardState]) -> None:
        self.address_family = address_family_for(bind_host)
        super().__init__((bind_host, port), GuardRequestHandler)
        self.state = state_factory(int(self.server_address[1]))


class GuardRequestHandler(BaseHTTPRequestHandler):
    server: GuardServer
    protocol_version = "HTTP/1.1"  # keep-alive for the adapter's sessions; every reply has a length

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # replaced by the one line per request written in _dispatch

    def _dispatch(self, http_method: str) -> None:
        started = time.monotonic()
        path = urlsplit(self.path).path
        try:
            raw_body = self._read_body()
            handler = self._route(http_method, path)
            status, payload = HTTPStatus.OK, handler(self.server.state, self._parse_body(http_method, raw_body))
        except HttpError as error:
            status, payload = error.status, {"status": "error", "error": error.message, **error.extra}
        self._send_json(status, payload)
        elapsed_ms = (time.monotonic() - started) * 1000
        logger.info("%s %s %d %.1fms", http_method, path, status.value, elapsed_ms)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            raise HttpError(HTTPStatus.LENGTH_REQUIRED, "Chunked request bodies are not supported")
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError as error:
            self.close_connection = True
            raise bad_request("Invalid Content-Length header") from error
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"Request body exceeds {MAX_BODY_BYTES} bytes")
        return self.rfile.read(length)

    @staticmethod
    def _route(http_method: str, path: str) -> Handler:
        handler = ROUTES.get((http_method, path))
        if handler is not None:
            return handler
        if any(route_path == path for _, route_path in ROUTES):
            raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{http_method} is not allowed on {path}")
        raise HttpError(HTTPStatus.NOT_FOUND, f"No such endpoint: {path}")

    @staticmethod
    def _parse_body(http_method: str, raw_body: bytes) -> JsonObject:
        if http_method == "GET":
            return {}
        try:
            body = json.loads(raw_body)
        except (ValueError, UnicodeDecodeError) as error:  # JSONDecodeError is a ValueError
            raise bad_request(f"Invalid JSON in request body: {error}") from error
        if not isinstance(body, dict):
            raise bad_request("Request body must be a JSON object")
        return body

    def _send_json(self, status: HTTPStatus, payload: JsonObject) -> None:
        encoded = json.dumps(payload).encode()
        try:
            self.send_response(status.value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(encoded)))
            self.end_headers()
            self.wfile.write(encoded)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (e.g. its timeout); nothing to tell it


# --------------------------------------------------------------------------- CLI and lifecycle


def build_parser() -> argparse.ArgumentParser:
    """AReaL's guard command line (areal.infra.rpc.guard.app.make_base_parser), same defaults
    except --host."""
    parser = argparse.ArgumentParser(
        prog="python -m areal_workers.reference_guard",
        description="Dependency-free reference implementation of AReaL's worker guard HTTP server.",
    )
    parser.add_argument("--port", type=int, default=0, help="port to serve on (0 = pick a free one)")
    # AReaL defaults to 0.0.0.0.  Here the default is loopback: the tests run one guard per fake pod
    # on that pod's own 127.x address in a shared network namespace, and nothing may listen on other
    # interfaces.  Containers pass --host 0.0.0.0 (or the pod IP) explicitly, as AReaL's fork does.
    parser.add_argument("--host", type=str, default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument("--experiment-name", type=str, required=True)
    parser.add_argument("--trial-name", type=str, required=True)
    parser.add_argument("--role", type=str, required=True)
    parser.add_argument("--worker-index", type=int, default=-1)
    parser.add_argument("--name-resolve-type", type=str, default="nfs", help="recorded only")
    parser.add_argument("--nfs-record-root", type=str, default="/tmp/areal/name_resolve", help="recorded only")
    parser.add_argument("--etcd3-addr", type=str, default="localhost:2379", help="recorded only")
    parser.add_argument("--fileroot", type=str, default=None, help="root directory for forked workers' logs")
    return parser


def parse_identity(argv: list[str] | None) -> tuple[argparse.Namespace, GuardIdentity]:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.worker_index < 0:
        parser.error("--worker-index must be given and >= 0")
    if not 0 <= args.port <= 65535:
        parser.error("--port must be between 0 and 65535")
    identity = GuardIdentity(
        experiment_name=args.experiment_name,
        trial_name=args.trial_name,
        role=args.role,
        worker_index=args.worker_index,
        name_resolve_type=args.name_resolve_type,
        nfs_record_root=args.nfs_record_root,
        etcd3_addr=args.etcd3_addr,
        fileroot=args.fileroot,
    )
    return args, identity


class StopFlag:
    """Set from signal handlers; a plain attribute, since handlers must not take locks."""

    def __init__(self) -> None:
        self.signal_name: str | None = None

    def request(self, signum: int, _frame: FrameType | None) -> None:
        self.signal_name = signal.Signals(signum).name


def serve_until_stopped(server: GuardServer, stop: StopFlag) -> None:
    # handle_request() with a timeout instead of serve_forever(): the loop notices the flag within
    # SERVE_POLL_SECONDS and nothing is raised asynchronously inside the server's own code.
    server.timeout = SERVE_POLL_SECONDS
    while stop.signal_name is None:
        server.handle_request()


def shut_down(state: GuardState) -> None:
    """AReaL's order: engines' destroy() first, then the forked children."""
    state.engines.destroy_all()
    state.children.kill_all()


def main(argv: list[str] | None = None) -> int:
    args, identity = parse_identity(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s areal-guard[{identity.role}/{identity.worker_index}] %(levelname)s %(message)s",
    )
    stop = StopFlag()
    signal.signal(signal.SIGTERM, stop.request)
    signal.signal(signal.SIGINT, stop.request)

    bind_host: str = args.host

    def new_state(bound_port: int) -> GuardState:
        ports = PortAllocator(bind_host)
        ports.hold(bound_port)
        return GuardState(identity=identity, host=advertised_host(bind_host), port=bound_port, ports=ports)

    try:
        server = GuardServer(bind_host, args.port, new_state)
    except OSError as error:
        logger.error("cannot listen on %s: %s", format_hostport(bind_host, args.port), error)
        return 1
    state = server.state
    print(f"{LISTENING_BANNER} {format_hostport(bind_host, state.port)}", flush=True)
    logger.info("pid %d serving %s (advertised as %s)", os.getpid(), identity.role, state.host)
    try:
        serve_until_stopped(server, stop)
        logger.info("received %s, shutting down", stop.signal_name)
    finally:
        shut_down(state)
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
