"""Helpers for the unit tests that run real reference guards (`python -m localworker.reference_guard`).

Test modules beside it import this module by name (pytest puts a test module's directory on sys.path), as the
chart tests do with chartlib.py. It starts guard subprocesses on 127.0.0.1, waits for their banner, and stops
every process a test started, forked children included."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
import requests

from repo_paths import LOCALWORKER_PATH

COUNTER = "localworker.engines.Counter"
BROKEN = "localworker.engines.Broken"
BANNER = re.compile(r"^areal-guard listening on (?P<host>[0-9.]+):(?P<port>\d+)$")
HTTP_TIMEOUT = 30.0
STARTUP_TIMEOUT = 60.0  # a loaded 2-core CI machine: a second-long start gets a minute
EXIT_TIMEOUT = 30.0


def guard_command(
    port: int = 0,
    role: str = "actor",
    worker_index: int = 0,
    host: str = "127.0.0.1",
    fileroot: Path | None = None,
) -> list[str]:
    command = [
        sys.executable,
        "-m",
        "localworker.reference_guard",
        "--host",
        host,
        "--port",
        str(port),
        "--experiment-name",
        "exp",
        "--trial-name",
        "trial",
        "--role",
        role,
        "--worker-index",
        str(worker_index),
        "--name-resolve-type",
        "nfs",
        "--nfs-record-root",
        "/nonexistent/name_resolve",
        "--etcd3-addr",
        "127.0.0.1:2379",
    ]
    if fileroot is not None:
        command += ["--fileroot", str(fileroot)]
    return command


def guard_env() -> dict[str, str]:
    # Absolute, so forked guards find the package whatever their working directory.
    python_path = os.pathsep.join(filter(None, [str(LOCALWORKER_PATH), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": python_path}


@dataclass
class RunningGuard:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    stderr_path: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def get(self, path: str) -> requests.Response:
        return requests.get(self.url + path, timeout=HTTP_TIMEOUT)

    def post(self, path: str, body: Any) -> requests.Response:
        return requests.post(self.url + path, json=body, timeout=HTTP_TIMEOUT)

    def post_raw(self, path: str, data: bytes) -> requests.Response:
        return requests.post(self.url + path, data=data, timeout=HTTP_TIMEOUT)

    def health(self) -> dict[str, Any]:
        response = self.get("/health")
        assert response.status_code == 200, response.text
        return response.json()

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def stdout(self) -> str:
        """The banner, then the output of the guard's forked children."""
        return self.stderr_path.with_suffix(".out").read_text(errors="replace")


GuardT = TypeVar("GuardT", bound=RunningGuard)


@dataclass
class ProcessJanitor:
    """Stops every process a test started, also when the test fails half-way."""

    guards: list[subprocess.Popen[bytes]] = field(default_factory=list)
    forked: list[tuple[int, list[str]]] = field(default_factory=list)

    def track_forked(self, pid: int, command: list[str]) -> None:
        self.forked.append((pid, command))

    def cleanup(self) -> None:
        # SIGTERM first: a healthy guard then stops its own forked children.
        for process in self.guards:
            if process.poll() is None:
                process.terminate()
        for process in self.guards:
            try:
                process.wait(timeout=EXIT_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pid, command in self.forked:
            if running_command(pid) == command:  # never signal a recycled pid
                os.kill(pid, signal.SIGKILL)


def janitor_for(request: pytest.FixtureRequest) -> ProcessJanitor:
    """A janitor that cleans up when the requesting fixture's scope ends."""
    janitor = ProcessJanitor()
    request.addfinalizer(janitor.cleanup)
    return janitor


def running_command(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    return raw.decode(errors="replace").split("\0")[:-1]


def wait_for_banner(process: subprocess.Popen[bytes], stdout_path: Path, stderr_path: Path) -> re.Match[str]:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        lines = stdout_path.read_text().splitlines()
        if lines:
            match = BANNER.match(lines[0])
            assert match, f"unexpected first stdout line: {lines[0]!r}"
            return match
        if process.poll() is not None:
            pytest.fail(f"guard exited with {process.returncode}: {stderr_path.read_text()}")
        time.sleep(0.02)
    pytest.fail(f"guard printed no banner within {STARTUP_TIMEOUT}s: {stderr_path.read_text()}")


def launch_guard(
    janitor: ProcessJanitor,
    log_dir: Path,
    guard_type: type[GuardT] = RunningGuard,  # type: ignore[assignment]
    **command_options: Any,
) -> GuardT:
    """Starts a guard (see guard_command for the options), waits for its banner; the janitor stops it.
    Its forks log under log_dir/fileroot unless a fileroot is given (the guard's default is /tmp)."""
    command_options.setdefault("fileroot", log_dir / "fileroot")
    log_stem = log_dir / f"guard-{uuid.uuid4().hex[:8]}"
    stdout_path, stderr_path = log_stem.with_suffix(".out"), log_stem.with_suffix(".err")
    with stdout_path.open("wb") as stdout, stderr_path.open("wb") as stderr:
        process = subprocess.Popen(guard_command(**command_options), env=guard_env(), stdout=stdout, stderr=stderr)
    janitor.guards.append(process)
    banner = wait_for_banner(process, stdout_path, stderr_path)
    return guard_type(process, banner["host"], int(banner["port"]), stderr_path)
