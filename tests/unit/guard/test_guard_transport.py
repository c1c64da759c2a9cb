"""GuardTransport (guard/transport.py): one attempt of a request to a worker's guard, as a Reply or a NoReply of the
right kind (a connection error checks the worker's liveness first, a time-out does not), the pooled sync session
that ignores proxies and never retries, and one aiohttp session per event loop, closed with its loop. The sync
session is a fake; the async attempts go to a small HTTP server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import gc
import http.server
import threading
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
import requests

from areal_workers.areal_types import Worker
from areal_workers.errors import WorkerFailedError
from areal_workers.guard import transport
from areal_workers.guard.replies import NoReply, Reply
from areal_workers.guard.transport import GuardTransport

WORKER = Worker(id="actor/0", ip="127.30.0.7", worker_ports=["8000", "8001"])


class Liveness:
    """Records the workers checked; `dead` makes the check raise as the finder's does for a gone pod."""

    def __init__(self, dead: bool = False) -> None:
        self.checked: list[str] = []
        self.threads: list[threading.Thread] = []
        self.dead = dead

    def __call__(self, worker: Worker) -> None:
        self.checked.append(worker.id)
        self.threads.append(threading.current_thread())
        if self.dead:
            raise WorkerFailedError(worker.id, -1, "pod gone")


class FakeHttp:
    """requests.Session.post: records each request and raises `error` or answers `status`."""

    def __init__(self, error: BaseException | None = None, status: int = 200) -> None:
        self.error, self.status = error, status
        self.posts: list[tuple[str, dict[str, Any]]] = []
        self.closed = False

    def post(self, url: str, **kwargs: Any) -> Any:
        self.posts.append((url, kwargs))
        if self.error is not None:
            raise self.error
        response = requests.Response()
        response.status_code, response._content = self.status, b'{"ok": true}'
        return response

    def close(self) -> None:
        self.closed = True


def with_http(fake: FakeHttp, liveness: Liveness | None = None, connect_timeout: float = 10.0) -> GuardTransport:
    made = GuardTransport(liveness, connect_timeout=connect_timeout)
    made._http.close()
    made._http = fake  # type: ignore[assignment]
    return made


# --- the sync session -------------------------------------------------------------------------------------


def test_the_sync_session_ignores_proxies_pools_per_host_and_never_retries():
    session = transport._pooled_http_session()
    try:
        assert session.trust_env is False
        adapter = session.get_adapter("http://127.30.0.7:8000/call")
        assert adapter._pool_connections == transport.POOL_SIZE and adapter._pool_maxsize == transport.POOL_SIZE
        assert adapter.max_retries.total == 0
    finally:
        session.close()


def test_a_sync_attempt_posts_json_to_the_guard_with_the_connect_timeout_capped_by_the_timeout():
    fake = FakeHttp(status=201)
    attempt = with_http(fake, connect_timeout=10.0)
    assert attempt._sync_attempt(WORKER, "/call", b"{}", 300.0) == Reply(201, b'{"ok": true}')
    assert attempt._sync_attempt(WORKER, "/health", b"", 2.0) == Reply(201, b'{"ok": true}')
    assert fake.posts == [
        ("http://127.30.0.7:8000/call", {"data": b"{}", "headers": transport.JSON_HEADERS, "timeout": (10.0, 300.0)}),
        ("http://127.30.0.7:8000/health", {"data": b"", "headers": transport.JSON_HEADERS, "timeout": (2.0, 2.0)}),
    ]


def test_an_ipv6_worker_is_reached_in_brackets():
    fake = FakeHttp()
    with_http(fake)._sync_attempt(Worker(id="a/0", ip="fd00::7", worker_ports=["8000"]), "/call", b"", 1.0)
    assert fake.posts[0][0] == "http://[fd00::7]:8000/call"


@pytest.mark.parametrize(
    ("error", "kind", "checked"),
    [
        (requests.ConnectionError("refused"), "connection", True),
        (requests.ConnectTimeout("connect timed out"), "connection", True),  # both: a connection problem
        (requests.ReadTimeout("read timed out"), "timeout", False),
        (requests.TooManyRedirects("redirects"), "other", False),
    ],
)
def test_a_sync_attempt_without_reply_says_why_and_checks_liveness_after_connection_errors(error, kind, checked):
    liveness = Liveness()
    reply = with_http(FakeHttp(error), liveness)._sync_attempt(WORKER, "/call", b"{}", 5.0)
    assert reply == NoReply(kind, str(error), error)
    assert liveness.checked == (["actor/0"] if checked else [])


def test_a_dead_worker_raises_its_failure_instead_of_a_connection_error():
    with pytest.raises(WorkerFailedError):
        with_http(FakeHttp(requests.ConnectionError("refused")), Liveness(dead=True))._sync_attempt(
            WORKER, "/call", b"{}", 5.0
        )


def test_without_a_liveness_check_a_connection_error_is_only_reported():
    reply = with_http(FakeHttp(requests.ConnectionError("refused")))._sync_attempt(WORKER, "/call", b"{}", 5.0)
    assert isinstance(reply, NoReply) and reply.kind == "connection"


def test_close_closes_the_sync_session():
    fake = FakeHttp()
    with_http(fake).close()
    assert fake.closed


# --- async attempts ---------------------------------------------------------------------------------------


class Guard(http.server.BaseHTTPRequestHandler):
    """Answers every POST with 202 and what it was sent: its path, content type and body."""

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        answer = f"{self.path} {self.headers.get('Content-Type')} ".encode() + body
        self.send_response(202)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def guard_worker() -> Iterator[Worker]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Guard)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield Worker(id="actor/0", ip="127.0.0.1", worker_ports=[str(server.server_address[1])])
    server.shutdown()
    server.server_close()


def test_an_async_attempt_posts_json_and_returns_the_reply(guard_worker):
    async def attempt() -> Any:
        made = GuardTransport()
        try:
            return await made._async_attempt(guard_worker, "/call", b'{"m": 1}', 10.0)
        finally:
            await made.aclose()
            made.close()

    assert asyncio.run(attempt()) == Reply(202, b'/call application/json {"m": 1}')


@pytest.mark.parametrize(
    ("error", "kind", "text"),
    [
        (aiohttp.ClientConnectionError("refused"), "connection", "refused"),
        (TimeoutError(), "timeout", "no reply within 5.0s"),  # aiohttp's total time-out says nothing
        (aiohttp.ClientPayloadError("truncated"), "other", "truncated"),
    ],
)
def test_an_async_attempt_without_reply_says_why(error, kind, text, monkeypatch):
    liveness = Liveness()
    made = GuardTransport(liveness)

    async def post(*args: Any) -> Reply:
        raise error

    monkeypatch.setattr(made, "_post", post)
    reply = asyncio.run(made._async_attempt(WORKER, "/call", b"{}", 5.0))
    made.close()
    assert reply == NoReply(kind, text, error)
    assert liveness.checked == (["actor/0"] if kind == "connection" else [])


def test_the_async_liveness_check_runs_off_the_loop_and_can_be_skipped(monkeypatch):
    liveness = Liveness()
    made = GuardTransport(liveness)

    async def post(*args: Any) -> Reply:
        raise aiohttp.ClientConnectionError("refused")

    monkeypatch.setattr(made, "_post", post)

    async def both() -> threading.Thread:
        await made._async_attempt(WORKER, "/call", b"{}", 5.0)
        await made._async_attempt(WORKER, "/fork", b"{}", 5.0, check_liveness=False)
        return threading.current_thread()

    loop_thread = asyncio.run(both())
    made.close()
    assert liveness.checked == ["actor/0"]  # the second attempt skipped it
    assert liveness.threads[0] is not loop_thread  # the Kubernetes read blocks: never on the loop


# --- the loops' sessions ----------------------------------------------------------------------------------


def test_one_session_per_loop_closed_when_its_asyncio_run_ends():
    made = GuardTransport()
    seen: list[aiohttp.ClientSession] = []

    async def use() -> None:
        seen.extend([made._session(), made._session()])

    asyncio.run(use())
    asyncio.run(use())
    made.close()
    assert seen[0] is seen[1] and seen[2] is seen[3]  # one per loop
    assert seen[0] is not seen[2]  # a new asyncio.run(): a new session
    assert all(session.closed for session in seen)
    assert len(made._loop_sessions) == 0


def test_aclose_closes_the_current_loops_session_and_a_later_call_opens_another():
    made = GuardTransport()

    async def use() -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
        first = made._session()
        await made.aclose()
        assert first.closed and asyncio.get_running_loop() not in made._loop_sessions
        await made.aclose()  # nothing left to close: no error
        return first, made._session()

    first, second = asyncio.run(use())
    made.close()
    assert first is not second and second.closed


def test_the_session_of_a_loop_closed_without_cancelling_its_tasks_is_closed_quietly(guard_worker, caplog):
    # As RolloutController's callback server uses its loop: run_until_complete per request, then close().
    made = GuardTransport()
    loop = asyncio.new_event_loop()
    reply = loop.run_until_complete(made._async_attempt(guard_worker, "/call", b"{}", 10.0))
    session = made._loop_sessions[loop].session
    loop.close()
    made.close()
    assert reply.status == 202 and session.closed and len(made._loop_sessions) == 0
    del loop, session
    gc.collect()
    assert "Task was destroyed but it is pending" not in caplog.text
    assert "Unclosed" not in caplog.text


def test_no_session_is_made_outside_a_running_loop():
    made = GuardTransport()
    with pytest.raises(RuntimeError):
        made._session()
    made.close()
