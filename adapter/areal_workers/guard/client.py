"""The controller side of the workers' guard HTTP API (AReaL's ``areal.infra.rpc.rpc_server``): the calls.

Each call sends its request with AReaL's retries, backoff and time-outs, and leaves the meaning of the reply, as
AReaL's exception or result, to ``guard.replies``.  The fork calls (``alloc_ports``, ``fork``, ``kill_forked``,
``wait_healthy``) are the steps of ``fork_workers``; the scheduler maps their errors.

Connections are pooled: one ``requests.Session`` for the synchronous calls and one
``aiohttp.ClientSession`` per event loop for the asynchronous ones, since an aiohttp session is
bound to the loop that created it and callers often run each coroutine in a fresh
``asyncio.run()``.  A loop's session is closed when that ``asyncio.run()`` ends, or by ``aclose()``
inside the loop.

Request values are sent as plain JSON (``json.dumps``): serializing AReaL's typed values
(tensors, dataclasses) is the caller's job, and results are returned as decoded, not deserialized.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import requests
from requests.adapters import HTTPAdapter

from ..errors import EngineCreationError, SchedulerError, WorkerConfigurationError, attach_diagnosis
from .replies import (
    ForkError,
    NoReply,
    Reply,
    Retryable,
    allocated_ports,
    backoff,
    body_text,
    call_outcome,
    call_payload,
    calls_exhausted,
    check_configured,
    check_env_set,
    connection_error,
    created_engine_result,
    encode,
    error_message,
    forked,
    guard_url,
    hostport,
    json_object,
    retryable,
    timeout_text,
    unanswered,
)

if TYPE_CHECKING:
    from ..areal_types import Worker

__all__ = ["ForkError", "GuardClient", "Liveness", "guard_url"]

Liveness = Callable[["Worker"], None]
"""Raises WorkerFailedError (with a diagnosis) if the worker's pod or container is dead."""
UnreachableNote = Callable[["Worker"], str]
"""Why a worker whose pod is alive may not answer (the release's NetworkPolicy), for the error that says so."""

POOL_SIZE = 256  # connections kept per worker host, and worker hosts kept, by the sync session
READ_BUFSIZE = 10 * 1024 * 1024  # AReaL's value: replies can carry large serialized tensors
HEALTH_PROBE_TIMEOUT = 2.0  # AReaL's per-probe time-out
FORK_REQUEST_TIMEOUT = 30.0
JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class _LoopSession:
    session: aiohttp.ClientSession
    closer: asyncio.Task[None]


def _pooled_http_session() -> requests.Session:
    session = requests.Session()
    # Workers are reached at their pod IPs, never through an HTTP(S)_PROXY of the environment
    # (aiohttp ignores those by default too).
    session.trust_env = False
    # HTTPAdapter does not retry by default: retries are AReaL's, implemented below.
    session.mount("http://", HTTPAdapter(pool_connections=POOL_SIZE, pool_maxsize=POOL_SIZE))
    return session


# --------------------------------------------------------------------------- the client


class GuardClient:
    """HTTP client of the workers' guards, shared by all workers of a scheduler.

    ``liveness(worker)`` is called before every attempt of ``call``/``async_call`` and after a
    connection error (as AReaL checks the worker process), so a dead pod surfaces as its
    WorkerFailedError instead of a connection error.  With ``check_first_attempt=False`` the check
    before the first attempt is left out: where liveness costs an API request, a healthy call then
    costs none.  ``retry_sleep``/``async_retry_sleep`` wait out the retry backoff (replaceable in tests).
    """

    def __init__(
        self,
        liveness: Liveness | None = None,
        *,
        connect_timeout: float = 10.0,
        check_first_attempt: bool = True,
        retry_sleep: Callable[[float], None] = time.sleep,
        async_retry_sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._liveness = liveness
        self._connect_timeout = connect_timeout
        self._check_first_attempt = check_first_attempt
        self._retry_sleep = retry_sleep
        self._async_retry_sleep = async_retry_sleep
        self._http = _pooled_http_session()
        self.unreachable_note: UnreachableNote | None = None  # set by whoever knows the release's NetworkPolicy
        # Weakly keyed so that a forgotten loop is not kept alive; entries are also removed when
        # their loop's asyncio.run() ends (the session refers to its loop).
        self._loop_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopSession] = (
            weakref.WeakKeyDictionary()
        )

    # ----------------------------------------------------------------------- engines

    async def create_engine(
        self,
        worker: Worker,
        engine: str,
        engine_name: str,
        init_args: list[Any],
        init_kwargs: dict[str, Any],
        timeout: float = 300.0,
    ) -> Any:
        """POST /create_engine once; returns the reply's raw "result" (AReaL does not deserialize it)."""
        if not isinstance(engine, str):
            raise EngineCreationError(worker.id, f"Engine must be a string import path, got {type(engine)}")
        payload = encode(
            {"engine": engine, "engine_name": engine_name, "init_args": init_args, "init_kwargs": init_kwargs}
        )
        reply = await self._async_attempt(worker, "/create_engine", payload, timeout)
        if isinstance(reply, NoReply):
            raise self._noted(
                unanswered(worker, reply, EngineCreationError, "Request timed out", "Unexpected error"), worker, reply
            ) from reply.error
        return created_engine_result(worker, engine, reply)

    async def set_env(self, worker: Worker, env: dict[str, str], timeout: float = 30.0) -> None:
        """POST /set_env on the guard; the worker's liveness is checked first, even for an empty env."""
        await self._acheck_liveness(worker)
        if not env:
            return
        reply = await self._async_attempt(worker, "/set_env", encode({"env": env}), timeout)
        if isinstance(reply, NoReply):
            error = unanswered(worker, reply, SchedulerError, "set_env timed out", "set_env failed")
            raise self._noted(error, worker, reply) from reply.error
        check_env_set(worker, reply)

    def call(
        self,
        worker: Worker,
        method: str,
        engine_name: str,
        args: list[Any],
        kwargs: dict[str, Any],
        rpc_meta: dict[str, Any] | None,
        *,
        http_timeout: float = 7200.0,
        max_retries: int = 3,
        retry_delay: float = 1.0,
    ) -> Any:
        """POST /call with AReaL's retries; blocking, never touches an event loop."""
        payload = call_payload(method, engine_name, args, kwargs, rpc_meta)
        last: Retryable | None = None
        for attempt in range(1, max_retries + 1):
            if attempt > 1 or self._check_first_attempt:
                self._check_liveness(worker)
            outcome = self._call_attempt(worker, method, payload, attempt, http_timeout)
            if not isinstance(outcome, Retryable):
                return outcome
            last = outcome
            if attempt < max_retries:
                self._retry_sleep(backoff(retry_delay, attempt))
        raise self._noted(calls_exhausted(worker, method, max_retries, last), worker, last) from (
            last.error if last else None
        )

    async def async_call(
        self,
        worker: Worker,
        method: str,
        engine_name: str,
        args: list[Any],
        kwargs: dict[str, Any],
        rpc_meta: dict[str, Any] | None,
        *,
        http_timeout: float = 7200.0,
        max_retries: int = 3,
        retry_delay: float = 1.0,
    ) -> Any:
        """The asynchronous ``call``."""
        payload = call_payload(method, engine_name, args, kwargs, rpc_meta)
        last: Retryable | None = None
        for attempt in range(1, max_retries + 1):
            if attempt > 1 or self._check_first_attempt:
                await self._acheck_liveness(worker)
            outcome = await self._async_call_attempt(worker, method, payload, attempt, http_timeout)
            if not isinstance(outcome, Retryable):
                return outcome
            last = outcome
            if attempt < max_retries:
                await self._async_retry_sleep(backoff(retry_delay, attempt))
        raise self._noted(calls_exhausted(worker, method, max_retries, last), worker, last) from (
            last.error if last else None
        )

    def _call_attempt(self, worker: Worker, method: str, payload: bytes, attempt: int, timeout: float) -> Any:
        reply = self._sync_attempt(worker, "/call", payload, timeout)
        return retryable(reply) if isinstance(reply, NoReply) else call_outcome(worker, method, attempt, reply)

    async def _async_call_attempt(
        self, worker: Worker, method: str, payload: bytes, attempt: int, timeout: float
    ) -> Any:
        reply = await self._async_attempt(worker, "/call", payload, timeout)
        return retryable(reply) if isinstance(reply, NoReply) else call_outcome(worker, method, attempt, reply)

    async def destroy_engines(self, workers: list[Worker], timeout: float) -> dict[str, str]:
        """POST /call {"method": "destroy"} to each worker's own engine, all at once, within `timeout` seconds
        in total (AReaL's Slurm scheduler does this before it ends workers, so every rank reaches the engines'
        teardown barrier together). Never raises: returns, per worker id, what did not succeed."""
        payloads = {w.id: call_payload("destroy", w.id, [], {}, None) for w in workers}

        async def destroy(worker: Worker) -> str | None:
            try:
                reply = await self._post(worker, "/call", payloads[worker.id], timeout)
            except (aiohttp.ClientError, asyncio.TimeoutError) as error:
                return f"{type(error).__name__}: {error}"
            return None if reply.status == 200 else f"HTTP {reply.status}: {error_message(reply.body)}"

        if not workers:
            return {}
        tasks = {asyncio.ensure_future(destroy(w)): w for w in workers}
        done, pending = await asyncio.wait(tasks, timeout=timeout)
        for task in pending:
            task.cancel()
        failures = {tasks[task].id: f"no reply within {timeout}s" for task in pending}
        failures.update({tasks[task].id: task.result() for task in done if task.result() is not None})
        return failures

    # ----------------------------------------------------------------------- forks and health

    async def alloc_ports(
        self, worker: Worker, count: int, *, timeout: float = FORK_REQUEST_TIMEOUT
    ) -> tuple[str, list[int]]:
        """POST /alloc_ports: (host, ports) free on the worker's host.  Transport failures raise
        RPCConnectionError, refusals PortAllocationError."""
        reply = await self._fork_request(worker, "/alloc_ports", {"count": count}, timeout)
        return allocated_ports(worker, reply)

    async def fork(
        self,
        worker: Worker,
        role: str,
        worker_index: int,
        raw_cmd: list[str],
        env: dict[str, str] | None = None,
        *,
        timeout: float = FORK_REQUEST_TIMEOUT,
    ) -> dict[str, Any]:
        """POST /fork: starts ``raw_cmd`` as a child of the worker's guard; returns the reply
        (``status``, ``host``, ``pid``).  ``env`` entries override the guard's environment (AReaL
        sends none).  Transport failures raise RPCConnectionError, refusals ForkError."""
        payload: dict[str, Any] = {"role": role, "worker_index": worker_index, "raw_cmd": raw_cmd}
        if env is not None:
            payload["env"] = env
        reply = await self._fork_request(worker, "/fork", payload, timeout)
        return forked(worker, reply)

    async def kill_forked(
        self, worker: Worker, role: str, worker_index: int, *, timeout: float = FORK_REQUEST_TIMEOUT
    ) -> int:
        """POST /kill_forked_worker; returns the status: 200 killed, 404 already gone, 500 the kill
        failed.  Transport failures raise RPCConnectionError."""
        payload = {"role": role, "worker_index": worker_index}
        reply = await self._fork_request(worker, "/kill_forked_worker", payload, timeout)
        return reply.status

    async def wait_healthy(self, host: str, port: int, timeout: float, interval: float = 0.5) -> None:
        """Polls GET http://host:port/health until it answers 200; raises TimeoutError with the last
        failure after ``timeout`` seconds."""
        url = f"http://{hostport(host, port)}/health"
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        last_error = "no probe completed"
        while (remaining := deadline - loop.time()) > 0:
            probe_timeout = min(HEALTH_PROBE_TIMEOUT, remaining)
            try:
                reply = await self._request("GET", url, None, probe_timeout)
            except aiohttp.ClientError as error:
                last_error = f"{type(error).__name__}: {error}"
            except asyncio.TimeoutError:
                last_error = f"no reply within {probe_timeout:.1f}s"
            else:
                if reply.status == 200:
                    return
                last_error = f"HTTP {reply.status}: {body_text(reply.body)}"
            await asyncio.sleep(min(interval, max(0.0, deadline - loop.time())))
        raise TimeoutError(f"{url} not healthy within {timeout}s; last error: {last_error}")

    def configure(self, worker: Worker, payload: Any, timeout: float = 300.0) -> None:
        """POST /configure with the serialized {config, role, rank}, mapped as AReaL's _configure_worker does."""
        reply = self._sync_attempt(worker, "/configure", encode(payload), timeout)
        if isinstance(reply, NoReply):
            if reply.kind == "connection":
                raise self._noted(connection_error(worker, reply.text), worker, reply) from reply.error
            if reply.kind == "timeout":
                raise WorkerConfigurationError(worker.id, f"Request timed out: {reply.text}") from reply.error
            raise reply.error  # AReaL's _configure_worker maps no other client error
        check_configured(worker, reply)

    def health(self, worker: Worker, timeout: float = HEALTH_PROBE_TIMEOUT) -> dict[str, Any] | None:
        """GET /health: the reply when it is 200 with a JSON object, else None."""
        try:
            response = self._http.get(guard_url(worker) + "/health", timeout=self._requests_timeout(timeout))
        except requests.RequestException:
            return None
        if response.status_code != 200:
            return None
        return json_object(response.content)

    async def _fork_request(self, worker: Worker, path: str, payload: dict[str, Any], timeout: float) -> Reply:
        reply = await self._async_attempt(worker, path, encode(payload), timeout, check_liveness=False)
        if isinstance(reply, NoReply):
            raise self._noted(connection_error(worker, f"{path}: {reply.text}"), worker, reply) from reply.error
        return reply

    # ----------------------------------------------------------------------- liveness and transport

    def _noted(self, error: SchedulerError, worker: Worker, failure: NoReply | Retryable | None) -> SchedulerError:
        """`error`, with the unreachable note when `failure` was no connection at all (the pod was found alive)."""
        unreachable = isinstance(failure, NoReply) and failure.kind == "connection"
        unreachable = unreachable or (isinstance(failure, Retryable) and failure.unreachable)
        if unreachable and self.unreachable_note is not None:
            attach_diagnosis(error, self.unreachable_note(worker))
        return error

    def _check_liveness(self, worker: Worker) -> None:
        if self._liveness is not None:
            self._liveness(worker)

    async def _acheck_liveness(self, worker: Worker) -> None:
        if self._liveness is not None:
            # It queries the Kubernetes API: blocking, so off the loop.
            await asyncio.to_thread(self._liveness, worker)

    def _requests_timeout(self, timeout: float) -> tuple[float, float]:
        return min(self._connect_timeout, timeout), timeout

    def _sync_attempt(self, worker: Worker, path: str, payload: bytes, timeout: float) -> Reply | NoReply:
        """POST `path` with requests: the reply, or why none came (after a connection error the worker's liveness
        is checked, so a dead pod raises its WorkerFailedError instead)."""
        try:
            response = self._http.post(
                guard_url(worker) + path, data=payload, headers=JSON_HEADERS, timeout=self._requests_timeout(timeout)
            )
        # ConnectTimeout is both; an unreachable pod is a connection problem.
        except requests.ConnectionError as error:
            self._check_liveness(worker)
            return NoReply("connection", str(error), error)
        except requests.Timeout as error:
            return NoReply("timeout", str(error), error)
        except requests.RequestException as error:
            return NoReply("other", str(error), error)
        return Reply(response.status_code, response.content)

    async def _async_attempt(
        self, worker: Worker, path: str, payload: bytes, timeout: float, *, check_liveness: bool = True
    ) -> Reply | NoReply:
        """POST `path` with aiohttp: the reply, or why none came (see _sync_attempt; `check_liveness` False: not
        checked)."""
        try:
            return await self._post(worker, path, payload, timeout)
        # aiohttp's connect time-out is both; an unreachable pod is a connection problem.
        except aiohttp.ClientConnectionError as error:
            if check_liveness:
                await self._acheck_liveness(worker)
            return NoReply("connection", str(error), error)
        except asyncio.TimeoutError as error:
            return NoReply("timeout", timeout_text(error, timeout), error)
        except aiohttp.ClientError as error:
            return NoReply("other", str(error), error)

    async def _post(self, worker: Worker, path: str, payload: bytes, timeout: float) -> Reply:
        return await self._request("POST", guard_url(worker) + path, payload, timeout)

    async def _request(self, method: str, url: str, payload: bytes | None, timeout: float) -> Reply:
        client_timeout = aiohttp.ClientTimeout(total=timeout, sock_connect=min(self._connect_timeout, timeout))
        headers = JSON_HEADERS if payload is not None else None
        async with self._session().request(
            method, url, data=payload, headers=headers, timeout=client_timeout
        ) as response:
            return Reply(response.status, await response.read())

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()  # raises outside a running loop, where no session may be made
        entry = self._loop_sessions.get(loop)
        if entry is None:
            # No connection limit: calls may run for hours (http_timeout 7200 s), and a capped
            # pool would queue every other worker's calls behind them.
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), read_bufsize=READ_BUFSIZE)
            entry = _LoopSession(session, loop.create_task(self._close_at_loop_end(loop, session)))
            self._loop_sessions[loop] = entry
        return entry.session

    async def _close_at_loop_end(self, loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession) -> None:
        # asyncio.run() cancels the tasks still pending when its coroutine returns and waits for
        # them, so this closes the session inside its own loop, the only place it can be closed
        # cleanly.  A loop closed without cancelling its tasks needs aclose() instead.
        try:
            await loop.create_future()
        finally:
            entry = self._loop_sessions.get(loop)
            if entry is not None and entry.session is session:
                del self._loop_sessions[loop]
            await session.close()

    # ----------------------------------------------------------------------- closing

    def close(self) -> None:
        """Closes the synchronous session.  Asynchronous sessions close with their loop's
        asyncio.run(), or through aclose() inside that loop."""
        self._http.close()

    async def aclose(self) -> None:
        """Closes the current loop's session; those of other loops close with their loop's
        asyncio.run(), or through aclose() inside them."""
        entry = self._loop_sessions.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            entry.closer.cancel()
            await entry.session.close()
