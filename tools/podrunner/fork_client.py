"""The `python` of process-mode forks in KWOK pods: AReaL's rpc_server forks a worker by running the command the
scheduler sent it (`PYTHON -m areal.infra.rpc.rpc_server ARGS`, through a shell). With the areal lanes'
python_executable set to FORK_PYTHON (its launcher, fork_python/python beside this file), that child is asked of
the pod's fork server (fork_server.py), which imported the module once, instead of importing torch, transformers
and AReaL again (about 8 s of CPU on these machines, for each of the lanes' forks).

This process stands in for the child where AReaL looks for it: its pid is in the shell's tree that AReaL's
kill_process_tree walks, it forwards the signals it gets to the child, and it ends with the child's status (a child
ended by a signal ends it by the same signal). If it dies without forwarding (SIGKILL), the child sees its lifeline
close and kills its own process group. Anything else (another module, a pod without a fork server, import-time
variables other than the server's) runs on the real interpreter, as if this were it.

Standard library only: it runs on the real interpreter with -I -S, before any site-packages is read.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

SOCKET_VARIABLE = "PODRUNNER_FORK_SOCKET"  # set by podrunner in the environment of the pods its fork server forks
PYTHON_VARIABLE = "PODRUNNER_PYTHON"  # the real interpreter
FORK_PYTHON = Path(__file__).resolve().parent / "fork_python" / "python"
# Variables that change what a module does while it is imported: a child whose environment sets one of them
# differently from the fork server, which imported the module once, runs on its own interpreter instead.
# PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION decides whether AReaL's name_resolve can import its etcd3 client
# (tests/integration/test_etcd_name_resolve.py); USER is the user AReaL's areal.utils.names keys every name_resolve
# record by (getpass.getuser() at import).
IMPORT_TIME_VARIABLES = ("PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION", "USER")
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
LOST = 137  # the status of a child whose server went away before it reported (as if killed)


def real_python() -> str:
    return os.environ.get(PYTHON_VARIABLE) or sys.executable


def read_line(connection: socket.socket, received: bytes) -> tuple[dict | None, bytes]:
    """The next JSON line of the connection (None: it closed first) and what arrived after it."""
    while b"\n" not in received:
        chunk = connection.recv(4096)
        if not chunk:
            return None, received
        received += chunk
    line, _, rest = received.partition(b"\n")
    return json.loads(line), rest


def fork(module: str, args: list[str], server: str) -> int | None:
    """Runs `python -m module args` as a child of the fork server at `server`; its exit status (None: the server
    refused, the caller runs the module itself)."""
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lifeline, held = os.pipe()  # the child watches `lifeline`; it closes when this process ends, however it ends
    try:
        connection.connect(server)
        request = {
            "module": module,
            "args": args,
            "env": dict(os.environ),
            "cwd": os.getcwd(),
            "import_time": list(IMPORT_TIME_VARIABLES),
        }
        socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], [sys.stdout.fileno(), lifeline])
        answer, rest = read_line(connection, b"")
    except OSError:
        connection.close()
        os.close(held)
        return None
    finally:
        os.close(lifeline)
    if answer is None or "pid" not in answer:
        connection.close()
        os.close(held)
        return None
    child = int(answer["pid"])
    for number in FORWARDED:
        signal.signal(number, lambda received, _frame: os.kill(child, received))
    try:
        ended, _ = read_line(connection, rest)
    except OSError:
        ended = None
    return LOST if ended is None else int(ended["returncode"])


def main(argv: list[str]) -> None:
    server = os.environ.get(SOCKET_VARIABLE)
    if len(argv) >= 2 and argv[0] == "-m" and server:
        status = fork(argv[1], argv[2:], server)
        if status is not None:
            if status < 0:  # ended by a signal: end by the same one, as the shell and AReaL would see it
                signal.signal(-status, signal.SIG_DFL)
                os.kill(os.getpid(), -status)
            sys.exit(status if status >= 0 else 128 - status)
    python = real_python()
    os.execv(python, [python, *argv])


if __name__ == "__main__":
    main(sys.argv[1:])
