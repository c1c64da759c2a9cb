"""A fork server for the worker program of KWOK pods: it imports the program's module once, then forks a child per
pod that runs the module as `python -m MODULE ARGS` would, in the pod's environment, directory and session.

AReaL's rpc_server spends about 8 s of CPU importing torch, transformers and AReaL before it serves; on two cores,
with a few hundred worker starts in `make test`, that was the largest use of CPU of the whole run. A child forked
from a process that did those imports once starts in milliseconds and runs the same module's code.

Run by path with the worker program's interpreter (standard library only; it is not imported by podrunner):

    PYTHON fork_server.py SOCKET MODULE

It prints "ready" once the module is imported and it listens on the Unix socket SOCKET. Each connection asks for
one child: a JSON line {"args": [...], "env": {...}, "cwd": "..."} carrying, as SCM_RIGHTS, the file descriptor the
child's stdout and stderr go to. The answer is {"pid": N}, and when the child has ended {"returncode": R} (negative:
the signal that ended it, as subprocess reports it); then the connection closes.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import traceback

MAX_REQUEST = 4 * 1024 * 1024


def read_request(connection: socket.socket) -> tuple[dict, list[int]]:
    message, fds, _, _ = socket.recv_fds(connection, MAX_REQUEST, 1)
    while not message.endswith(b"\n"):
        more = connection.recv(MAX_REQUEST)
        if not more:
            raise ConnectionError("the request ended before its newline")
        message += more
    return json.loads(message), fds


def run_child(module: str, request: dict, output: int) -> None:
    """In the forked child: become the pod's process, run the module as __main__, exit with its status."""
    os.setsid()
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    code: int = 0
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        for entry in reversed([p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]):
            if entry not in sys.path:
                sys.path.insert(0, entry)
        # `python` imports sitecustomize at start-up, from the pod's PYTHONPATH too; the server started without it.
        if "sitecustomize" not in sys.modules and importlib.util.find_spec("sitecustomize") is not None:
            importlib.import_module("sitecustomize")
        os.chdir(request.get("cwd") or "/")
        sys.stdout.reconfigure(line_buffering=True)
        sys.stderr.reconfigure(line_buffering=True)
        sys.argv = [module, *request["args"]]
        # As under `python -m`, the module's code runs once, as __main__: its dependencies stay imported.
        sys.modules.pop(module, None)
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exit_:
        if isinstance(exit_.code, int) or exit_.code is None:
            code = exit_.code or 0
        else:
            print(exit_.code, file=sys.stderr)
            code = 1
    except BaseException:  # the child's own failure, printed as python would print it
        traceback.print_exc()
        code = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def send(connection: socket.socket, message: dict) -> None:
    try:
        connection.sendall(json.dumps(message).encode() + b"\n")
    except OSError:
        pass  # the runner hung up: nobody waits for this child any more


def serve(path: str, module: str) -> None:
    importlib.import_module(module)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_read, False)
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    selector = selectors.DefaultSelector()
    selector.register(server, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    children: dict[int, socket.socket] = {}
    print("ready", flush=True)
    while True:
        for key, _ in selector.select(timeout=1.0):
            if key.fileobj is server:
                connection, _ = server.accept()
                connection.settimeout(30)
                try:
                    request, fds = read_request(connection)
                except (OSError, ValueError) as error:
                    send(connection, {"error": f"bad request: {error}"})
                    connection.close()
                    continue
                if len(fds) != 1:
                    send(connection, {"error": "a request carries exactly one output file descriptor"})
                    connection.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    run_child(module, request, fds[0])
                os.close(fds[0])
                children[pid] = connection
                send(connection, {"pid": pid})
            else:
                try:
                    while os.read(wake_read, 4096):
                        pass
                except BlockingIOError:
                    pass
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            connection = children.pop(pid, None)
            if connection is not None:
                send(connection, {"returncode": os.waitstatus_to_exitcode(status)})
                connection.close()


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
