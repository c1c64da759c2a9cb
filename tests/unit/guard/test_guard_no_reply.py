"""What each GuardClient call raises (or retries) when its request gets no reply: a connection error, a time-out or
another client error of requests or aiohttp, as AReaL's LocalScheduler maps them, with the worker's liveness
checked after a connection error (except for the fork requests). The transport is replaced by one that raises."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
import requests

from areal_workers.areal_types import Worker
from areal_workers.errors import (
    EngineCallError,
    EngineCreationError,
    RPCConnectionError,
    SchedulerError,
    WorkerConfigurationError,
)
from areal_workers.guard.client import CallOptions, GuardClient

WORKER = Worker(id="actor/0", ip="10.0.0.1", worker_ports=["8000"])
TIMEOUT = 5.0
ONCE = CallOptions(http_timeout=TIMEOUT, max_retries=1)


def connection(reason: str) -> RPCConnectionError:
    return RPCConnectionError("actor/0", "10.0.0.1", 8000, reason)


class RaisingSession:
    """requests.Session whose POST raises `error`."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def post(self, *args: Any, **kwargs: Any) -> Any:
        raise self.error


def client_raising(error: BaseException, checked: list[Worker]) -> GuardClient:
    client = GuardClient(liveness=checked.append, check_first_attempt=False)
    client._http.close()
    client._http = RaisingSession(error)  # type: ignore[assignment]

    async def request(method: str, url: str, payload: bytes | None, timeout: float) -> Any:
        raise error

    client._request = request  # type: ignore[method-assign]
    return client


def create_engine(client: GuardClient) -> Any:
    return asyncio.run(client.create_engine(WORKER, "pkg.Engine", "actor/0", [], {}, timeout=TIMEOUT))


def set_env(client: GuardClient) -> Any:
    return asyncio.run(client.set_env(WORKER, {"A": "1"}, timeout=TIMEOUT))


def async_call(client: GuardClient) -> Any:
    return asyncio.run(client.async_call(WORKER, "step", "actor/0", [], {}, ONCE))


def alloc_ports(client: GuardClient) -> Any:
    return asyncio.run(client.alloc_ports(WORKER, 2, timeout=TIMEOUT))


def call(client: GuardClient) -> Any:
    return client.call(WORKER, "step", "actor/0", [], {}, ONCE)


def configure(client: GuardClient) -> Any:
    return client.configure(WORKER, {"config": {}}, timeout=TIMEOUT)


DOWN = aiohttp.ClientConnectionError("down")
BAD = aiohttp.ClientPayloadError("bad")
SILENT_TIMEOUT = TimeoutError()  # aiohttp's total time-out: no message of its own
NO_REPLY = f"no reply within {TIMEOUT}s"

# (call, transport error, what it raises, liveness checks made)
CASES = [
    (create_engine, DOWN, connection("down"), 1),
    (create_engine, SILENT_TIMEOUT, EngineCreationError("actor/0", f"Request timed out: {NO_REPLY}"), 0),
    (create_engine, BAD, EngineCreationError("actor/0", "Unexpected error: bad"), 0),
    (set_env, DOWN, connection("down"), 2),  # set_env checks before it sends, too
    (set_env, SILENT_TIMEOUT, SchedulerError("actor/0", f"set_env timed out: {NO_REPLY}"), 1),
    (set_env, BAD, SchedulerError("actor/0", "set_env failed: bad"), 1),
    (async_call, DOWN, EngineCallError("actor/0", "step", "Connection error: down"), 1),
    (async_call, SILENT_TIMEOUT, EngineCallError("actor/0", "step", f"Timeout: {NO_REPLY}"), 0),
    (async_call, BAD, EngineCallError("actor/0", "step", "Unexpected error: bad"), 0),
    (alloc_ports, DOWN, connection("/alloc_ports: down"), 0),
    (alloc_ports, SILENT_TIMEOUT, connection(f"/alloc_ports: {NO_REPLY}"), 0),
    (alloc_ports, BAD, connection("/alloc_ports: bad"), 0),
    (call, requests.ConnectionError("down"), EngineCallError("actor/0", "step", "Connection error: down"), 1),
    # A connect time-out is both a connection error and a time-out: a connection problem.
    (call, requests.ConnectTimeout("no route"), EngineCallError("actor/0", "step", "Connection error: no route"), 1),
    (call, requests.ReadTimeout("slow"), EngineCallError("actor/0", "step", "Timeout: slow"), 0),
    (call, requests.exceptions.InvalidHeader("bad"), EngineCallError("actor/0", "step", "Unexpected error: bad"), 0),
    (configure, requests.ConnectionError("down"), connection("down"), 1),
    (configure, requests.ReadTimeout("slow"), WorkerConfigurationError("actor/0", "Request timed out: slow"), 0),
]


@pytest.mark.parametrize(
    "operation,error,expected,checks", CASES, ids=[f"{op.__name__}-{type(error).__name__}" for op, error, _, _ in CASES]
)
def test_a_request_without_reply_raises_what_areal_raises(operation, error, expected, checks):
    checked: list[Worker] = []
    with pytest.raises(SchedulerError) as raised:
        operation(client_raising(error, checked))
    assert (type(raised.value), str(raised.value)) == (type(expected), str(expected))
    assert raised.value.__cause__ is error
    assert len(checked) == checks


def test_a_configure_request_failing_otherwise_raises_the_client_error_itself():
    """AReaL's _configure_worker maps only connection errors and time-outs."""
    error = requests.exceptions.InvalidHeader("bad header")
    with pytest.raises(requests.exceptions.InvalidHeader) as raised:
        configure(client_raising(error, []))
    assert raised.value is error


def test_a_dead_worker_found_after_a_connection_error_raises_its_own_error():
    """The liveness check runs before the connection error is mapped: a dead pod's error wins."""

    class Dead(SchedulerError):
        pass

    def dead(worker: Worker) -> None:
        raise Dead(worker.id)

    client = client_raising(DOWN, [])
    client._liveness = dead
    with pytest.raises(Dead):
        create_engine(client)
