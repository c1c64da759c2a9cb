"""stop_guard over real HTTP: a guard that closes the connection before its /fork reply (AReaL's guard, stopped by
the very child it forked) was asked; one that refuses, or that nothing listens for, raises as GuardClient.fork does."""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable

import pytest

from areal_workers.areal_types import Worker
from areal_workers.errors import RPCConnectionError
from areal_workers.guard.client import GuardClient
from areal_workers.guard.replies import ForkError
from areal_workers.guard.restart import stop_guard

Answer = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    length = next(int(line.split(b":")[1]) for line in lines if line.lower().startswith(b"content-length"))
    return head + await reader.readexactly(length)


async def close_before_reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    writer.close()


async def reset_before_reply(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
    writer.transport.abort()


async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_request(reader)
    body = b'{"error": "Internal server error: no"}'
    writer.write(b"HTTP/1.1 500 INTERNAL SERVER ERROR\r\nContent-Type: application/json\r\n")
    writer.write(b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
    await writer.drain()
    writer.close()


def stop_guard_served_by(answer: Answer | None) -> None:
    """Runs stop_guard against a guard on 127.0.0.1 that answers with `answer` (None: a port nothing listens on)."""

    async def run() -> None:
        guard = GuardClient(liveness=lambda worker: None)
        try:
            if answer is None:
                with socket.socket() as unused:
                    unused.bind(("127.0.0.1", 0))
                    port = unused.getsockname()[1]
                await stop_guard(guard, Worker("actor/0", "127.0.0.1", [str(port)]), 0)
                return
            server = await asyncio.start_server(answer, "127.0.0.1", 0)
            async with server:
                port = server.sockets[0].getsockname()[1]
                await stop_guard(guard, Worker("actor/0", "127.0.0.1", [str(port)]), 0)
        finally:
            await guard.aclose()
            guard.close()

    asyncio.run(run())


def test_a_guard_that_closes_the_connection_before_its_reply_was_asked():
    stop_guard_served_by(close_before_reply)


def test_a_guard_whose_connection_resets_before_its_reply_was_asked():
    stop_guard_served_by(reset_before_reply)


def test_a_guard_that_refuses_the_fork_raises_fork_error():
    with pytest.raises(ForkError, match="HTTP 500"):
        stop_guard_served_by(refuse)


def test_a_guard_nothing_listens_for_raises_a_connection_error():
    with pytest.raises(RPCConnectionError, match="/fork"):
        stop_guard_served_by(None)
