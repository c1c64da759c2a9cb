"""cli/log_stream.py: a followed pod log copied to stdout from a daemon thread, which ends quietly when its socket is
shut down under it; stopping lets it drain, shuts the socket down only if it still reads, and always releases the
connection. The response is a fake with urllib3's stream(), connection.sock and release_conn()."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from urllib3.exceptions import ProtocolError

from areal_workers.cli import log_stream


class FakeSocket:
    def __init__(self, on_shutdown: threading.Event, fails: bool = False) -> None:
        self.on_shutdown, self.fails = on_shutdown, fails
        self.shutdowns: list[int] = []

    def shutdown(self, how: int) -> None:
        self.shutdowns.append(how)
        self.on_shutdown.set()
        if self.fails:
            raise OSError("already closed")


class FakeResponse:
    """Yields `chunks`; then, if `follow`, blocks until its socket is shut down (a log server following a file) and
    raises what a read on a shut-down socket raises."""

    def __init__(
        self, chunks: list[bytes], follow: bool = False, error: BaseException | None = None, fails: bool = False
    ) -> None:
        self.chunks, self.follow, self.error = chunks, follow, error
        self.shut = threading.Event()
        self.connection = type("Connection", (), {"sock": FakeSocket(self.shut, fails)})()
        self.released = 0
        self.sizes: list[int] = []

    def stream(self, size: int) -> Iterator[bytes]:
        self.sizes.append(size)
        yield from self.chunks
        if self.error is not None:
            raise self.error
        if self.follow:
            assert self.shut.wait(10), "the socket was never shut down"
            raise ProtocolError("Connection broken", OSError("shut down"))

    def release_conn(self) -> None:
        self.released += 1


def test_the_chunks_are_copied_to_stdout_as_text_by_a_daemon_thread(capsys):
    response = FakeResponse([b"step 1\n", b"caf\xc3", b"\xa9 \xff\n", b"cut \xe2\x82"])
    reader = log_stream.start_copy(response)
    assert reader.daemon and reader.name == "log-copy"
    log_stream.wait_for(reader)
    assert not reader.is_alive()
    # A character split across two chunks is whole; a byte that is no UTF-8, and a character the stream's end
    # cuts, are replaced, never an exception.
    assert capsys.readouterr().out == "step 1\ncaf\u00e9 \ufffd\ncut \ufffd"
    assert response.sizes == [4096]


@pytest.mark.parametrize(
    "error", [ProtocolError("Connection broken"), OSError("bad fd"), ValueError("closed file"), AttributeError("fp")]
)
def test_a_read_ended_under_the_reader_ends_it_quietly_after_what_it_copied(error, capsys):
    reader = log_stream.start_copy(FakeResponse([b"last line\n"], error=error))
    log_stream.wait_for(reader)
    assert capsys.readouterr().out == "last line\n"


def test_stopping_a_reader_still_following_shuts_its_socket_down_and_releases_the_connection(capsys):
    response = FakeResponse([b"a\n"], follow=True)
    reader = log_stream.start_copy(response)
    started = time.monotonic()
    log_stream.stop_copy(response, reader)
    assert time.monotonic() - started < 5  # the read ended with the shutdown, not the join's time-out
    assert not reader.is_alive()
    assert response.connection.sock.shutdowns == [socket.SHUT_RDWR]
    assert response.released == 1
    assert capsys.readouterr().out == "a\n"


def test_a_reader_that_ends_within_the_drain_is_not_shut_down():
    response = FakeResponse([b"a\n", b"b\n"])
    reader = log_stream.start_copy(response)
    log_stream.stop_copy(response, reader, drain_seconds=5.0)
    assert not reader.is_alive()
    assert response.connection.sock.shutdowns == []
    assert response.released == 1


def test_a_socket_already_closed_when_shut_down_is_no_error():
    response = FakeResponse([], follow=True, fails=True)
    reader = log_stream.start_copy(response)
    log_stream.stop_copy(response, reader)
    assert response.connection.sock.shutdowns == [socket.SHUT_RDWR] and response.released == 1
    assert not reader.is_alive()


def test_a_response_without_a_socket_is_only_released():
    response: Any = FakeResponse([b"x"])
    response.connection = None
    reader = log_stream.start_copy(response)
    log_stream.stop_copy(response, reader, drain_seconds=5.0)
    assert response.released == 1


class SlowResponse(FakeResponse):
    def stream(self, size: int) -> Iterator[bytes]:
        time.sleep(0.5)
        yield b"late\n"


def test_wait_for_returns_only_once_the_reader_has_ended(capsys):
    reader = log_stream.start_copy(SlowResponse([]))
    log_stream.wait_for(reader)
    assert reader.ended.is_set() and capsys.readouterr().out == "late\n"


def test_ctrl_c_while_waiting_still_shuts_the_followed_socket_down(capsys):
    """SIGINT in the main thread's wait (Ctrl-C on a quiet worker): the socket is still shut down and the connection
    released. With Thread.join, CPython 3.11 marked the reader stopped at the interrupt, so it was never shut down
    and the exit hung behind its read."""
    response = FakeResponse([b"a\n"], follow=True)
    reader = log_stream.start_copy(response)
    main = threading.main_thread().ident
    assert main is not None
    # A test run started in the background of a shell inherits SIGINT ignored: Python's own handler, for this test.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    interrupt = threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGINT))
    try:
        interrupt.start()
        with pytest.raises(KeyboardInterrupt):
            log_stream.wait_for(reader)
    finally:
        interrupt.join()
        signal.signal(signal.SIGINT, previous)
    log_stream.stop_copy(response, reader)
    assert response.connection.sock.shutdowns == [socket.SHUT_RDWR] and response.released == 1
    assert reader.ended.is_set() and capsys.readouterr().out == "a\n"
