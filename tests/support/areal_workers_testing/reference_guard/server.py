"""A dependency-free reference implementation of AReaL's worker-side guard HTTP server.

AReaL's own guard (``python -m areal.infra.rpc.rpc_server``) needs torch, so it cannot run in
the integration tests, in lightweight demo containers or under ``doctor``.  This module speaks the
same HTTP API (same routes, request fields, status codes and reply keys) with the standard library
only::

    python -m areal_workers.reference_guard --host 127.0.0.1 --port 0 \\
        --experiment-name exp --trial-name trial --role actor --worker-index 0

The first line on stdout is ``areal-guard listening on HOST:PORT``; forked children's output
follows on stdout, as AReaL streams it there.  Everything else (one line per request: method,
path, status, milliseconds) goes to stderr.

tests/unit/test_guard_conformance.py sends the same requests to this server and to AReaL's
(areal 1.0.4) and compares the answers.  Behaviour taken from AReaL, including its rough edges:

* Request bodies are read as Flask's ``request.get_json(silent=True)`` reads them: only with a
  JSON Content-Type.  The guard routes (/alloc_ports, /fork, /kill_forked_worker, /set_env,
  /configure) answer 400 "Invalid JSON in request body" to a missing or unreadable body; the engine
  routes (/create_engine, /call) treat it as ``{}``, i.e. as missing fields.  A JSON body that is
  not an object is a 500, as AReaL fails on it.
* Errors are ``{"error": "..."}`` (plus ``pid`` when a kill failed); messages follow AReaL's, and
  AReaL's catch-all failures are 500 "Internal server error: ...".
* /set_env runs at once in the request thread, also while an engine call runs: AReaL's guard
  registers /set_env before the engine blueprint's serialized variant, so the guard's wins.
  /configure, /create_engine's constructor and /call run one at a time on a single engine thread.
* /configure reads ``config.seed`` of the deserialized config, so the config must be a serialized
  dataclass (``{"type": "dataclass", "class_path", "data"}``) whose data has a ``seed``; anything
  else is a 500.  ``rank`` may be any value; the role is the guard's own --role.
* /alloc_ports hands out ports in 10000-32767 (below Linux's ephemeral range), never the same port
  twice; ``count`` is checked as ``isinstance(count, int) and count > 0``, so ``true`` means 1;
  more ports than the range holds is a 500.
* /fork always starts the command (through ``/bin/sh -c 'exec "$@"'``): a missing executable
  is a child that exits with 127, not an error.  Its output goes to the guard's stdout,
  ``<fileroot or /tmp>/logs/<user>/<experiment>/<trial>/<role>.log`` and, prefixed with
  ``[role]``, ``merged.log`` in the same directory.  A second fork of a (role, worker_index)
  replaces the entry: /kill_forked_worker then stops the newest, the older child is still counted
  by ``forked_children`` and stopped at shutdown.  A kill that fails forgets the child.
* /call: an AttributeError while looking up or running the method is 400 "Engine does not have
  method"; a non-bool ``rpc_meta.broadcast`` is found only after the engine (404 first) and is a 500.

Differences that remain, deliberately or because the stand-in has no torch:

* Any class can be an engine: AReaL answers 400 unless the class subclasses its TrainEngine or
  InferenceEngine, which cannot be imported without torch.
* Values are plain JSON.  AReaL's typed payloads (tensors, arrays, dataclasses serialized as
  ``{"type": ...}`` dicts, RTensor references to ``/data/<id>``) arrive as ordinary dicts, results
  must be JSON-serializable, and /configure does not import the config's class (AReaL fails with a
  500 when its worker cannot).  ``rpc_meta.broadcast`` is validated and otherwise ignored.  There
  are no ``/data/`` routes.
* No name_resolve registration: ``--name-resolve-type``, ``--nfs-record-root`` and ``--etcd3-addr``
  are accepted and reported by ``/health``, which also carries fields AReaL's does not (role,
  index, host, port, forked children, configuration).
* Stricter validation where AReaL does not validate at all: /fork's and /kill_forked_worker's
  ``role`` and ``worker_index`` must be JSON scalars and ``raw_cmd`` a list, else 400 (AReaL runs
  a string's characters as a command, and fails with a 500 on other non-lists and on unhashable keys).
* Pydantic's wording of AReaL's 400s for /create_engine and /call fields is not copied.
* Connections are kept alive (HTTP/1.1); werkzeug closes every connection after its reply.
  Unknown routes and wrong methods answer 404/405 with a JSON body, werkzeug's are HTML.
* Without a passwd entry for the uid, logs go under the numeric uid (AReaL fails the fork).
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import getpass
import importlib
import json
import logging
import os
import random
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
from typing import IO, Any
from urllib.parse import urlsplit

logger = logging.getLogger("areal_workers.reference_guard")

LISTENING_BANNER = "areal-guard listening on"
KILL_GRACE_SECONDS = 3.0  # same as AReaL's kill_process_tree(timeout=3)
KILL_CONFIRM_SECONDS = 2.0
ENGINE_THREAD_JOIN_SECONDS = 5.0
SERVE_POLL_SECONDS = 0.05  # how soon a stop signal is noticed
PORT_RANGE = (10000, 32767)  # AReaL's find_free_ports range
PORT_ATTEMPTS_PER_PORT = 10
MAX_BODY_BYTES = 64 * 1024 * 1024
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})
DEFAULT_LOG_ROOT = "/tmp"  # AReaL's fork logs go here without --fileroot
MERGED_LOG_PREFIX_WIDTH = 10  # AReaL's LOG_PREFIX_WIDTH
FORK_SHELL = ("/bin/sh", "-c", 'exec "$@"', "areal-fork")

JsonObject = dict[str, Any]
JSON_SCALARS = (str, int, float, bool)


# --------------------------------------------------------------------------- errors


class HttpError(Exception):
    """Ends a request with ``status`` and ``{"error": message, **extra}``."""

    def __init__(self, status: HTTPStatus, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.extra = extra


def bad_request(message: str) -> HttpError:
    return HttpError(HTTPStatus.BAD_REQUEST, message)


def internal_error(message: str) -> HttpError:
    """AReaL's catch-all answer when a handler raised."""
    return HttpError(HTTPStatus.INTERNAL_SERVER_ERROR, f"Internal server error: {message}")


class ChildKillError(Exception):
    """A forked child could not be signalled or did not die after SIGKILL."""


class EngineCodeError(Exception):
    """Engine code (constructor, method) raised; ``str()`` is the original exception's."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.traceback_text = "".join(traceback.format_exception(type(error), error, error.__traceback__))


class NoSuchMethodError(Exception):
    pass


class DuplicateEngineError(Exception):
    pass


# --------------------------------------------------------------------------- request validation


def require_str(body: JsonObject, key: str) -> str:
    value = body.get(key)
    if value is None:
        raise bad_request(f"Missing '{key}' field in request")
    if not isinstance(value, str) or not value:
        raise bad_request(f"'{key}' must be a non-empty string")
    return value


def require_present(body: JsonObject, key: str) -> Any:
    value = body.get(key)
    if value is None:
        raise bad_request(f"Missing '{key}' field in request")
    return value


def require_scalar(body: JsonObject, key: str) -> str | int | float | bool:
    value = require_present(body, key)
    if not isinstance(value, JSON_SCALARS):
        raise bad_request(f"'{key}' must be a string or a number")
    return value


def optional_list(body: JsonObject, key: str) -> list[Any]:
    """Like AReaL's pydantic field ``list[Any] = []``: absent is empty, null is invalid."""
    value = body.get(key, [])
    if not isinstance(value, list):
        raise bad_request(f"'{key}' must be a list")
    return value


def optional_dict(body: JsonObject, key: str) -> JsonObject:
    """Like AReaL's pydantic field ``dict[str, Any] = {}``: absent is empty, null is invalid."""
    value = body.get(key, {})
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


def is_json_content_type(content_type: str) -> bool:
    """Flask's ``Request.is_json``."""
    return content_type == "application/json" or (
        content_type.startswith("application/") and content_type.endswith("+json")
    )


# --------------------------------------------------------------------------- ports


class PortAllocator:
    """Hands out ports free on the guard's host, each at most once per guard lifetime, as AReaL does.

    Ports come from PORT_RANGE, below Linux's ephemeral range, so that an outgoing connection cannot
    take a port between its allocation and its use.  They are never returned to the pool: the guard
    cannot know when the process it allocated them for has stopped using them.
    """

    def __init__(self, bind_host: str) -> None:
        self._bind_host = "" if bind_host in WILDCARD_HOSTS else bind_host
        self._family = address_family_for(bind_host)
        self._held_ports: set[int] = set()
        self._lock = threading.Lock()

    def hold(self, port: int) -> None:
        with self._lock:
            self._held_ports.add(port)

    def allocate(self, count: int) -> list[int]:
        low, high = PORT_RANGE
        with self._lock:
            available = high - low + 1 - len(self._held_ports)
            if count > available:
                raise internal_error(
                    f"Cannot find {count} ports in range {PORT_RANGE}. Only {available} ports available."
                )
            max_attempts = count * PORT_ATTEMPTS_PER_PORT
            tried: set[int] = set()
            found: list[int] = []
            for _ in range(max_attempts):
                if len(found) == count:
                    break
                port = random.randint(low, high)
                if port in tried or port in self._held_ports:
                    continue
                tried.add(port)
                if self._is_free(port):
                    found.append(port)
            if len(found) < count:
                raise internal_error(
                    f"Could only find {len(found)} free ports out of {count} requested "
                    f"after {max_attempts} attempts"
                )
            self._held_ports.update(found)
            return sorted(found)

    def _is_free(self, port: int) -> bool:
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):  # AReaL checks TCP and UDP
            try:
                with socket.socket(self._family, kind) as probe:
                    probe.bind((self._bind_host, port))
            except OSError:
                return False
        return True


# --------------------------------------------------------------------------- forked children


ForkKey = tuple[Any, Any]


@dataclass
class ForkedChild:
    role: Any
    worker_index: Any
    process: subprocess.Popen[bytes]
    log_path: Path

    def describe(self) -> JsonObject:
        exit_code = self.process.poll()
        return {
            "role": self.role,
            "worker_index": self.worker_index,
            "pid": self.process.pid,
            "alive": exit_code is None,
            "exit_code": exit_code,
            "log": str(self.log_path),
        }


def signal_process_group(pgid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # the whole group is already gone
    except PermissionError as error:
        raise ChildKillError(f"Not allowed to send {signum.name} to process group {pgid}") from error


def stop_process_groups(processes: Iterable[subprocess.Popen[bytes]], grace_seconds: float) -> None:
    """SIGTERM each running child's process group, SIGKILL what is left after the grace period.

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


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid, common in containers
        return str(os.getuid())


def fork_log_dir(identity: GuardIdentity) -> Path:
    """AReaL's layout: <fileroot or /tmp>/logs/<user>/<experiment>/<trial>."""
    root = Path(identity.fileroot or DEFAULT_LOG_ROOT)
    return root / "logs" / current_user() / identity.experiment_name / identity.trial_name


class OutputPump:
    """Copies a child's output line by line to the guard's stdout, its role log and the merged log
    (with a ``[role]`` prefix), as AReaL's ``cmd 2>&1 | tee -a role.log >(sed ... >> merged.log)``."""

    def __init__(self, source: IO[bytes], role_log: IO[bytes], merged_log: IO[bytes], role: Any) -> None:
        self._source = source
        self._role_log = role_log
        self._merged_log = merged_log
        self._prefix = f"[{role}]".ljust(MERGED_LOG_PREFIX_WIDTH).encode()
        self._thread = threading.Thread(target=self._run, name=f"fork-output-{role}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        stdout: IO[bytes] | None = sys.stdout.buffer if sys.stdout is not None else None
        with self._source, self._role_log, self._merged_log:
            for line in iter(self._source.readline, b""):
                if stdout is not None:
                    try:
                        stdout.write(line)
                        stdout.flush()
                    except (OSError, ValueError):  # the guard's stdout is gone; keep the log files
                        stdout = None
                self._role_log.write(line)
                self._role_log.flush()
                self._merged_log.write(self._prefix + line)
                self._merged_log.flush()


class ForkedChildren:
    """Child processes started through /fork, tracked as AReaL tracks them: a list of every child
    not killed through /kill_forked_worker, and the latest child per (role, worker_index)."""

    def __init__(self) -> None:
        self._children: list[ForkedChild] = []
        self._latest: dict[ForkKey, ForkedChild] = {}
        self._lock = threading.Lock()

    def count(self) -> int:
        with self._lock:
            return len(self._children)

    def describe(self) -> list[JsonObject]:
        with self._lock:
            return [child.describe() for child in self._children]

    def start(
        self, role: Any, worker_index: Any, command: list[str], env: dict[str, str], log_dir: Path
    ) -> ForkedChild:
        """Raises HttpError 500 when the log files cannot be opened or the shell cannot start."""
        log_path = log_dir / f"{role}.log"
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            role_log = log_path.open("ab")
        except OSError as error:
            raise internal_error(str(error)) from error
        try:
            merged_log = (log_dir / "merged.log").open("ab")
        except OSError as error:
            role_log.close()
            raise internal_error(str(error)) from error
        try:
            # The shell execs the command (same pid); a command it cannot run makes it exit with
            # 127, so, as with AReaL's bash pipeline, the fork itself succeeds.
            process = subprocess.Popen(
                [*FORK_SHELL, *command],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except (OSError, ValueError, TypeError) as error:  # e.g. a non-string env value
            role_log.close()
            merged_log.close()
            raise internal_error(str(error)) from error
        assert process.stdout is not None
        OutputPump(process.stdout, role_log, merged_log, role).start()
        child = ForkedChild(role, worker_index, process, log_path)
        with self._lock:
            self._children.append(child)
            self._latest[(role, worker_index)] = child
        return child

    def kill(self, role: Any, worker_index: Any) -> int:
        """Stops and forgets the latest child of the key; returns its pid.  Raises HttpError 404 or 500."""
        with self._lock:
            child = self._latest.pop((role, worker_index), None)
            if child is not None:
                self._children.remove(child)
        if child is None:
            raise HttpError(HTTPStatus.NOT_FOUND, f"Forked worker {role}/{worker_index} not found")
        try:
            stop_process_groups([child.process], KILL_GRACE_SECONDS)
        except ChildKillError as error:
            raise HttpError(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                f"Failed to kill forked worker: {error}",
                pid=child.process.pid,
            ) from error
        return child.process.pid

    def kill_all(self) -> None:
        with self._lock:
            children = list(self._children)
            self._children.clear()
            self._latest.clear()
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
    """Imports "package.module.ClassName" with AReaL's outcomes: 400 (with "Failed to import" for
    ImportError, AttributeError and ValueError), 400 for a TypeError, 500 for anything else."""
    try:
        module_name, dot, class_name = import_path.rpartition(".")
        if not dot:
            raise ValueError(
                f"Invalid module path: {import_path!r}. Expected format 'module.path.ObjectName', got 1 part(s)."
            )
        try:
            module = importlib.import_module(module_name)
        except ImportError as error:
            raise ImportError(
                f"Failed to import module '{module_name}' from path '{import_path}': {error}"
            ) from error
        try:
            engine_class = getattr(module, class_name)
        except AttributeError as error:
            raise AttributeError(f"Module '{module_name}' has no attribute '{class_name}'.") from error
        if not isinstance(engine_class, type):
            raise TypeError("issubclass() arg 1 must be a class")  # what AReaL's subclass check raises
    except (ValueError, ImportError, AttributeError) as error:
        raise bad_request(f"Failed to import engine '{import_path}': {error}") from error
    except TypeError as error:
        raise bad_request(str(error)) from error
    except Exception as error:  # the module's own top-level code raised: engine code, may raise anything
        logger.error("engine module of %s raised while imported:\n%s", import_path, traceback.format_exc())
        raise internal_error(str(error)) from error
    return engine_class


def check_broadcast(rpc_meta: JsonObject | None) -> None:
    """AReaL's _should_broadcast_payload validation; broadcasting itself needs a process group."""
    if rpc_meta is not None and "broadcast" in rpc_meta and not isinstance(rpc_meta["broadcast"], bool):
        raise ValueError(f"Invalid rpc_meta.broadcast: expected bool, got {type(rpc_meta['broadcast'])}")


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
                raise EngineCodeError(error) from error
            with self._lock:
                self._engines[engine_name] = engine

        self._thread.run(construct)

    def call(
        self, engine: Any, method_name: str, args: list[Any], kwargs: JsonObject, rpc_meta: JsonObject | None
    ) -> Any:
        """Raises NoSuchMethodError for an AttributeError (AReaL's mapping, also when the method
        itself raised it), EngineCodeError for anything else the method raised."""

        def invoke() -> Any:
            try:
                check_broadcast(rpc_meta)
                result = getattr(engine, method_name)(*args, **kwargs)
                if isinstance(result, Future):  # AReaL waits for engines' future results too
                    result = result.result()
                return result
            except AttributeError as error:
                raise NoSuchMethodError(f"Engine does not have method '{method_name}'") from error
            except Exception as error:  # engine methods may raise anything
                raise EngineCodeError(error) from error

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
    count = require_present(body, "count")
    if not isinstance(count, int) or count <= 0:  # bool is an int here, as in AReaL
        raise bad_request("'count' must be a positive integer")
    return {"status": "success", "ports": state.ports.allocate(int(count)), "host": state.host}


def handle_fork(state: GuardState, body: JsonObject) -> JsonObject:
    role = require_scalar(body, "role")
    worker_index = require_scalar(body, "worker_index")
    raw_cmd = require_present(body, "raw_cmd")
    if not isinstance(raw_cmd, list):
        raise bad_request("'raw_cmd' must be a list")
    command = [str(arg) for arg in raw_cmd]  # AReaL quotes str(arg) of each element
    env_overrides = body.get("env", {})
    if not isinstance(env_overrides, dict):
        raise internal_error(f"'env' must be a dictionary, got {type(env_overrides).__name__}")
    child_env = {**os.environ, **env_overrides}
    child = state.children.start(role, worker_index, command, child_env, fork_log_dir(state.identity))
    logger.info("forked %s/%s as pid %d: %s", role, worker_index, child.process.pid, " ".join(command))
    return {"status": "success", "host": state.host, "pid": child.process.pid}


def handle_kill_forked_worker(state: GuardState, body: JsonObject) -> JsonObject:
    role = require_scalar(body, "role")
    worker_index = require_scalar(body, "worker_index")
    pid = state.children.kill(role, worker_index)
    message = f"Killed forked worker {role}/{worker_index} (pid={pid})"
    logger.info(message)
    return {"status": "success", "message": message}


def handle_set_env(_state: GuardState, body: JsonObject) -> JsonObject:
    env_updates = require_present(body, "env")
    if not isinstance(env_updates, dict):
        raise bad_request("'env' must be a dictionary")
    for name, value in env_updates.items():
        try:
            os.environ[name] = str(value)  # AReaL stringifies values the same way
        except (ValueError, OSError) as error:  # "=" or NUL in the name, or an empty name
            raise internal_error(str(error)) from error
    return {"status": "success"}


def config_seed(config: Any) -> Any:
    """``config.seed`` of the config AReaL's deserialize_value would rebuild: a serialized dataclass."""
    if isinstance(config, dict) and config.get("type") == "dataclass":
        data = config.get("data")
        if isinstance(data, dict) and "seed" in data:
            return data["seed"]
    raise internal_error(f"'{type(config).__name__}' object has no attribute 'seed'")


def handle_configure(state: GuardState, body: JsonObject) -> JsonObject:
    config = require_present(body, "config")
    rank = require_present(body, "rank")

    def store() -> None:
        config_seed(config)
        # AReaL seeds with its own --role; the "role" the controller sends is not used.
        state.configuration = {"config": config, "role": state.identity.role, "rank": rank}

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
        logger.error("engine '%s' failed to instantiate:\n%s", engine_name, error.traceback_text)
        raise HttpError(HTTPStatus.INTERNAL_SERVER_ERROR, f"Failed to instantiate engine: {error}") from error
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


def handle_call(state: GuardState, body: JsonObject) -> JsonObject:
    method_name = require_str(body, "method")
    engine_name = require_str(body, "engine_name")
    args = optional_list(body, "args")
    kwargs = optional_dict(body, "kwargs")
    rpc_meta = body.get("rpc_meta")
    if rpc_meta is not None and not isinstance(rpc_meta, dict):
        raise bad_request("'rpc_meta' must be a dictionary or null")
    engine = state.engines.get(engine_name)
    try:
        result = state.engines.call(engine, method_name, args, kwargs, rpc_meta)
    except NoSuchMethodError as error:
        raise bad_request(str(error)) from error
    except EngineCodeError as error:
        logger.error("engine method '%s' failed:\n%s", method_name, error.traceback_text)
        raise HttpError(
            HTTPStatus.INTERNAL_SERVER_ERROR, f"Engine method '{method_name}' failed: {error}"
        ) from error
    try:
        json.dumps(result)
    except (TypeError, ValueError) as error:
        raise internal_error(
            f"result of '{method_name}' is not JSON-serializable ({error}); "
            "typed tensor payloads are not supported by the reference guard"
        ) from error
    return {"status": "success", "result": result}


Handler = Callable[[GuardState, JsonObject], JsonObject]


class BodyRule(enum.Enum):
    NONE = "none"  # GET: no body
    GUARD = "guard"  # AReaL's guard routes: get_json(silent=True), None -> 400
    ENGINE = "engine"  # AReaL's engine routes: get_json(silent=True) or {}


@dataclass(frozen=True)
class Route:
    handler: Handler
    body: BodyRule


ROUTES: dict[tuple[str, str], Route] = {
    ("GET", "/health"): Route(handle_health, BodyRule.NONE),
    ("POST", "/alloc_ports"): Route(handle_alloc_ports, BodyRule.GUARD),
    ("POST", "/fork"): Route(handle_fork, BodyRule.GUARD),
    ("POST", "/kill_forked_worker"): Route(handle_kill_forked_worker, BodyRule.GUARD),
    ("POST", "/set_env"): Route(handle_set_env, BodyRule.GUARD),
    ("POST", "/configure"): Route(handle_configure, BodyRule.GUARD),
    ("POST", "/create_engine"): Route(handle_create_engine, BodyRule.ENGINE),
    ("POST", "/call"): Route(handle_call, BodyRule.ENGINE),
}


def decode_body(rule: BodyRule, content_type: str, raw_body: bytes) -> JsonObject:
    if rule is BodyRule.NONE:
        return {}
    data: Any = None
    if is_json_content_type(content_type):
        with contextlib.suppress(ValueError):  # JSONDecodeError and UnicodeDecodeError included
            data = json.loads(raw_body)
    if rule is BodyRule.GUARD and data is None:
        raise bad_request("Invalid JSON in request body")
    if rule is BodyRule.ENGINE and not data:
        data = {}
    if not isinstance(data, dict):
        raise internal_error(f"the request body must be a JSON object, not {type(data).__name__}")
    return data


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
    # Each JSON reply is written with one send (_send_json).  TCP_NODELAY as well, for the replies
    # BaseHTTPRequestHandler writes itself (send_error: headers, then body): on a keep-alive
    # connection Nagle's algorithm holds back such a second small write until the client ACKs the
    # first, and the client delays that ACK by ~40 ms.
    disable_nagle_algorithm = True

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
            route = self._route(http_method, path)
            body = decode_body(route.body, self.headers.get_content_type(), raw_body)
            status, payload = HTTPStatus.OK, route.handler(self.server.state, body)
        except HttpError as error:
            status, payload = error.status, {"error": error.message, **error.extra}
        except Exception as error:  # a bug here; AReaL's handlers answer anything unexpected the same way
            logger.exception("%s %s failed", http_method, path)
            status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"Internal server error: {error}"}
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
    def _route(http_method: str, path: str) -> Route:
        route = ROUTES.get((http_method, path))
        if route is not None:
            return route
        if any(route_path == path for _, route_path in ROUTES):
            raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{http_method} is not allowed on {path}")
        raise HttpError(HTTPStatus.NOT_FOUND, f"No such endpoint: {path}")

    def _send_json(self, status: HTTPStatus, payload: JsonObject) -> None:
        body = json.dumps(payload).encode()
        head = [
            f"{self.protocol_version} {status.value} {status.phrase}",
            f"Server: {self.version_string()}",
            f"Date: {self.date_time_string()}",
            "Content-Type: application/json",
            f"Content-Length: {len(body)}",
        ]
        if self.close_connection:
            head.append("Connection: close")
        # Status line, headers and body in a single write: see disable_nagle_algorithm.
        reply = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body
        try:
            self.wfile.write(reply)
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
    parser.add_argument(
        "--fileroot", type=str, default=None,
        help=f"root directory for forked workers' logs (default: {DEFAULT_LOG_ROOT})",
    )
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
