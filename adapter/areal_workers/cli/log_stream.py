"""Copying a followed pod log to stdout from a daemon thread, so Ctrl-C and the end of the pod land in the main
thread, never inside a blocking socket read: a log server may follow a file forever, and closing a response whose
socket another thread reads waits for that read. Stopping shuts the socket down, which ends the read at once."""

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


def start_copy(response: Any) -> threading.Thread:
    reader = threading.Thread(target=_copy, args=(response,), name="log-copy", daemon=True)
    reader.start()
    return reader


def stop_copy(response: Any, reader: threading.Thread, drain_seconds: float = 0.0) -> None:
    """Lets the reader finish for `drain_seconds` (the last lines), then ends its read and releases the stream."""
    reader.join(timeout=drain_seconds)
    connection = getattr(response, "connection", None)
    if reader.is_alive() and connection is not None and connection.sock is not None:
        try:
            connection.sock.shutdown(socket.SHUT_RDWR)
        except OSError:  # already closed
            pass
    reader.join(timeout=5.0)
    response.release_conn()


def wait_for(reader: threading.Thread) -> None:
    """Until the stream ends (the pod's container ended, or the server closed it); Ctrl-C propagates."""
    while reader.is_alive():
        reader.join(timeout=0.2)
