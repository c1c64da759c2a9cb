"""Time to the first Ready worker on the real node (kubelet + containerd + runc) against the same worker on a KWOK node
run by podrunner, side by side in one run, alternating; AReaL's real rpc_server in both.

    python bench/real_node_startup.py [--repeats 3] [--cpu 1]   # on the running local cluster, with --real-node

The worker's CPU request is also its limit (the chart's requests are limits): on the real node the kernel enforces it
(CFS quota) while podrunner's processes on KWOK nodes run unlimited, so --cpu 0.25 shows the quota's cost and --cpu 1
the node's own. The result is saved as bench/results/real-node-startup-cpu<cpu>.json, which bench/report.py
renders into bench/RESULTS.md.

Each sample is one trial: create_workers(Job(role, 1)) then get_workers until the worker answers, then
delete_workers. Not part of `make bench`: the real node needs root and runs one per machine, while `make bench` runs
on a cluster of its own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kubernetes import (
    client,
    config as kube_config,
)

from areal_workers import Job, KubernetesScheduler, KubernetesSchedulerConfig, SchedulingSpec
from harness import Result, Table, real_node_result, save
from localkube.cluster import LocalCluster
from realnode.values import worker_values
from repo_paths import AREAL_WORKER_ENV, AREAL_WORKER_PYTHON, TOOLS_BIN

COMMAND = "python -m areal.infra.rpc.rpc_server"


def values_for(where: str, shared: Path) -> dict:
    cluster = {"fileroot": str(shared), "nameResolve": {"nfsRecordRoot": str(shared / "name_resolve")}}
    if where == "real":
        return {**worker_values(AREAL_WORKER_ENV, shared), "cluster": cluster}
    return {"cluster": cluster, "workerDefaults": {"podAnnotations": {"areal-workers.dev/readiness": "external"}}}


def trial_config(
    where: str, kubeconfig: Path, namespace: str, work: Path, **overrides: Any
) -> KubernetesSchedulerConfig:
    """A trial's scheduler settings on the real node or KWOK nodes, with a shared directory of its own in `work`."""
    shared = work / f"{where}-{uuid.uuid4().hex[:6]}"
    shared.mkdir()
    shared.chmod(0o777)
    values = shared / "values.json"
    values.write_text(json.dumps(values_for(where, shared)))
    settings: dict[str, Any] = dict(
        namespace=namespace,
        kubeconfig=str(kubeconfig),
        helm_executable=str(TOOLS_BIN / "helm"),
        values_files=(str(values),),
        ready_timeout=600.0,
        helm_timeout=600.0,
    )
    if where == "kwok":  # KWOK pods are processes of this machine: AReaL's interpreter, not the first on PATH
        settings["python_executable"] = str(AREAL_WORKER_PYTHON)
    return KubernetesSchedulerConfig(**{**settings, **overrides})


def sample(where: str, kubeconfig: Path, namespace: str, work: Path, cpu: float) -> float:
    scheduler = KubernetesScheduler(
        config=trial_config(where, kubeconfig, namespace, work),
        experiment_name="bench",
        trial_name=f"{where}{uuid.uuid4().hex[:4]}",
    )
    try:
        started = time.monotonic()
        scheduler.create_workers(
            Job(role="actor", replicas=1, tasks=[SchedulingSpec(cpu=cpu, gpu=0, mem=2, port_count=2, cmd=COMMAND)])
        )
        scheduler.get_workers("actor")
        return time.monotonic() - started
    finally:
        scheduler.delete_workers()
        scheduler.close()


Sample = TypeVar("Sample")


def alternate(prefix: str, repeats: int, sample: Callable[[str, Path, str, Path], Sample]) -> dict[str, list[Sample]]:
    """`sample(where, kubeconfig, namespace, work directory)` `repeats` times on the real node and on KWOK nodes,
    alternating, in a namespace and a directory of their own; SystemExit(1) unless the local cluster runs the real
    node and AReaL's server."""
    cluster = LocalCluster()
    if not cluster.real_node().is_running() or cluster.podrunner_workers() != "areal":
        print(
            "needs the local cluster with the real node and AReaL's server: "
            "python tools/localcluster.py up --workers areal --real-node",
            file=sys.stderr,
        )
        raise SystemExit(1)
    core = client.CoreV1Api(kube_config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    samples: dict[str, list[Sample]] = {"real": [], "kwok": []}
    try:
        with tempfile.TemporaryDirectory(prefix=f"{prefix}-") as work:
            for repeat in range(repeats):
                for where in ("real", "kwok") if repeat % 2 == 0 else ("kwok", "real"):
                    samples[where].append(sample(where, cluster.kubeconfig, namespace, Path(work)))
                    print(f"{where}: {samples[where][-1]}", flush=True)
    finally:
        core.delete_namespace(namespace)
    return samples


def result(seconds: dict[str, list[float]], repeats: int, cpu: float, date: str | None = None) -> Result:
    """The samples as a Result named real-node-startup-cpu<cpu> (profile `real-node`: not run by `make bench`)."""
    medians = {where: statistics.median(values) for where, values in seconds.items()}
    ratio = medians["real"] / medians["kwok"]
    outcome = real_node_result(
        f"real-node-startup-cpu{cpu:g}",
        f"Time to the first Ready worker: real node against KWOK + podrunner, {cpu:g} CPU",
        (
            f"create_workers + get_workers of 1 worker running AReaL's rpc_server, {cpu:g} CPU (request and limit), "
            f"{repeats} samples on each node, alternating, side by side in one run. Median ratio real / KWOK: "
            f"{ratio:.2f}."
        ),
        f"real_node_startup.py --repeats {repeats} --cpu {cpu:g}",
        Table(
            caption=f"1 worker, {cpu:g} CPU, seconds",
            columns=["node", "samples (s)", "median (s)"],
            rows=[
                [where, ", ".join(f"{v:.1f}" for v in values), round(medians[where], 1)]
                for where, values in seconds.items()
            ],
        ),
    )
    if date is not None:
        outcome.date = date
    return outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu", type=float, default=1.0, help="the worker's CPU request and limit (default 1)")
    args = parser.parse_args()
    seconds = alternate(
        "bench-real-node",
        args.repeats,
        lambda where, kubeconfig, namespace, work: sample(where, kubeconfig, namespace, work, args.cpu),
    )
    print(save(result(seconds, args.repeats, args.cpu)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
