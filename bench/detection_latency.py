"""Detection latency: from a fault written into a worker pod's status to the error raised by get_workers.

Starts (or reuses) the local cluster, then for each fault kind and repeat: creates a role whose pods KWOK and
podrunner leave alone, waits in get_workers on another thread, writes the fault into one pod's status, and records
the time until get_workers raises. The release is then deleted. Results go to bench/results/detection-latency.md.

    .venv/bin/python bench/detection_latency.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))

from kubernetes import client, config  # noqa: E402

from areal_workers import (  # noqa: E402
    Job,
    KubernetesScheduler,
    KubernetesSchedulerConfig,
    SchedulingSpec,
    WorkerFailedError,
)
from localcluster import LocalCluster  # noqa: E402

HOLD = {"areal-workers.dev/kwok-hold": "true"}
FAULTS = {
    "ImagePullBackOff": {"phase": "Pending", "containerStatuses": [{
        "name": "worker", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
        "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image \"x\""}}}]},
    "OOMKilled": {"phase": "Running", "containerStatuses": [{
        "name": "worker", "image": "x", "imageID": "", "ready": False, "restartCount": 1,
        "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off"}},
        "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]},
    "Evicted": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."},
}


def measure(scheduler: KubernetesScheduler, core: client.CoreV1Api, fault: dict, replicas: int) -> float:
    scheduler.create_workers(Job(role="faulty", replicas=replicas, tasks=[SchedulingSpec(cpu=1, mem=1, cmd="python -m areal.infra.rpc.rpc_server")]))
    deadline = time.monotonic() + 30
    while True:
        pods = core.list_namespaced_pod(scheduler.namespace, label_selector="areal.io/role=faulty").items
        if len(pods) == replicas and all(p.spec.node_name for p in pods):
            break
        if time.monotonic() > deadline:
            raise RuntimeError("pods not scheduled")
        time.sleep(0.05)
    raised: dict[str, float] = {}

    def wait() -> None:
        try:
            scheduler.get_workers("faulty", timeout=60)
        except WorkerFailedError:
            raised["at"] = time.monotonic()

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(1.0)  # the watch is established
    victim = sorted(pods, key=lambda p: p.metadata.name)[-1]
    injected = time.monotonic()
    core.patch_namespaced_pod_status(victim.metadata.name, scheduler.namespace, {"status": fault})
    waiter.join(60)
    if "at" not in raised:
        raise RuntimeError("get_workers did not raise WorkerFailedError")
    return raised["at"] - injected


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--replicas", type=int, default=4)
    args = parser.parse_args()
    cluster = LocalCluster()
    cluster.up()
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core = client.CoreV1Api(api)
    namespace = f"bench-detection-{int(time.time())}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        values = Path(tmp) / "hold.json"
        values.write_text(json.dumps({"workerDefaults": {"podAnnotations": HOLD}}))
        settings = KubernetesSchedulerConfig(namespace=namespace, kubeconfig=str(cluster.kubeconfig),
                                             helm_executable=str(REPO / ".tools" / "bin" / "helm"),
                                             values_files=(str(values),))
        scheduler = KubernetesScheduler(config=settings, experiment_name="bench", trial_name="detection")
        try:
            for kind, fault in FAULTS.items():
                for _ in range(args.repeats):
                    results.setdefault(kind, []).append(measure(scheduler, core, fault, args.replicas))
                    scheduler.delete_workers()
        finally:
            scheduler.delete_workers()
            scheduler.close()
            core.delete_namespace(namespace)
    lines = ["# Detection latency", "",
             f"From a fault written into one of {args.replicas} pods' status to WorkerFailedError raised by "
             f"get_workers (one watch, {args.repeats} repeats each, local cluster, {time.strftime('%Y-%m-%d')}). "
             f"It includes reading the pod's events and logs and rolling the release back (here an uninstall: the "
             f"failing role was the release's first change), i.e. everything before AReaL sees the error.", "",
             "| fault | median ms | min ms | max ms |", "|---|---|---|---|"]
    for kind, samples in results.items():
        ms = [s * 1000 for s in samples]
        lines.append(f"| {kind} | {statistics.median(ms):.0f} | {min(ms):.0f} | {max(ms):.0f} |")
    report = "\n".join(lines) + "\n"
    out = REPO / "bench" / "results" / "detection-latency.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report)
    print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
