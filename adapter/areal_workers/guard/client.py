"""The controller side of the workers' guard HTTP API (AReaL's ``areal.infra.rpc.rpc_server``): the calls.

Each call sends its request with AReaL's retries, backoff and time-outs, and leaves the meaning of the reply, as
AReaL's exception or result, to ``guard.replies``.  The fork calls (``alloc_ports``, ``fork``, ``kill_forked``,
``wait_healthy``) are the steps of ``fork_workers``; the scheduler maps their errors.  How a request reaches a
guard (the pooled connections, one attempt, the liveness check after a connection error) is ``guard.transport``'s.

Request values are sent as plain JSON (``json.dumps``): serializing AReaL's typed values
(tensors, dataclasses) is the caller's job, and results are returned as decoded, not deserialized.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import requests

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
    unanswered,
)
from .transport import GuardTransport, Liveness

if TYPE_CHECKING:
    from ..areal_types import Worker

__all__ = ["CallOptions", "ForkError", "GuardClient", "Liveness", "guard_url"]

UnreachableNote = Callable[["Worker"], str]
"""Why a worker whose pod is alive may not answer (the release's NetworkPolicy), for the error that says so."""

HEALTH_PROBE_TIMEOUT = 2.0  # AReaL's per-probe time-out
FORK_REQUEST_TIMEOUT = 30.0


@dataclass(frozen=True)
class CallOptions:
    """How one engine call is sent: the keywords of AReaL's call_engine, passed down as one value."""

    rpc_meta: dict[str, Any] | None = None
    http_timeout: float = 7200.0
    max_retries: int = 3
    retry_delay: float = 1.0


DEFAULT_CALL = CallOptions()


# --------------------------------------------------------------------------- the client


class GuardClient(GuardTransport):
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
        super().__init__(liveness, connect_timeout=connect_timeout)
        self._check_first_attempt = check_first_attempt
        self._retry_sleep = retry_sleep
        self._async_retry_sleep = async_retry_sleep
        self.unreachable_note: UnreachableNote | None = None  # set by whoever knows the release's NetworkPolicy

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
        options: CallOptions = DEFAULT_CALL,
    ) -> Any:
        """POST /call with AReaL's retries; blocking, never touches an event loop."""
        payload = call_payload(method, engine_name, args, kwargs, options.rpc_meta)
        last: Retryable | None = None
        for attempt in range(1, options.max_retries + 1):
            if attempt > 1 or self._check_first_attempt:
                self._check_liveness(worker)
            outcome = self._call_attempt(worker, method, payload, attempt, options.http_timeout)
            if not isinstance(outcome, Retryable):
                return outcome
            last = outcome
            if attempt < options.max_retries:
                self._retry_sleep(backoff(options.retry_delay, attempt))
        raise self._noted(calls_exhausted(worker, method, options.max_retries, last), worker, last) from (
            last.error if last else None
        )

    async def async_call(
        self,
        worker: Worker,
        method: str,
        engine_name: str,
        args: list[Any],
        kwargs: dict[str, Any],
        options: CallOptions = DEFAULT_CALL,
    ) -> Any:
        """The asynchronous ``call``."""
        payload = call_payload(method, engine_name, args, kwargs, options.rpc_meta)
        last: Retryable | None = None
        for attempt in range(1, options.max_retries + 1):
            if attempt > 1 or self._check_first_attempt:
                await self._acheck_liveness(worker)
            outcome = await self._async_call_attempt(worker, method, payload, attempt, options.http_timeout)
            if not isinstance(outcome, Retryable):
                return outcome
            last = outcome
            if attempt < options.max_retries:
                await self._async_retry_sleep(backoff(options.retry_delay, attempt))
        raise self._noted(calls_exhausted(worker, method, options.max_retries, last), worker, last) from (
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
        failures.update({tasks[task].id: error for task in done if (error := task.result()) is not None})
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

    # ----------------------------------------------------------------------- the unreachable note

    def _noted(self, error: SchedulerError, worker: Worker, failure: NoReply | Retryable | None) -> SchedulerError:
        """`error`, with the unreachable note when `failure` was no connection at all (the pod was found alive)."""
        unreachable = isinstance(failure, NoReply) and failure.kind == "connection"
        unreachable = unreachable or (isinstance(failure, Retryable) and failure.unreachable)
        if unreachable and self.unreachable_note is not None:
            attach_diagnosis(error, self.unreachable_note(worker))
        return error
