"""podrunner's side of fork_server.py: the server, started on first use for one interpreter and module, and the
processes it forks, with the part of subprocess.Popen's interface the supervisor uses (pid, stdout, poll, wait,
returncode). Signals go to the child's process group directly, as for any other pod process."""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

from podrunner.fork_client import IMPORT_TIME_VARIABLES, PYTHON_VARIABLE, SOCKET_VARIABLE
from podrunner.processes import ProcessLedger

SERVER = Path(__file__).resolve().parent / "fork_server.py"
READY_TIMEOUT = 300.0  # the server's imports, on a loaded machine
LOST = -9  # the return code of a child whose server went away before it reported


class ForkServerError(RuntimeError):
    pass


class ForkedProcess:
    """A pod process forked by the fork server; its exit status arrives on the connection that asked for it."""

    def __init__(
        self, pid: int, connection: socket.socket, stdout: IO[bytes], argv: list[str], received: bytes = b""
    ) -> None:
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._argv = argv
        self._connection = connection
        self._buffer = received  # what arrived after the pid line (a child that ended at once)
        self._lock = threading.Lock()

    def _read(self, timeout: float | None) -> None:
        """Takes the exit status if it arrives within `timeout` (None: waits for it). The wait for data holds no
        lock, so that poll() from one thread never waits for wait() in another."""
        if self.returncode is None and not self._buffer.endswith(b"\n"):
            try:
                select.select([self._connection], [], [], timeout)
            except (ValueError, OSError):  # closed meanwhile by the thread that took the status
                return
        with self._lock:
            if self.returncode is not None:
                return
            if not self._buffer.endswith(b"\n"):
                if not select.select([self._connection], [], [], 0)[0]:
                    return
                chunk = self._connection.recv(4096)
                self._buffer += chunk
                if chunk and not self._buffer.endswith(b"\n"):
                    return
            complete = self._buffer.endswith(b"\n")
            self.returncode = int(json.loads(self._buffer)["returncode"]) if complete else LOST
            self._connection.close()

    def poll(self) -> int | None:
        self._read(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(self._argv, timeout or 0)
            self._read(left)
        return self.returncode


class ForkServer:
    """fork_server.py for `python` and `module`, its socket in `directory`; started on the first spawn and again
    after it died."""

    def __init__(
        self, python: str, module: str, directory: Path, environment: dict[str, str], ledger: ProcessLedger | None
    ) -> None:
        self.python = python
        self.module = module
        # A directory of its own under the temporary directory: a Unix socket's path holds at most 107 bytes, and a
        # test's log directory is longer than that.
        self._socket_dir: Path | None = None
        self.log_path = directory / "fork-server.log"
        self.environment = environment
        self.ledger = ledger  # a crashed runner's server is stopped by whoever reads the ledger
        self._process: subprocess.Popen | None = None
        self._failure: str | None = None  # a server that could not start is not tried again: pods exec instead
        self._lock = threading.Lock()

    @property
    def socket_path(self) -> Path:
        if self._socket_dir is None:
            self._socket_dir = Path(tempfile.mkdtemp(prefix="aw-fork-"))
        return self._socket_dir / "server.sock"

    def handles(self, argv: list[str], environment: dict[str, str]) -> bool:
        """Whether a pod of this command and environment can be a child of the server: a pod that sets a variable
        of IMPORT_TIME_VARIABLES otherwise than the server, which imported the module once, is exec'd."""
        same_imports = all(environment.get(name) == self.environment.get(name) for name in IMPORT_TIME_VARIABLES)
        return argv[:3] == [self.python, "-m", self.module] and same_imports

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def _ensure_started(self) -> None:
        if self._failure is not None:
            raise ForkServerError(self._failure)
        if self._process is not None and self._process.poll() is None:
            return
        if self._process is not None and self.ledger is not None:  # it died: nothing of it is left to stop
            self.ledger.forget(self._process.pid)
        self.socket_path.unlink(missing_ok=True)
        with self.log_path.open("ab") as log:
            self._process = subprocess.Popen(
                [self.python, str(SERVER), str(self.socket_path), self.module],
                stdout=subprocess.PIPE,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=self.environment,
                start_new_session=True,
            )
        assert self._process.stdout is not None
        if self.ledger is not None:
            self.ledger.record(self._process.pid)
        readable, _, _ = select.select([self._process.stdout], [], [], READY_TIMEOUT)
        line = self._process.stdout.readline() if readable else b""
        if line.strip() != b"ready":
            self.stop()
            self._failure = f"the fork server for {self.module} did not start (log: {self.log_path})"
            raise ForkServerError(self._failure)

    def spawn(self, argv: list[str], environment: dict[str, str], cwd: str | None = None) -> ForkedProcess:
        """Forks `python -m module ARGS` (argv as the supervisor would exec it) in `environment`."""
        with self._lock:
            self._ensure_started()
        read_end, write_end = os.pipe()
        connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            connection.connect(str(self.socket_path))
            # Where the pod's process-mode forks find this server (fork_client.py), and the real interpreter.
            forks = {SOCKET_VARIABLE: str(self.socket_path), PYTHON_VARIABLE: self.python}
            request = {"args": argv[3:], "env": {**environment, **forks}, "cwd": cwd or os.getcwd()}
            socket.send_fds(connection, [json.dumps(request).encode() + b"\n"], [write_end])
            reply = b""
            while b"\n" not in reply:
                chunk = connection.recv(4096)
                if not chunk:
                    raise ForkServerError(f"the fork server for {self.module} hung up (log: {self.log_path})")
                reply += chunk
        except BaseException:
            connection.close()
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        line, _, rest = reply.partition(b"\n")
        answer = json.loads(line)
        if "pid" not in answer:
            connection.close()
            os.close(read_end)
            raise ForkServerError(f"the fork server refused the request: {answer.get('error')}")
        return ForkedProcess(int(answer["pid"]), connection, os.fdopen(read_end, "rb"), argv, rest)

    def stop(self) -> None:
        if self._process is not None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            if self.ledger is not None:
                self.ledger.forget(self._process.pid)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None
