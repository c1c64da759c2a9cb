"""podrunner's fork server (tools/podrunner/fork_server.py and forked.py): a child forked per pod runs its module as
`python -m MODULE ARGS` would, with the pod's arguments, environment, directory, session and output, and reports how
it ended, as subprocess.Popen would. Run with this interpreter on a small module of the test's own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podrunner.forked import ForkServer, ForkServerError
from podrunner.processes import ProcessLedger

pytestmark = pytest.mark.unit

MODULE = "fork_probe"
PROBE = """
import os, sys, time
IMPORTED_IN = os.environ.get("PROBE_STAGE", "unset")  # module body runs again in each child
if __name__ == "__main__":
    print("args", sys.argv[1:], "stage", os.environ.get("PROBE_STAGE"), "cwd", os.getcwd(), flush=True)
    print("session", os.getsid(0) == os.getpid(), "path", sys.path[0], file=sys.stderr, flush=True)
    mode = sys.argv[1]
    if mode == "exit":
        sys.exit(int(sys.argv[2]))
    if mode == "raise":
        raise RuntimeError("the probe failed")
    if mode == "sleep":
        time.sleep(60)
"""


@pytest.fixture
def server(tmp_path: Path):
    (tmp_path / "modules").mkdir()
    (tmp_path / "modules" / f"{MODULE}.py").write_text(PROBE)
    environment = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "modules"), "PROBE_STAGE": "server"}
    logs = tmp_path / ("pods-" + "x" * 110)  # as long as a test's own podrunner's log directory can be
    logs.mkdir()
    made = ForkServer(sys.executable, MODULE, logs, environment, ProcessLedger(tmp_path / "ledger"))
    yield made, tmp_path
    made.stop()


def run(server: ForkServer, tmp_path: Path, *args: str, extra_path: str = ""):
    environment = {"PROBE_STAGE": "pod", "PYTHONPATH": extra_path or str(tmp_path / "modules")}
    return server.spawn([sys.executable, "-m", MODULE, *args], environment, cwd=str(tmp_path))


def test_a_child_runs_the_module_with_the_pods_arguments_environment_directory_and_session(server):
    fork_server, tmp_path = server
    (tmp_path / "extra").mkdir()
    process = run(fork_server, tmp_path, "exit", "0", extra_path=f"{tmp_path / 'extra'}:{tmp_path / 'modules'}")
    assert process.wait(timeout=60) == 0 and process.returncode == 0
    output = process.stdout.read().decode()
    assert f"args ['exit', '0'] stage pod cwd {tmp_path}" in output
    assert f"session True path {tmp_path / 'extra'}" in output  # stderr too, and the pod's PYTHONPATH first


def test_exit_codes_exceptions_and_signals_are_reported_as_subprocess_reports_them(server):
    fork_server, tmp_path = server
    assert run(fork_server, tmp_path, "exit", "3").wait(timeout=60) == 3
    failed = run(fork_server, tmp_path, "raise")
    assert failed.wait(timeout=60) == 1
    assert "RuntimeError: the probe failed" in failed.stdout.read().decode()
    sleeping = run(fork_server, tmp_path, "sleep")
    assert sleeping.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        sleeping.wait(timeout=0.2)
    os.killpg(sleeping.pid, signal.SIGTERM)  # what the supervisor sends to a pod's process group
    assert sleeping.wait(timeout=60) == -signal.SIGTERM


def test_many_children_at_once_each_get_their_own_status(server):
    fork_server, tmp_path = server
    processes = [run(fork_server, tmp_path, "exit", str(code)) for code in range(8)]
    assert [process.wait(timeout=60) for process in processes] == list(range(8))


def test_a_server_that_died_is_started_again_and_its_orphans_read_as_killed(server):
    fork_server, tmp_path = server
    sleeping = run(fork_server, tmp_path, "sleep")
    os.kill(fork_server.pid, signal.SIGKILL)
    assert sleeping.wait(timeout=60) == -9  # no status will come: treated as killed
    os.killpg(sleeping.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while fork_server._process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert run(fork_server, tmp_path, "exit", "0").wait(timeout=60) == 0
    fork_server.stop()
    assert list((tmp_path / "ledger").iterdir()) == []  # both servers were recorded and forgotten


def test_a_server_that_cannot_start_is_not_tried_again_and_its_socket_dir_is_short(tmp_path: Path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)  # a test's log directory: longer than a Unix socket path may be
    deep.mkdir(parents=True)
    broken = ForkServer(sys.executable, "no_such_module_here", deep, {"PATH": os.environ["PATH"]}, None)
    with pytest.raises(ForkServerError, match="did not start"):
        broken.spawn([sys.executable, "-m", "no_such_module_here"], {})
    started = time.monotonic()
    with pytest.raises(ForkServerError, match="did not start"):
        broken.spawn([sys.executable, "-m", "no_such_module_here"], {})
    assert time.monotonic() - started < 1  # refused at once, no second start
    assert "No module named 'no_such_module_here'" in (deep / "fork-server.log").read_text()
    assert len(str(broken.socket_path)) < 100


def test_a_pod_that_sets_an_import_time_variable_otherwise_is_not_forked(server):
    server, _ = server
    argv = [sys.executable, "-m", MODULE]
    assert server.handles(argv, dict(server.environment))
    assert server.handles(argv, {**server.environment, "UNRELATED": "1"})
    # The server imported the module without it: forked, the pod's protobuf choice would come too late.
    assert not server.handles(argv, {**server.environment, "PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"})
    assert not server.handles([sys.executable, "-m", "other.module"], dict(server.environment))
