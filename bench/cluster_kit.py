"""What the cluster benchmarks (rpc_overhead, release_growth, controller_cost) share: namespaces, schedulers,
a private podrunner, extra KWOK nodes, statistics, machine load and the command line.

Every benchmark works in namespaces of its own, labelled `areal-workers.dev/podrunner=private`, so the cluster's
podrunner (whatever worker server it runs) never starts their pods; a benchmark that needs worker processes starts
its own podrunner for that namespace, as a subprocess so that its threads do not share the measured process.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import (
    client,
    config as kube_config,
)

import harness
from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig
from repo_paths import AREAL_WORKER_PYTHON, TOOLS_BIN

BENCH = Path(__file__).resolve().parent

PRIVATE = {"areal-workers.dev/podrunner": "private"}
HOLD = {"areal-workers.dev/kwok-hold": "true"}  # KWOK and podrunner leave such pods Pending and alone
# Worker pods whose readiness podrunner reports from their probe (as in tests/integration/clusterlib.RUN_PODS).
RUN_PODS = {
    "workerDefaults": {
        "podAnnotations": {"areal-workers.dev/readiness": "external"},
        "terminationGracePeriodSeconds": 5,
    }
}
Progress = Callable[[str], None]


def helm_executable() -> str:
    return os.environ.get("AREAL_WORKERS_HELM", str(TOOLS_BIN / "helm"))


@dataclass(frozen=True)
class Lane:
    """A worker server that podrunner runs for `python -m areal.infra.rpc.rpc_server`, and its Counter engine."""

    name: str  # podrunner's --workers
    label: str
    engine: str
    python: str
    fork_module: str
    ready_timeout: float

    def available(self) -> bool:
        return Path(self.python).exists()

    def values(self, root: Path) -> dict[str, Any]:
        """AReaL's server writes name-resolve records and fork logs under its flags' paths: into `root`."""
        if self.name != "areal":
            return {}
        return {"cluster": {"fileroot": str(root), "nameResolve": {"nfsRecordRoot": str(root / "name_resolve")}}}


AREAL = Lane(
    "areal",
    "AReaL rpc_server",
    "localworker.areal_engines.Counter",
    str(AREAL_WORKER_PYTHON),
    "areal.infra.rpc.rpc_server",
    600.0,
)
REFERENCE = Lane(
    "reference",
    "stand-in guard",
    "localworker.engines.Counter",
    sys.executable,
    "localworker.reference_guard",
    600.0,
)


# --------------------------------------------------------------------------- cluster objects


def core_api(kubeconfig: str) -> client.CoreV1Api:
    return client.CoreV1Api(kube_config.new_client_from_config(config_file=kubeconfig))


@contextlib.contextmanager
def namespace(core: client.CoreV1Api, prefix: str) -> Iterator[str]:
    """A fresh private namespace, deleted afterwards (without waiting)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels={**PRIVATE})))
    try:
        yield name
    finally:
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(name, propagation_policy="Background")


@contextlib.contextmanager
def private_podrunner(kubeconfig: str, namespace_name: str, lane: Lane, log_dir: Path) -> Iterator[None]:
    """`python -m podrunner` for one namespace with the lane's worker server; stops it (and its workers) after."""
    log_dir.mkdir(parents=True, exist_ok=True)
    ledger = log_dir / "ledger"
    with (log_dir / "podrunner.log").open("ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "podrunner",
                "--kubeconfig",
                kubeconfig,
                "--log-dir",
                str(log_dir),
                "--workers",
                lane.name,
                "--namespace",
                namespace_name,
                "--ledger",
                str(ledger),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            from podrunner.processes import ProcessLedger

            ProcessLedger(ledger).kill_leftovers()


def make_scheduler(
    kubeconfig: str,
    namespace_name: str,
    trial: str,
    values: dict[str, Any],
    workdir: Path,
    lane: Lane = REFERENCE,
    **overrides: Any,
) -> KubernetesScheduler:
    """A scheduler of experiment "bench" in the namespace, with `values` as its (only) values file."""
    values_file = workdir / f"values-{trial}.json"
    values_file.write_text(json.dumps(values))
    settings: dict[str, Any] = dict(
        namespace=namespace_name,
        kubeconfig=kubeconfig,
        helm_executable=helm_executable(),
        values_files=(str(values_file),),
        python_executable=lane.python,
        fork_module=lane.fork_module,
        ready_timeout=lane.ready_timeout,
        helm_timeout=300.0,
    )
    settings.update(overrides)
    return KubernetesScheduler(config=KubernetesSchedulerConfig(**settings), experiment_name="bench", trial_name=trial)


def require_pod_room(core: client.CoreV1Api, pods: int) -> None:
    """Fails at once, rather than after get_workers' time-out, when the Ready nodes lack room for `pods` more."""
    nodes = [
        n
        for n in core.list_node().items
        if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
    ]
    used = sum(
        1 for p in core.list_pod_for_all_namespaces(field_selector="status.phase!=Succeeded").items if p.spec.node_name
    )
    room = sum(int(n.status.allocatable.get("pods", "0")) for n in nodes) - used
    if room < pods:
        raise RuntimeError(
            f"the cluster's Ready nodes have room for {room} more pods, {pods} are needed: start the "
            f"local cluster with more nodes (tools/localcluster.py up --nodes N), or use bench/run.py"
        )


# --------------------------------------------------------------------------- numbers


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def median(values: list[float]) -> float:
    return statistics.median(values)


def mean(values: list[float]) -> float:
    return statistics.fmean(values)


def loadavg() -> list[float]:
    return [round(value, 2) for value in os.getloadavg()]


def result(name: str, title: str, summary: str, profile: str, load_start: list[float]) -> harness.Result:
    """A Result with the machine's load averages at the start and the end of the run (the machine is shared)."""
    made = harness.Result(
        name=name,
        title=title,
        summary=summary,
        profile=profile,
        command=f".venv/bin/python bench/{name}.py --profile {profile} --kubeconfig PATH",
    )
    made.machine = {**made.machine, "loadavg_start": load_start, "loadavg_end": loadavg()}
    return made


def plot_file(results_dir: Path, name: str) -> tuple[Path, str]:
    """The PNG's path and how the Result names it (relative to bench/ when it is under it)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    path = results_dir / f"{name}.png"
    try:
        return path, str(path.resolve().relative_to(BENCH))
    except ValueError:
        return path, str(path)


def save_figure(figure: Any, path: Path) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    pyplot().close(figure)


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# --------------------------------------------------------------------------- standalone use


def default_kubeconfig() -> str:
    from localkube.cluster import LocalCluster

    return os.environ.get("AREAL_WORKERS_KUBECONFIG") or str(LocalCluster().kubeconfig)


def main(run: Callable[..., harness.Result], description: str, argv: list[str] | None = None) -> int:
    """`python bench/<module>.py --profile quick --kubeconfig PATH`: runs, prints the tables, saves the JSON."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--profile", choices=("tiny", "quick", "full"), default="quick")
    parser.add_argument(
        "--kubeconfig",
        default=None,
        help="default: $AREAL_WORKERS_KUBECONFIG, else the local cluster's (tools/localcluster.py)",
    )
    args = parser.parse_args(argv)
    logging.getLogger("pyhelm3").setLevel(logging.ERROR)  # "command failed: helm status" of every new release
    started = time.monotonic()
    outcome = run(args.profile, args.kubeconfig or default_kubeconfig(), lambda line: print(line, flush=True))
    for table in outcome.tables:
        print(f"\n{table.caption}\n| " + " | ".join(table.columns) + " |")
        for row in table.rows:
            print("| " + " | ".join(str(cell) for cell in row) + " |")
    print("\n" + "\n".join(outcome.targets))
    print(f"saved {harness.save(outcome)} ({time.monotonic() - started:.0f}s)")
    return 0


def scratch_dir(prefix: str) -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix=f"{prefix}-")
