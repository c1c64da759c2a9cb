#!/usr/bin/env python3
"""`make test` once the chart's tools are in place: the tier without a cluster and the cluster's start side by side,
then the cluster's lanes, and the cluster stopped whatever happened.

    python tools/test_run.py [--real-node real|kwok|auto] [PYTEST_ARGS...]

On the terminal, `make check` (lint, types, shellcheck, the unit and chart lanes): the first answer, as if it ran
alone. Beside it, its output in .tools/lanes/start.log: every other tool and AReaL's worker server (`make tools
areal-worker`), the local cluster's start (real node, Kueue, Argo CD, registry) and the lane that restarts
components of its control plane (tools/test_lanes.py's first lane, which waits on pods and the control plane far
more than it computes: 17 % of the CPUs when it ran alone, after every other lane). A failed `make check` stops the
start at once (its processes are killed, the cluster is stopped) and is the exit status; else, once the start has
ended, its log is printed and, if it passed, the cluster's other lanes run (tools/test_lanes.py). PYTEST_ARGS go to
every cluster lane, not to `make check`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from repo_paths import REPO, VENV_PYTHON
from test_lanes import LOGS, RESTARTS, lanes, run_side_by_side, without, without_the_real_node

MAKE = os.environ.get("MAKE", "make")
START_LOG = LOGS / "start.log"


class Start:
    """The cluster's side of the run: its commands one after the other in sessions of their own, so that `stop`
    kills whichever runs with every process it started."""

    def __init__(self, commands: list[list[str]], log: Path) -> None:
        self.commands = commands
        self.log = log
        self.code: int | None = None
        self.seconds = 0.0
        self._running: subprocess.Popen[bytes] | None = None
        self._stopped = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run)

    def begin(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        with self.log.open("wb") as out:
            for command in self.commands:
                with self._lock:
                    if self._stopped.is_set():
                        break
                    out.write(f"$ {' '.join(command)}\n".encode())
                    out.flush()
                    self._running = subprocess.Popen(
                        command, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
                    )
                self.code = self._running.wait()
                if self.code != 0:
                    break
        self.seconds = time.monotonic() - started

    def stop(self) -> None:
        with self._lock:
            self._stopped.set()
            running = self._running
        if running is not None and running.poll() is None:
            os.killpg(running.pid, signal.SIGTERM)
            try:
                running.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(running.pid, signal.SIGKILL)
        self._thread.join()

    def wait(self) -> int:
        self._thread.join()
        return 1 if self.code is None else self.code


def start_commands(real_node: str, extra: list[str]) -> list[list[str]]:
    python = str(VENV_PYTHON)
    up = [python, "tools/localcluster.py", "up", "--real-node", real_node, "--kueue", "--argocd", "--registry"]
    restarts = [python, "tools/test_lanes.py", "--lane", RESTARTS, *extra]
    return [[MAKE, "--no-print-directory", "-j2", "--output-sync=target", "tools", "areal-worker"], up, restarts]


def main(argv: list[str]) -> int:
    real_node, extra = (argv[1], argv[2:]) if argv[:1] == ["--real-node"] and len(argv) > 1 else ("real", argv)
    LOGS.mkdir(parents=True, exist_ok=True)
    start = Start(start_commands(real_node, extra), START_LOG)
    start.begin()
    try:
        code = check_then_lanes(start, extra)
    finally:
        start.stop()
        down = subprocess.run([str(VENV_PYTHON), "tools/localcluster.py", "down"], cwd=REPO).returncode
    if down != 0:
        print(f"make test: stopping the local cluster failed (exit {down})", flush=True)
    return code or (1 if down != 0 else 0)


def check_then_lanes(start: Start, extra: list[str]) -> int:
    """`make check` on the terminal while `start` runs; then, if both passed, the cluster's other lanes."""
    checked = subprocess.run([MAKE, "--no-print-directory", "check", "PYTEST_ARGS="], cwd=REPO).returncode
    if checked != 0:
        print(f"\nmake test: `make check` failed (exit {checked}); the cluster's start is stopped", flush=True)
        return checked
    started = start.wait()
    print(f"\n===== the cluster's start and the {RESTARTS} lane ({START_LOG.relative_to(REPO)}):", flush=True)
    print(START_LOG.read_text(errors="replace"), flush=True)
    print(f"===== start: exit {started} in {start.seconds:.0f} s, beside `make check`", flush=True)
    if started != 0:
        return started
    return run_side_by_side(without(lanes(), {RESTARTS}), without_the_real_node(extra))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
