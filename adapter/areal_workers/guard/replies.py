"""What each HTTP outcome of a worker's guard means, as AReaL's scheduler exceptions.

HTTP outcomes map to AReaL's scheduler exceptions exactly as AReaL's LocalScheduler maps them in
``create_engine``, ``set_worker_env`` and ``call_engine`` / ``async_call_engine`` (status codes, and which
failures are retried).  The fork replies (``alloc_ports``, ``fork``) are read here too; the scheduler maps
their errors.  Also the guard's address, and the encoding of request and reply bodies.

Nothing here does I/O: ``guard.client.GuardClient`` sends the requests and hands the replies to these functions.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..errors import (
    EngineCallError,
    EngineCreationError,
    EngineImportError,
    PortAllocationError,
    RPCConnectionError,
    SchedulerError,
    WorkerConfigurationError,
)

if TYPE_CHECKING:
    from ..areal_types import Worker

ERROR_TEXT_LIMIT = 2000


class ForkError(SchedulerError):
    """POST /fork was refused, or answered without ``"status": "success"``."""

    def __init__(self, worker_id: str, status: int, text: str) -> None:
        self.worker_id, self.status, self.text = worker_id, status, text
        super().__init__(f"Fork on worker '{worker_id}' failed: HTTP {status}: {text}")


@dataclass(frozen=True)
class Reply:
    """An HTTP reply of a guard: its status and raw body."""

    status: int
    body: bytes


@dataclass(frozen=True)
class Retryable:
    """A failed call attempt of the kind AReaL retries."""

    reason: str
    error: BaseException | None = None
    unreachable: bool = False  # no connection to the worker (refused, dropped, no route)


@dataclass(frozen=True)
class NoReply:
    """A request that got no reply: a connection error, a time-out or another client error of the HTTP library,
    with the error's text (a time-out's says how long it waited)."""

    kind: Literal["connection", "timeout", "other"]
    text: str
    error: BaseException


# --------------------------------------------------------------------------- addresses


def hostport(host: str, port: int | str) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def guard_port(worker: Worker) -> int:
    if not worker.worker_ports:
        raise ValueError(f"Worker '{worker.id}' has no guard port (worker_ports is empty)")
    return int(worker.worker_ports[0])


def guard_url(worker: Worker) -> str:
    """http://ip:worker_ports[0], the worker's guard."""
    return f"http://{hostport(worker.ip, guard_port(worker))}"


# --------------------------------------------------------------------------- bodies


def encode(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


def call_payload(
    method: str, engine_name: str, args: list[Any], kwargs: dict[str, Any], rpc_meta: dict[str, Any] | None
) -> bytes:
    return encode({"method": method, "engine_name": engine_name, "args": args, "kwargs": kwargs, "rpc_meta": rpc_meta})


def decode_object(body: bytes) -> dict[str, Any]:
    """Raises ValueError (JSONDecodeError, UnicodeDecodeError included) unless body is a JSON object."""
    decoded = json.loads(body)
    if not isinstance(decoded, dict):
        raise ValueError(f"expected a JSON object, got {type(decoded).__name__}")
    return decoded


def json_object(body: bytes) -> dict[str, Any] | None:
    """The body's JSON object, or None when it is not one."""
    try:
        return decode_object(body)
    except ValueError:
        return None


def body_text(body: bytes) -> str:
    """The body as text for an error message, cut to ERROR_TEXT_LIMIT characters."""
    return body.decode(errors="replace").strip()[:ERROR_TEXT_LIMIT]


def error_message(body: bytes) -> str:
    """The guard's "error" field; the raw text for replies from something else (e.g. a proxy)."""
    decoded = json_object(body)
    if decoded is not None:
        return str(decoded.get("error", "Unknown error"))
    return body_text(body) or "Unknown error"


# --------------------------------------------------------------------------- transport failures and retries


def timeout_text(error: BaseException, timeout: float) -> str:
    # aiohttp's total time-out is a bare asyncio.TimeoutError with an empty message.
    return str(error) or f"no reply within {timeout}s"


def backoff(retry_delay: float, attempt: int) -> float:
    """AReaL's wait before the attempt after `attempt`: doubling from retry_delay."""
    return retry_delay * 2.0 ** (attempt - 1)


def connection_error(worker: Worker, reason: str) -> RPCConnectionError:
    return RPCConnectionError(worker.id, worker.ip, guard_port(worker), reason)


# How AReaL words each kind of NoReply in a call attempt it retries.
RETRY_REASONS = {"connection": "Connection error", "timeout": "Timeout", "other": "Unexpected error"}


def retryable(no_reply: NoReply) -> Retryable:
    return Retryable(f"{RETRY_REASONS[no_reply.kind]}: {no_reply.text}", no_reply.error, no_reply.kind == "connection")


def unanswered(
    worker: Worker, no_reply: NoReply, error_type: Callable[[str, str], SchedulerError], timed_out: str, failed: str
) -> SchedulerError:
    """AReaL's error for a request that is not retried: RPCConnectionError for a connection error, else
    `error_type(worker.id, "<timed_out or failed>: <text>")`."""
    if no_reply.kind == "connection":
        return connection_error(worker, no_reply.text)
    return error_type(worker.id, f"{timed_out if no_reply.kind == 'timeout' else failed}: {no_reply.text}")


# --------------------------------------------------------------------------- replies of each call


def created_engine_result(worker: Worker, engine: str, reply: Reply) -> Any:
    """AReaL's create_engine mapping: the raw "result" on 200, else the matching exception."""
    if reply.status == 200:
        try:
            return decode_object(reply.body).get("result")
        except ValueError as error:
            raise EngineCreationError(worker.id, f"Unexpected error: invalid reply body: {error}") from error
    message = error_message(reply.body)
    if reply.status == 400:
        if "Failed to import" in message:
            raise EngineImportError(engine, message)
        raise EngineCreationError(worker.id, message, 400)
    if reply.status == 500:
        raise EngineCreationError(worker.id, message, 500)
    raise EngineCreationError(worker.id, f"Unexpected status code: {reply.status}", reply.status)


def call_outcome(worker: Worker, method: str, attempt: int, reply: Reply) -> Any:
    """The call's result or a Retryable; raises EngineCallError on 400 and 500, never retried by AReaL."""
    if reply.status == 200:
        try:
            return decode_object(reply.body)["result"]
        except (ValueError, KeyError) as error:
            return Retryable(f"Unexpected error: invalid reply body: {error!r}", error)
    if reply.status in (400, 500):
        raise EngineCallError(worker.id, method, error_message(reply.body), attempt)
    return Retryable(f"HTTP {reply.status}: {error_message(reply.body)}")


def calls_exhausted(worker: Worker, method: str, max_retries: int, last: Retryable | None) -> EngineCallError:
    reason = last.reason if last is not None else "Max retries exceeded"
    return EngineCallError(worker.id, method, reason, attempt=max_retries)


def check_env_set(worker: Worker, reply: Reply) -> None:
    """AReaL's set_worker_env mapping: anything but 200 is a SchedulerError."""
    if reply.status != 200:
        raise SchedulerError(
            worker.id, f"Failed to set env on worker (status={reply.status}): {error_message(reply.body)}"
        )


def check_configured(worker: Worker, reply: Reply) -> None:
    """AReaL's _configure_worker mapping of a /configure reply."""
    if reply.status in (400, 500):
        raise WorkerConfigurationError(worker.id, error_message(reply.body), str(reply.status))
    if reply.status != 200:
        raise WorkerConfigurationError(worker.id, f"Unexpected status code: {reply.status}", str(reply.status))


def allocated_ports(worker: Worker, reply: Reply) -> tuple[str, list[int]]:
    """(host, ports) of an /alloc_ports reply; PortAllocationError for a refusal or a malformed reply."""
    refused = PortAllocationError(f"worker '{worker.id}': HTTP {reply.status}: {body_text(reply.body)}")
    body = json_object(reply.body)
    if reply.status != 200 or body is None:
        raise refused
    try:
        return str(body["host"]), [int(port) for port in body["ports"]]
    except (KeyError, TypeError, ValueError) as error:
        raise refused from error


def forked(worker: Worker, reply: Reply) -> dict[str, Any]:
    """The body of a successful /fork reply (``status``, ``host``, ``pid``); ForkError otherwise."""
    body = json_object(reply.body)
    if reply.status != 200 or body is None or body.get("status") != "success":
        raise ForkError(worker.id, reply.status, body_text(reply.body))
    return body
