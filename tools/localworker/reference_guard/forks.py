"""Children started through /fork: their process groups, their output and AReaL's log layout."""

from __future__ import annotations

import contextlib
import getpass
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import IO, Any

from .protocol import HttpError, JsonObject, internal_error

logger = logging.getLogger(__name__)

KILL_GRACE_SECONDS = 3.0  # same as AReaL's kill_process_tree(timeout=3)
KILL_CONFIRM_SECONDS = 2.0
DEFAULT_LOG_ROOT = "/tmp"  # AReaL's fork logs go here without --fileroot
MERGED_LOG_PREFIX_WIDTH = 10  # AReaL's LOG_PREFIX_WIDTH
FORK_SHELL = ("/bin/sh", "-c", 'exec "$@"', "areal-fork")


class ChildKillError(Exception):
    """A forked child could not be signalled or did not die after SIGKILL."""


ForkKey = tuple[Any, Any]


@dataclass
class ForkedChild:
    role: Any
    worker_index: Any
    process: subprocess.Popen[bytes]
    log_path: Path

    def describe(self) -> JsonObject:
        exit_code = self.process.poll()
        return {
            "role": self.role,
            "worker_index": self.worker_index,
            "pid": self.process.pid,
            "alive": exit_code is None,
            "exit_code": exit_code,
            "log": str(self.log_path),
        }


def signal_process_group(pgid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:
        pass  # the whole group is already gone
    except PermissionError as error:
        raise ChildKillError(f"Not allowed to send {signum.name} to process group {pgid}") from error


def stop_process_groups(processes: Iterable[subprocess.Popen[bytes]], grace_seconds: float) -> None:
    """SIGTERM each running child's process group, SIGKILL what is left after the grace period.

    Children run in their own session (start_new_session=True), so their pid is also their
    process-group id and the signals reach the helpers they started, like AReaL's kill_process_tree.
    Raises ChildKillError naming every child that could not be stopped.
    """
    running = [process for process in processes if process.poll() is None]
    failures: list[str] = []
    for process in running:
        try:
            signal_process_group(process.pid, signal.SIGTERM)
        except ChildKillError as error:
            failures.append(str(error))
    deadline = time.monotonic() + grace_seconds
    for process in running:
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
    for process in running:
        try:
            # Also sweeps group members that outlived an already-exited leader.
            signal_process_group(process.pid, signal.SIGKILL)
        except ChildKillError as error:
            failures.append(str(error))
        try:
            process.wait(timeout=KILL_CONFIRM_SECONDS)
        except subprocess.TimeoutExpired:
            failures.append(f"pid {process.pid} still running after SIGKILL")
    if failures:
        raise ChildKillError("; ".join(failures))


def current_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry for the uid, common in containers
        return str(os.getuid())


def fork_log_dir(fileroot: str | None, experiment_name: str, trial_name: str) -> Path:
    """AReaL's layout: <fileroot or /tmp>/logs/<user>/<experiment>/<trial>."""
    return Path(fileroot or DEFAULT_LOG_ROOT) / "logs" / current_user() / experiment_name / trial_name


class OutputPump:
    """Copies a child's output line by line to the guard's stdout, its role log and the merged log
    (with a ``[role]`` prefix), as AReaL's ``cmd 2>&1 | tee -a role.log >(sed ... >> merged.log)``."""

    def __init__(self, source: IO[bytes], role_log: IO[bytes], merged_log: IO[bytes], role: Any) -> None:
        self._source = source
        self._role_log = role_log
        self._merged_log = merged_log
        self._prefix = f"[{role}]".ljust(MERGED_LOG_PREFIX_WIDTH).encode()
        self._thread = threading.Thread(target=self._run, name=f"fork-output-{role}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        stdout: IO[bytes] | None = sys.stdout.buffer if sys.stdout is not None else None
        with self._source, self._role_log, self._merged_log:
            for line in iter(self._source.readline, b""):
                if stdout is not None:
                    try:
                        stdout.write(line)
                        stdout.flush()
                    except (OSError, ValueError):  # the guard's stdout is gone; keep the log files
                        stdout = None
                self._role_log.write(line)
                self._role_log.flush()
                self._merged_log.write(self._prefix + line)
                self._merged_log.flush()


class ForkedChildren:
    """Child processes started through /fork, tracked as AReaL tracks them: a list of every child
    not killed through /kill_forked_worker, and the latest child per (role, worker_index)."""

    def __init__(self) -> None:
        self._children: list[ForkedChild] = []
        self._latest: dict[ForkKey, ForkedChild] = {}
        self._lock = threading.Lock()

    def count(self) -> int:
        with self._lock:
            return len(self._children)

    def describe(self) -> list[JsonObject]:
        with self._lock:
            return [child.describe() for child in self._children]

    def start(
        self, role: Any, worker_index: Any, command: list[str], env: dict[str, str], log_dir: Path
    ) -> ForkedChild:
        """Raises HttpError 500 when the log files cannot be opened or the shell cannot start."""
        log_path = log_dir / f"{role}.log"
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            role_log = log_path.open("ab")
        except OSError as error:
            raise internal_error(str(error)) from error
        try:
            merged_log = (log_dir / "merged.log").open("ab")
        except OSError as error:
            role_log.close()
            raise internal_error(str(error)) from error
        try:
            # The shell execs the command (same pid); a command it cannot run makes it exit with
            # 127, so, as with AReaL's bash pipeline, the fork itself succeeds.
            process = subprocess.Popen(
                [*FORK_SHELL, *command],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except (OSError, ValueError, TypeError) as error:  # e.g. a non-string env value
            role_log.close()
            merged_log.close()
            raise internal_error(str(error)) from error
        assert process.stdout is not None
        OutputPump(process.stdout, role_log, merged_log, role).start()
        child = ForkedChild(role, worker_index, process, log_path)
        with self._lock:
            self._children.append(child)
            self._latest[(role, worker_index)] = child
        return child

    def kill(self, role: Any, worker_index: Any) -> int:
        """Stops and forgets the latest child of the key; returns its pid.  Raises HttpError 404 or 500."""
        with self._lock:
            child = self._latest.pop((role, worker_index), None)
            if child is not None:
                self._children.remove(child)
        if child is None:
            raise HttpError(HTTPStatus.NOT_FOUND, f"Forked worker {role}/{worker_index} not found")
        try:
            stop_process_groups([child.process], KILL_GRACE_SECONDS)
        except ChildKillError as error:
            raise HttpError(
                HTTPStatus.INTERNAL_SERVER_ERROR,
                f"Failed to kill forked worker: {error}",
                pid=child.process.pid,
            ) from error
        return child.process.pid

    def kill_all(self) -> None:
        with self._lock:
            children = list(self._children)
            self._children.clear()
            self._latest.clear()
        if not children:
            return
        logger.info("stopping %d forked children", len(children))
        try:
            stop_process_groups([child.process for child in children], KILL_GRACE_SECONDS)
        except ChildKillError as error:
            logger.error("some forked children survived: %s", error)
