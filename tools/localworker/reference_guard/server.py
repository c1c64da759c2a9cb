"""The HTTP side: one thread per connection, keep-alive, and one JSON reply per request."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from .ports import address_family_for
from .protocol import HttpError, JsonObject, bad_request, decode_body
from .routes import ROUTES, GuardState, Route

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 64 * 1024 * 1024


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
