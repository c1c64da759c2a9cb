"""tools/test_run.py, `make test`'s order: the cluster's start runs beside `make check`, stops at its first failed
command, and is killed with every process it started when `make check` fails, before the cluster lanes would run."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import test_run
from test_run import Start, check_then_lanes

pytestmark = pytest.mark.unit


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return status != "Z"


def wait_for_file(path: Path) -> str:
    deadline = time.monotonic() + 60
    while not path.exists() or not path.read_text().strip():
        assert time.monotonic() < deadline, f"{path} was never written"
        time.sleep(0.05)
    return path.read_text().strip()


def test_the_start_stops_at_its_first_failed_command(tmp_path):
    after = tmp_path / "after"
    start = Start([["sh", "-c", "echo failing; exit 3"], ["touch", str(after)]], tmp_path / "start.log")
    start.begin()
    assert start.wait() == 3
    assert not after.exists()
    assert "$ sh -c echo failing; exit 3\nfailing\n" in (tmp_path / "start.log").read_text()


def test_stopping_the_start_kills_every_process_of_its_command_and_runs_no_other(tmp_path):
    pid_file, after = tmp_path / "pid", tmp_path / "after"
    grandchild = f"sleep 300 & echo $! > {pid_file}; wait"
    start = Start([["sh", "-c", grandchild], ["touch", str(after)]], tmp_path / "start.log")
    start.begin()
    pid = int(wait_for_file(pid_file))
    start.stop()
    deadline = time.monotonic() + 60
    while alive(pid):
        assert time.monotonic() < deadline, "the command's background process outlived stop()"
        time.sleep(0.05)
    assert not after.exists()


def test_a_failed_check_is_the_answer_without_waiting_for_the_start(tmp_path, monkeypatch):
    failing_make = tmp_path / "make"
    failing_make.write_text('#!/bin/sh\necho "make $*"\nexit 2\n')
    failing_make.chmod(0o755)
    monkeypatch.setattr(test_run, "MAKE", str(failing_make))
    monkeypatch.setattr(test_run, "run_side_by_side", lambda *_: pytest.fail("the cluster lanes ran"))
    start = Start([["sleep", "300"]], tmp_path / "start.log")
    start.begin()
    try:
        assert check_then_lanes(start, ["-k", "smoke"]) == 2
        assert start.code is None  # still running: the check did not wait for it
    finally:
        start.stop()
