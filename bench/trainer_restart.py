"""A restarted trainer's workers against a cold start, side by side in one run, alternating, on KWOK nodes (podrunner)
and on the real node (kubelet + containerd), AReaL's real rpc_server in both.

    python bench/trainer_restart.py [--repeats 3] [--workers 2]   # on the running cluster, with --real-node

Each sample is one trial. Cold: a scheduler is built, create_workers(Job(actor, N)) and get_workers until every worker
answers (new pods: scheduled, started). The trainer then dies (its Lease stops being renewed, nothing deleted).
Restarted: a new scheduler of the same trial is built (it watches the dead trainer's Lease for two renewal intervals,
then takes it over), create_workers of the same job restarts each worker in place, get_workers until they answer.
The restarted time is split into the constructor (the Lease watch) and the rest. Not part of `make bench`: the real
node needs root and runs one per machine, while `make bench` runs on a cluster of its own. The result is saved as
bench/results/trainer_restart.json, which bench/report.py renders into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path

from areal_workers import Job, KubernetesScheduler, SchedulingSpec
from harness import Table, real_node_result, save
from real_node_startup import alternate, trial_config

COMMAND = "python -m areal.infra.rpc.rpc_server"
LEASE_GRACE_SECONDS = 8.0  # the restarted trainer watches the dead one's Lease for half of it


def sample(where: str, kubeconfig: Path, namespace: str, work: Path, workers: int) -> dict[str, float]:
    config = trial_config(
        where, kubeconfig, namespace, work, lease_grace_seconds=LEASE_GRACE_SECONDS, termination_grace_seconds=5
    )
    trial = f"{where}{uuid.uuid4().hex[:4]}"
    cpu = 0.5 if where == "real" else 1
    job = Job(role="actor", replicas=workers, tasks=[SchedulingSpec(cpu=cpu, gpu=0, mem=2, cmd=COMMAND)])
    started = time.monotonic()
    first = KubernetesScheduler(config=config, experiment_name="bench", trial_name=trial)
    first.create_workers(job)
    first.get_workers("actor")
    cold = time.monotonic() - started
    first.close()  # dies without deleting anything: its Lease is no longer renewed
    started = time.monotonic()
    second = KubernetesScheduler(config=config, experiment_name="bench", trial_name=trial)
    built = time.monotonic() - started
    try:
        second.create_workers(job)
        second.get_workers("actor")
        restarted = time.monotonic() - started
    finally:
        second.delete_workers()
        second.close()
    return {"cold": cold, "restarted": restarted, "lease_watch": built}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    samples = alternate(
        "bench-restart",
        args.repeats,
        lambda where, kubeconfig, namespace, work: sample(where, kubeconfig, namespace, work, args.workers),
    )
    rows = []
    for where, taken in samples.items():
        median = {key: statistics.median(s[key] for s in taken) for key in ("cold", "restarted", "lease_watch")}
        rows.append(
            [
                where,
                round(median["cold"], 1),
                round(median["restarted"], 1),
                round(median["lease_watch"], 1),
                round(median["restarted"] - median["lease_watch"], 1),
                round(median["restarted"] / median["cold"], 2),
            ]
        )
    result = real_node_result(
        "trainer_restart",
        "A restarted trainer's workers against a cold start",
        (
            f"Cold: a new trial's create_workers + get_workers of {args.workers} AReaL workers (new pods). Restarted: "
            "the trainer died (Lease unrenewed, nothing deleted) and a new scheduler of the same trial builds "
            f"(watching the dead Lease for two renewal intervals, grace {LEASE_GRACE_SECONDS:g} s), then "
            "create_workers restarts each worker in place and get_workers waits until they answer. Medians of "
            f"{args.repeats} samples, alternating, side by side in one run. A restart in place skips what a cold "
            "start waits for on a GPU cluster (scheduling, free GPUs, image pulls, Kueue admission); here the image "
            "is local and the nodes idle, so on the real node the restart itself costs about a cold start (AReaL's "
            "import dominates both), and on KWOK nodes podrunner forks a cold worker from a process that imported "
            "AReaL once, under a second, while a restarted one also waits for the old guard's exit and podrunner's "
            "1 s back-off."
        ),
        f"trainer_restart.py --repeats {args.repeats} --workers {args.workers}",
        Table(
            caption=f"{args.workers} workers, seconds (median of {args.repeats})",
            columns=["node", "cold", "restarted", "of which Lease watch", "restart itself", "restarted / cold"],
            rows=rows,
        ),
    )
    print(save(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
