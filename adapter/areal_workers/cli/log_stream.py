"""Copying a followed pod log to stdout from a daemon thread, so Ctrl-C and the end of the pod land in the main
thread, never inside a blocking socket read: a log server may follow a file forever, and closing a response whose
socket another thread reads waits for that read. Stopping shuts the socket down, which ends the read at once.

Whether the reader still runs is its own `ended` event, never `Thread.is_alive()`: on CPython 3.11 a join that Ctrl-C
interrupts marks the thread stopped while it still reads (the bpo-45274 handling releases its state lock), so the
socket was left open, and the exit then hung closing the connection pool behind the reader's blocked ssl read."""

from __future__ import annotations

import codecs
import socket
import sys
import threading
from typing import Any

from urllib3.exceptions import HTTPError


def _copy(response: Any) -> None:
    # Incremental: a character whose UTF-8 bytes two chunks split is written whole, not as two U+FFFD.
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    try:
        for chunk in response.stream(4096):
            sys.stdout.write(decoder.decode(chunk))
            sys.stdout.flush()
        sys.stdout.write(decoder.decode(b"", final=True))
        sys.stdout.flush()
    except (HTTPError, OSError, AttributeError, ValueError):  # the socket was shut down under it
        pass


class LogReader(threading.Thread):
    """The daemon thread copying one response; `ended` is set once its copy has returned."""

    def __init__(self, response: Any) -> None:
        super().__init__(name="log-copy", daemon=True)
        self.response = response
        self.ended = threading.Event()

    def run(self) -> None:
        try:
            _copy(self.response)
        finally:
            self.ended.set()


def start_copy(response: Any) -> LogReader:
    reader = LogReader(response)
    reader.start()
    return reader


def stop_copy(response: Any, reader: LogReader, drain_seconds: float = 0.0) -> None:
    """Lets the reader finish for `drain_seconds` (the last lines), then ends its read and releases the stream. A
    connection whose read does not end is left out of the pool: closing the pool would wait for that read."""
    if not reader.ended.wait(drain_seconds):
        connection = getattr(response, "connection", None)
        sock = getattr(connection, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed
                pass
        if not reader.ended.wait(5.0):
            return
    response.release_conn()


def wait_for(reader: LogReader) -> None:
    """Until the stream ends (the pod's container ended, or the server closed it); Ctrl-C propagates."""
    while not reader.ended.wait(0.2):
        pass
