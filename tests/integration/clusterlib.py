"""Helpers for the integration tests (imported by name; conftest.py holds the fixtures)."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from areal_workers import Job, SchedulingSpec, SchedulingStrategy
from localkube.pki import service_account_kubeconfig
from localkube.rbac import apply_rbac
from podrunner.fork_client import FORK_PYTHON
from repo_paths import AREAL_WORKER_PYTHON, LOCALWORKER_PATH, REPO

# Worker pods whose processes podrunner (tools/podrunner/) runs and whose readiness it probes, as a kubelet would.
RUN_PODS = {
    "workerDefaults": {
        "podAnnotations": {"areal-workers.dev/readiness": "external"},
        "terminationGracePeriodSeconds": 5,
    }
}
# KWOK and podrunner leave pods with this annotation alone: tests write their status (fault injection).
HOLD = {"areal-workers.dev/kwok-hold": "true"}


def spec(**overrides) -> SchedulingSpec:
    values = {"cpu": 1, "mem": 1, "gpu": 0, "port_count": 2, "cmd": "python -m areal.infra.rpc.rpc_server"}
    values.update(overrides)
    return SchedulingSpec(**values)


def job(role: str, replicas: int, tasks: list[SchedulingSpec] | None = None, **strategy) -> Job:
    return Job(
        role=role,
        replicas=replicas,
        tasks=tasks or [spec()],
        scheduling_strategy=SchedulingStrategy(**strategy) if strategy else SchedulingStrategy(),
    )


def guard_health(worker) -> dict:
    with urllib.request.urlopen(f"http://{worker.ip}:{worker.worker_ports[0]}/health", timeout=5) as response:
        return json.load(response)


def controller_kubeconfig(admin_kubeconfig, namespace: str, out, policy: bool = True) -> str:
    """Applies rbac/ in the namespace, with its admission policy bound to that namespace alone (localkube/rbac.py;
    `policy=False` leaves it out), and returns a kubeconfig of the controller ServiceAccount's token."""
    apply_rbac(admin_kubeconfig, namespace, policy=policy)
    return str(service_account_kubeconfig(admin_kubeconfig, namespace, "areal-controller", out))


# --- worker lanes: which server runs in the worker pods ------------------------------------------------------

LANE_VARIABLE = "AREAL_WORKERS_WORKER"
# The tests' own types a worker rebuilds from the wire (wire_types: the experiment config AReaL's /configure imports).
SUPPORT_DIR = REPO / "tests" / "support"


@dataclass(frozen=True)
class WorkerLane:
    """What podrunner runs for a worker pod's `python -m areal.infra.rpc.rpc_server`, and the scheduler settings
    that go with it."""

    name: str
    python: str  # interpreter of worker pods, which podrunner runs for their `python`
    module_map: dict[str, str] | None  # podrunner's module swaps (None: its default, the reference guard)
    fork_module: str
    counter_engine: str  # import path of a Counter engine this server accepts
    pythonpath: tuple[str, ...] = ()
    timeouts: dict[str, float] = field(default_factory=dict)  # KubernetesSchedulerConfig time-outs
    # The scheduler's python_executable: the `python` of the worker command (swapped for `python` above) and of
    # process-mode forks.
    fork_python: str = sys.executable


REFERENCE_LANE = WorkerLane(
    name="reference",
    python=sys.executable,
    module_map=None,
    fork_module="localworker.reference_guard",
    counter_engine="localworker.engines.Counter",
    timeouts={"ready_timeout": 60.0, "helm_timeout": 60.0},
)
# A server that imports torch takes seconds to start, many more with several starting at once on 2 cores.
AREAL_LANE = WorkerLane(
    name="areal",
    python=str(AREAL_WORKER_PYTHON),
    module_map={},
    fork_module="areal.infra.rpc.rpc_server",
    counter_engine="localworker.areal_engines.Counter",
    pythonpath=(str(LOCALWORKER_PATH), str(SUPPORT_DIR)),  # localworker.areal_engines; wire_types
    timeouts={"ready_timeout": 180.0, "helm_timeout": 180.0, "fork_ready_timeout": 180.0},
    # A fork of AReaL's server is a child of the pod's fork server, not another import of torch and AReaL.
    fork_python=str(FORK_PYTHON),
)
LANES = {lane.name: lane for lane in (REFERENCE_LANE, AREAL_LANE)}


def edited_kubeconfig(kubeconfig: Path, out: Path, server: str | None = None, token: str | None = None) -> Path:
    """A copy of `kubeconfig` at `out` whose clusters' server is `server` and whose users' credential is `token`
    (each when given)."""
    data = yaml.safe_load(kubeconfig.read_text())
    if server is not None:
        for cluster in data["clusters"]:
            cluster["cluster"]["server"] = server
    if token is not None:
        for user in data["users"]:
            user["user"] = {"token": token}
    out.write_text(yaml.safe_dump(data))
    return out


def lane_name() -> str:
    return os.environ.get(LANE_VARIABLE) or REFERENCE_LANE.name


def selected_lane() -> WorkerLane:
    """The lane of $AREAL_WORKERS_WORKER: "reference" (default, localworker.reference_guard) or "areal"
    (AReaL's real rpc_server from `make areal-worker`)."""
    name = lane_name()
    if name not in LANES:
        raise ValueError(f"{LANE_VARIABLE}={name!r}: expected one of {sorted(LANES)}")
    lane = LANES[name]
    if lane is AREAL_LANE and not Path(lane.python).exists():
        raise FileNotFoundError(
            f"{LANE_VARIABLE}=areal needs AReaL's worker environment: run `make areal-worker` "
            f"({lane.python} is missing)"
        )
    return lane


def lane_values(lane: WorkerLane, root: Path) -> dict:
    """Chart values for the lane: AReaL's server writes name-resolve records and forks' logs under --fileroot and
    --nfs-record-root, so they go into the test's directory rather than the chart's /tmp/areal."""
    if lane is REFERENCE_LANE:
        return {}
    return {"cluster": {"fileroot": str(root), "nameResolve": {"nfsRecordRoot": str(root / "name_resolve")}}}


def counter_engine() -> str:
    """The Counter engine of $AREAL_WORKERS_WORKER's lane (checked by the worker_lane fixture, not here: a test
    module reads this while it is collected)."""
    return LANES.get(lane_name(), REFERENCE_LANE).counter_engine


# --- what worker processes show: podrunner runs worker pods as local processes ----------------------------------


def process_argv(pid: int) -> list[str]:
    """The command line of a local process."""
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")[:-1]


def flag_values(argv: list[str]) -> dict[str, str]:
    """`--name value` pairs of a command line."""
    return {name: value for name, value in zip(argv, argv[1:]) if name.startswith("--")}


def wait_for_text(path: Path, timeout: float = 60.0) -> str:
    """The text of a file a worker writes (e.g. an engine's destroy marker), once it exists."""
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} not written in {timeout}s"
        time.sleep(0.2)
    return path.read_text()


def wait_for(predicate, timeout: float = 60.0, what: str = "condition", interval: float = 0.2):
    """The first truthy value of `predicate()`, polled every `interval` seconds; AssertionError after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what} not reached in {timeout:.0f}s")


TRAINER_IMAGE = "local/areal-trainer:dev"  # a KWOK pod of this image runs with AReaL's environment (podrunner)


def submit_trainer(capsys, kubeconfig: Path, namespace: str, *argv: str, start_timeout: float = 120.0):
    """(exit code, stdout, stderr) of `areal-workers submit` with the trainer image; `argv`: its other arguments."""
    from areal_workers.cli.main import main

    code = main(
        ["--kubeconfig", str(kubeconfig), "-n", namespace, "submit", "--image", TRAINER_IMAGE]
        + ["--start-timeout", f"{start_timeout:g}", *argv]
    )
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def default_sigint() -> None:
    """A subprocess's preexec_fn: a run started in the background of a non-interactive shell (CI) ignores SIGINT, and
    the ignoring is inherited; Python turns SIGINT into KeyboardInterrupt only when it starts with the default
    disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
