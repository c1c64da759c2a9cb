"""A TCP relay from the real node's bridge address to the API server, which listens on 127.0.0.1 only: a pod's
127.0.0.1 is its own, so without it the node's pods (a trainer Job, the reaper's CronJob) cannot reach the API.
It forwards bytes both ways and nothing else; TLS stays end to end (the API server's certificate names the
bridge address too, localkube.pki.APISERVER_SANS). Pods are told the address by KUBERNETES_SERVICE_HOST and
KUBERNETES_SERVICE_PORT (realnode.values.trainer_submit), since the `kubernetes` Service's loopback ClusterIP is
unreachable from a pod's network namespace.

    python -m realnode.relay LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT
"""

from __future__ import annotations

import asyncio
import signal
import sys

CHUNK = 64 * 1024


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):  # the other side went away: the connection ends
        pass


async def relay(target: tuple[str, int], client_reader, client_writer) -> None:
    try:
        server_reader, server_writer = await asyncio.open_connection(*target)
    except OSError:
        client_writer.close()
        return
    await asyncio.gather(pipe(client_reader, server_writer), pipe(server_reader, client_writer))
    for writer in (client_writer, server_writer):
        writer.close()


async def serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    server = await asyncio.start_server(lambda r, w: relay(target, r, w), *listen)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for number in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(number, stop.set)
    print(f"relaying {listen[0]}:{listen[1]} to {target[0]}:{target[1]}", flush=True)
    async with server:
        await stop.wait()


def main(argv: list[str]) -> int:
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    asyncio.run(serve((argv[0], int(argv[1])), (argv[2], int(argv[3]))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
