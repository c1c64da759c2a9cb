"""A fork server for the worker program of KWOK pods: it imports the program's module once, then forks a child per
pod that runs the module as `python -m MODULE ARGS` would, in the pod's environment, directory and session.

AReaL's rpc_server spends about 8 s of CPU importing torch, transformers and AReaL before it serves; on two cores,
with a few hundred worker starts in `make test`, that was the largest use of CPU of the whole run. A child forked
from a process that did those imports once starts in milliseconds and runs the same module's code.

Run by path with the worker program's interpreter (standard library only; it is not imported by podrunner):

    PYTHON fork_server.py SOCKET MODULE

It prints "ready" once the module is imported and it listens on the Unix socket SOCKET. Each connection asks for
one child: a JSON line {"args": [...], "env": {...}, "cwd": "..."} carrying, as SCM_RIGHTS, the file descriptor the
child's stdout and stderr go to, and optionally a second one, a lifeline: the read end of a pipe whose write end the
asker holds; when it closes (the asker ended, even by SIGKILL) the child kills its process group. Optional too:
"module", which must be the server's, and "import_time", names of variables whose value in "env" must be the
server's own (fork_client.py asks so). The answer is {"pid": N}, and when the child has ended {"returncode": R}
(negative: the signal that ended it, as subprocess reports it), or {"error": "..."}; then the connection closes.
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
import threading
import traceback

MAX_REQUEST = 4 * 1024 * 1024
LIFELINE = 3  # the child's descriptor of its lifeline


def read_request(connection: socket.socket) -> tuple[dict, list[int]]:
    message, fds, _, _ = socket.recv_fds(connection, MAX_REQUEST, 2)
    while not message.endswith(b"\n"):
        more = connection.recv(MAX_REQUEST)
        if not more:
            raise ConnectionError("the request ended before its newline")
        message += more
    return json.loads(message), fds


def die_with(lifeline: int) -> None:
    """Blocks until the asker's end of the lifeline closes, then kills this child's process group."""
    while True:
        try:
            if not os.read(lifeline, 4096):
                break
        except InterruptedError:
            continue
        except OSError:
            break
    os.killpg(os.getpid(), signal.SIGKILL)


def run_child(module: str, request: dict, output: int, lifeline: int | None) -> None:
    """In the forked child: become the pod's process, run the module as __main__, exit with its status."""
    os.setsid()
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    if lifeline is not None:
        os.dup2(lifeline, LIFELINE, inheritable=False)
    os.closerange(3 if lifeline is None else LIFELINE + 1, os.sysconf("SC_OPEN_MAX"))
    if lifeline is not None:
        threading.Thread(target=die_with, args=(LIFELINE,), name="lifeline", daemon=True).start()
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


def refusal(request: dict, fds: list[int], module: str, imported_with: dict[str, str]) -> str | None:
    """Why the server cannot fork this request's child (None: it can)."""
    if len(fds) not in (1, 2):
        return "a request carries one output file descriptor, and a lifeline at most"
    if request.get("module", module) != module:
        return f"this server runs {module}, not {request['module']}"
    differing = [name for name in request.get("import_time", []) if request["env"].get(name) != imported_with.get(name)]
    if differing:
        return f"{module} was imported with other values of {', '.join(differing)}"
    return None


def serve(path: str, module: str) -> None:
    imported_with = dict(os.environ)
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
                refused = refusal(request, fds, module, imported_with)
                if refused:
                    send(connection, {"error": refused})
                    connection.close()
                    for fd in fds:
                        os.close(fd)
                    continue
                pid = os.fork()
                if pid == 0:
                    run_child(module, request, fds[0], fds[1] if len(fds) == 2 else None)
                for fd in fds:
                    os.close(fd)
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
