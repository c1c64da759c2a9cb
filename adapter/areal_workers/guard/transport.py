"""How ``guard.client.GuardClient`` reaches the workers' guards: pooled connections, one attempt of a request, and
the worker's liveness check after a connection error.

Connections are pooled: one ``requests.Session`` for the synchronous calls and one
``aiohttp.ClientSession`` per event loop for the asynchronous ones, since an aiohttp session is
bound to the loop that created it and callers often run each coroutine in a fresh
``asyncio.run()``.  A loop's session is closed when that ``asyncio.run()`` ends, or by ``aclose()``
inside the loop.

An attempt returns the guard's ``Reply``, or a ``NoReply`` saying why none came; what either means is the
client's and ``guard.replies``'.  Nothing here retries.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp
import requests
from requests.adapters import HTTPAdapter

from ..errors import WorkerFailedError
from ..observer import NO_OBSERVER, Observer
from .replies import NoReply, Reply, guard_url, timeout_text

if TYPE_CHECKING:
    from ..areal_types import Worker

Liveness = Callable[["Worker"], None]
"""Raises WorkerFailedError (with a diagnosis) if the worker's pod or container is dead."""

POOL_SIZE = 256  # connections kept per worker host, and worker hosts kept, by the sync session
READ_BUFSIZE = 10 * 1024 * 1024  # AReaL's value: replies can carry large serialized tensors
JSON_HEADERS = {"Content-Type": "application/json"}


def attempt_error(reply: Reply | NoReply) -> str | None:
    """An attempt's error for the metrics: why no reply came, or the class of an HTTP error status."""
    if isinstance(reply, NoReply):
        return reply.kind
    return f"http_{reply.status // 100}xx" if reply.status >= 400 else None


@dataclass(frozen=True)
class _LoopSession:
    session: aiohttp.ClientSession
    closer: asyncio.Task[None]


def _pooled_http_session() -> requests.Session:
    session = requests.Session()
    # Workers are reached at their pod IPs, never through an HTTP(S)_PROXY of the environment
    # (aiohttp ignores those by default too).
    session.trust_env = False
    # HTTPAdapter does not retry by default: retries are AReaL's, implemented by the client.
    session.mount("http://", HTTPAdapter(pool_connections=POOL_SIZE, pool_maxsize=POOL_SIZE))
    return session


class GuardTransport:
    """The connections of one GuardClient and single attempts over them; ``liveness`` (None: not checked) is what a
    connection error checks before it is reported, so a dead pod raises its WorkerFailedError instead."""

    def __init__(self, liveness: Liveness | None = None, *, connect_timeout: float = 10.0) -> None:
        self._liveness = liveness
        self._connect_timeout = connect_timeout
        self._http = _pooled_http_session()
        self.observer: Observer = NO_OBSERVER  # the scheduler's metrics, when it serves them
        # Weakly keyed so that a forgotten loop is not kept alive; entries are also removed when
        # their loop's asyncio.run() ends (the session refers to its loop).
        self._loop_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopSession] = (
            weakref.WeakKeyDictionary()
        )

    # ----------------------------------------------------------------------- liveness

    def _check_liveness(self, worker: Worker) -> None:
        if self._liveness is not None:
            self._liveness(worker)

    async def _acheck_liveness(self, worker: Worker) -> None:
        if self._liveness is not None:
            # It queries the Kubernetes API: blocking, so off the loop.
            await asyncio.to_thread(self._liveness, worker)

    # ----------------------------------------------------------------------- attempts

    def _requests_timeout(self, timeout: float) -> tuple[float, float]:
        return min(self._connect_timeout, timeout), timeout

    def _sync_attempt(self, worker: Worker, path: str, payload: bytes, timeout: float) -> Reply | NoReply:
        start = time.monotonic()
        try:
            reply = self._sync_post(worker, path, payload, timeout)
        except WorkerFailedError:  # no connection, and the liveness check found the pod dead
            self.observer.guard_request(path, time.monotonic() - start, "connection")
            raise
        self.observer.guard_request(path, time.monotonic() - start, attempt_error(reply))
        return reply

    def _sync_post(self, worker: Worker, path: str, payload: bytes, timeout: float) -> Reply | NoReply:
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
        start = time.monotonic()
        try:
            reply = await self._async_post(worker, path, payload, timeout, check_liveness)
        except WorkerFailedError:  # as in _sync_attempt
            self.observer.guard_request(path, time.monotonic() - start, "connection")
            raise
        self.observer.guard_request(path, time.monotonic() - start, attempt_error(reply))
        return reply

    async def _async_post(
        self, worker: Worker, path: str, payload: bytes, timeout: float, check_liveness: bool
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

    # ----------------------------------------------------------------------- the loops' sessions

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()  # raises outside a running loop, where no session may be made
        entry = self._loop_sessions.get(loop)
        if entry is None:
            self._drop_closed_loops()
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

    def _drop_closed_loops(self) -> None:
        """Closes the sessions of loops closed without cancelling their tasks (AReaL's RolloutController serves
        its callbacks from such a loop): their closer can never run, and their session and pending task would be
        reported at exit ("Unclosed client session", "Task was destroyed but it is pending")."""
        for loop, entry in list(self._loop_sessions.items()):
            if loop.is_closed():
                del self._loop_sessions[loop]
                entry.closer._log_destroy_pending = False  # type: ignore[attr-defined]  # asyncio's own switch
                entry.session.connector._close(abort_ssl=True)  # type: ignore[union-attr]  # no loop to await in

    def close(self) -> None:
        """Closes the synchronous session and those of loops already closed.  Asynchronous sessions of other
        loops close with their loop's asyncio.run(), or through aclose() inside that loop."""
        self._http.close()
        self._drop_closed_loops()

    async def aclose(self) -> None:
        """Closes the current loop's session; those of other loops close with their loop's
        asyncio.run(), or through aclose() inside them."""
        entry = self._loop_sessions.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            entry.closer.cancel()
            await entry.session.close()
