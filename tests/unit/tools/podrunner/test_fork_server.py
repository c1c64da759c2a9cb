"""podrunner's fork server (tools/podrunner/fork_server.py and forked.py): a child forked per pod runs its module as
`python -m MODULE ARGS` would, with the pod's arguments, environment, directory, session and output, and reports how
it ended, as subprocess.Popen would; and fork_client.py, the `python` of process-mode forks, which asks the server
for its child and stands in for it. Run with this interpreter on a small module of the test's own."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from podrunner.fork_client import FORK_PYTHON, PYTHON_VARIABLE, SOCKET_VARIABLE
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
    print("pid", os.getpid(), "parent", os.getppid(), flush=True)
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


# --- fork_client.py: a process-mode fork asks the pod's fork server for its child --------------------------------


def fork_python(tmp_path: Path, fork_server: ForkServer, *args: str, module: str = MODULE, **environment: str):
    """FORK_PYTHON -m module args, as AReaL's /fork runs a fork's command in a pod the fork server forked."""
    pod = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "modules"), "PROBE_STAGE": "fork"}
    pod |= {SOCKET_VARIABLE: str(fork_server.socket_path), PYTHON_VARIABLE: sys.executable}
    return subprocess.Popen(
        [str(FORK_PYTHON), "-m", module, *args],
        env=pod | environment,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def probe_pids(process: subprocess.Popen) -> tuple[int, int]:
    """The pid of the process that runs the probe, and its parent's, from the probe's output."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(b"pid "):
            _, pid, _, parent = line.split()
            return int(pid), int(parent)
    raise AssertionError("the probe printed no pid")


def gone(pid: int, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":  # ended; its parent, the fork server, reaps it
            return True
        time.sleep(0.05)
    return False


def test_a_fork_of_the_servers_module_is_a_child_of_the_server_and_ends_as_it_ends(server):
    fork_server, tmp_path = server
    assert run(fork_server, tmp_path, "exit", "0").wait(timeout=60) == 0  # the pod: the server runs
    forked = fork_python(tmp_path, fork_server, "exit", "3")
    pid, parent = probe_pids(forked)
    assert parent == fork_server.pid and pid != forked.pid
    assert forked.wait(timeout=60) == 3
    failed = fork_python(tmp_path, fork_server, "raise")
    assert failed.wait(timeout=60) == 1
    assert failed.stdout is not None and b"RuntimeError: the probe failed" in failed.stdout.read()


def test_signals_reach_the_child_and_a_killed_stand_in_takes_its_child_along(server):
    fork_server, tmp_path = server
    assert run(fork_server, tmp_path, "exit", "0").wait(timeout=60) == 0
    terminated = fork_python(tmp_path, fork_server, "sleep")
    child, _ = probe_pids(terminated)
    terminated.terminate()  # what AReaL's kill_process_tree sends first
    assert terminated.wait(timeout=60) == -signal.SIGTERM and gone(child)
    killed = fork_python(tmp_path, fork_server, "sleep")
    child, _ = probe_pids(killed)
    killed.kill()  # and then: nothing is forwarded, the lifeline closes
    assert killed.wait(timeout=60) == -signal.SIGKILL and gone(child)


def test_what_the_server_cannot_fork_runs_on_the_real_interpreter(server):
    fork_server, tmp_path = server
    assert run(fork_server, tmp_path, "exit", "0").wait(timeout=60) == 0
    (tmp_path / "modules" / "other_probe.py").write_text(PROBE)
    cases = {
        "another module": fork_python(tmp_path, fork_server, "exit", "4", module="other_probe"),
        "an import-time variable": fork_python(
            tmp_path, fork_server, "exit", "4", PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION="python"
        ),
        "no server": fork_python(tmp_path, fork_server, "exit", "4", **{SOCKET_VARIABLE: str(tmp_path / "none")}),
    }
    for case, process in cases.items():
        pid, _ = probe_pids(process)
        assert pid == process.pid, case  # the stand-in exec'd the real interpreter: no child of the server
        assert process.wait(timeout=60) == 4, case


# --- one server shared by runners (the pod_runner fixture's runners in AReaL's lane) ---------------------------------

UNREACHABLE_KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: none, cluster: {server: "https://127.0.0.1:9"}}]
contexts: [{name: none, context: {cluster: none, user: none}}]
current-context: none
users: [{name: none, user: {token: unused}}]
"""


def test_runners_that_share_a_server_fork_from_it_and_leave_it_running(server):
    from podrunner.watch import PodRunner

    fork_server, tmp_path = server
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(UNREACHABLE_KUBECONFIG)
    modules = (str(tmp_path / "modules"),)

    def runner(namespace: str, pythonpath: tuple[str, ...] = modules) -> PodRunner:
        return PodRunner(
            kubeconfig,
            namespace,
            tmp_path / namespace,
            module_map={},
            python=sys.executable,
            pythonpath=pythonpath,
            fork_server=fork_server,
        )

    first = runner("first")
    assert first.fork_server is fork_server and first.supervisor.fork_server is fork_server
    assert run(fork_server, tmp_path, "exit", "0").wait(timeout=60) == 0
    imported_once = fork_server.pid
    first.stop()
    assert imported_once is not None and fork_server._process is not None and fork_server._process.poll() is None
    second = runner("second")
    assert run(second.fork_server, tmp_path, "exit", "0").wait(timeout=60) == 0
    assert fork_server.pid == imported_once  # the same server: the module was not imported again
    with pytest.raises(ValueError, match="PYTHONPATH"):
        runner("elsewhere", pythonpath=("/elsewhere",))
