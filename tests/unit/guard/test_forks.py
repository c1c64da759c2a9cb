"""Process-mode fork plans: AReaL's fork command line, and the exit marker that reports a child that dies."""

from __future__ import annotations

import subprocess
import sys

from areal_workers.guard.forks import ForkPlan, parse_exit

FLAGS = (
    "--name-resolve-type",
    "nfs",
    "--nfs-record-root",
    "/shared/nr",
    "--etcd3-addr",
    "e:2379",
    "--fileroot",
    "/shared/root",
)


def plan(python: str = "python", module: str = "areal.infra.rpc.rpc_server") -> ForkPlan:
    return ForkPlan(
        role="ref",
        module=module,
        python=python,
        experiment="exp",
        trial="t1",
        worker_flags=FLAGS,
        port_count=2,
        ready_timeout=60.0,
    )


def test_worker_argv_is_areals_fork_command_with_the_charts_flags():
    """AReaL LocalScheduler._fork_single_worker: python -m MODULE --host H --port P --experiment-name E
    --trial-name T --role R --worker-index I, then the name-resolve and fileroot flags."""
    assert plan().worker_argv(1, "127.20.0.5", 9001) == [
        "python",
        "-m",
        "areal.infra.rpc.rpc_server",
        "--host",
        "127.20.0.5",
        "--port",
        "9001",
        "--experiment-name",
        "exp",
        "--trial-name",
        "t1",
        "--role",
        "ref",
        "--worker-index",
        "1",
        *FLAGS,
    ]


def test_the_wrapper_runs_the_worker_argv_unchanged_and_reports_its_exit_code():
    fork = ForkPlan(
        role="ref",
        module="no_such_module_for_fork_tests",
        python=sys.executable,
        experiment="e",
        trial="t",
        worker_flags=(),
        port_count=1,
        ready_timeout=1.0,
    )
    # As the guard runs it: the child's stdout and stderr both go to the guard's output (the container log).
    finished = subprocess.run(
        fork.argv(0, "127.0.0.1", 1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60
    )
    lines = finished.stdout.splitlines()
    assert finished.returncode == 1
    ended = parse_exit(lines, fork.exit_marker(0))
    assert ended is not None and ended.exit_code == 1
    assert any("No module named no_such_module_for_fork_tests" in line for line in ended.log_tail)


def test_an_exit_is_found_only_for_this_attempt_and_index():
    first, second = plan(), plan()
    lines = ["starting", f"{first.exit_marker(0)}3"]
    assert parse_exit(lines, second.exit_marker(0)) is None  # an earlier attempt's exit
    assert parse_exit(lines, first.exit_marker(1)) is None
    assert parse_exit(lines, first.exit_marker(0)).exit_code == 3


def test_a_logged_command_line_is_not_mistaken_for_an_exit():
    fork = plan()
    logged = "Forking: " + " ".join(fork.argv(0, "h", 1))  # the marker text followed by "$code"
    assert parse_exit([logged], fork.exit_marker(0)) is None


def test_the_exit_carries_the_lines_before_it():
    fork = plan()
    lines = [f"line {i}" for i in range(30)] + [f"{fork.exit_marker(2)}137"]
    ended = parse_exit(lines, fork.exit_marker(2))
    assert ended.exit_code == 137 and ended.log_tail == tuple(f"line {i}" for i in range(10, 30))


def test_a_fork_carries_its_own_identity_not_its_parents():
    assert plan().env(3) == {"AREAL_ROLE": "ref", "AREAL_WORKER_INDEX": "3", "AREAL_WORKER_ID": "ref/3"}
