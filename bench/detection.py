"""Detection and rollback: from a fault in one worker pod's status to the scheduler's decision that the role has
failed (detection), and from that decision to the release back at its last good revision (rollback).

For each fault a healthy role `base` is created first (KWOK makes its pods Ready; its revision becomes the good
one), then a role `faulty` whose pods carry `areal-workers.dev/kwok-hold` (KWOK and podrunner leave them alone).
get_workers("faulty") waits on another thread; the fault is written into one pod's status; the scheduler's rollback
is timed from its start (the error decided, with its diagnosis read: events, log tail) to its end (helm rollback,
stuck pods replaced).
Unschedulable is the real kube-scheduler's verdict on a pod asking for more GPUs than any node has: timed from
the moment get_workers starts with the condition already on the pod.

    .venv/bin/python bench/detection.py --profile quick --kubeconfig PATH
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

import cluster_kit as kit
import harness
from areal_workers import Job, KubernetesScheduler, SchedulingSpec, WorkerFailedError

NAME = "detection"
TITLE = "Detection and rollback latency"
CMD = "python -m areal.infra.rpc.rpc_server"
TARGET_MEDIAN_MS = 100.0


def _waiting(reason: str, message: str, restarts: int = 0, last: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": "worker",
        "image": "x",
        "imageID": "",
        "ready": False,
        "restartCount": restarts,
        "state": {"waiting": {"reason": reason, "message": message}},
    }
    if last is not None:
        status["lastState"] = {"terminated": last}
    return {"phase": "Pending" if not restarts else "Running", "containerStatuses": [status]}


FAULTS: dict[str, dict[str, Any] | None] = {
    "ImagePullBackOff": _waiting("ImagePullBackOff", 'Back-off pulling image "x"'),
    "CrashLoopBackOff": _waiting(
        "CrashLoopBackOff", "back-off 40s restarting failed container", 3, {"reason": "Error", "exitCode": 1}
    ),
    "OOMKilled": _waiting("CrashLoopBackOff", "back-off", 1, {"reason": "OOMKilled", "exitCode": 137}),
    "Evicted": {"phase": "Failed", "reason": "Evicted", "message": "The node was low on resource: memory."},
    "Unschedulable": None,  # the kube-scheduler's own condition
}


@dataclass(frozen=True)
class Settings:
    repeats: int
    replicas: int


PROFILES = {"tiny": Settings(1, 2), "quick": Settings(2, 4), "full": Settings(7, 4)}


@dataclass
class Sample:
    detection_s: float
    rollback_s: float


class RollbackClock:
    """Records when the scheduler's rollback starts and ends (it starts once the failure is decided)."""

    def __init__(self, scheduler: KubernetesScheduler) -> None:
        self.started = self.ended = 0.0
        roll_back = scheduler.driver.roll_back

        def timed(error: BaseException) -> None:
            self.started = time.monotonic()
            roll_back(error)
            self.ended = time.monotonic()

        scheduler.driver.roll_back = timed  # type: ignore[method-assign]


def _pods(core: client.CoreV1Api, namespace: str, replicas: int, scheduled: bool) -> list[client.V1Pod]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(namespace, label_selector="areal.io/role=faulty").items
        if len(pods) == replicas and all(_placed(p) if scheduled else _unschedulable(p) for p in pods):
            return sorted(pods, key=lambda p: p.metadata.name)
        time.sleep(0.05)
    raise RuntimeError(f"faulty pods not {'scheduled' if scheduled else 'marked Unschedulable'} within 60 s")


def _placed(pod: client.V1Pod) -> bool:
    return bool(pod.spec.node_name)


def _unschedulable(pod: client.V1Pod) -> bool:
    return any(c.type == "PodScheduled" and c.reason == "Unschedulable" for c in pod.status.conditions or [])


def measure(scheduler: KubernetesScheduler, core: client.CoreV1Api, fault: str, replicas: int) -> Sample:
    scheduler.create_workers(Job(role="base", replicas=1, tasks=[SchedulingSpec(cpu=0.1, mem=0.1, cmd=CMD)]))
    scheduler.get_workers("base", timeout=120)
    gpus = 16 if FAULTS[fault] is None else 0
    scheduler.create_workers(
        Job(role="faulty", replicas=replicas, tasks=[SchedulingSpec(cpu=0.1, mem=0.1, gpu=gpus, cmd=CMD)])
    )
    pods = _pods(core, scheduler.namespace, replicas, scheduled=FAULTS[fault] is not None)
    clock = RollbackClock(scheduler)
    raised = threading.Event()

    def wait() -> None:
        try:
            scheduler.get_workers("faulty", timeout=60)
        except WorkerFailedError:
            raised.set()

    waiter = threading.Thread(target=wait)
    if FAULTS[fault] is None:
        injected = time.monotonic()
        waiter.start()
    else:
        waiter.start()
        time.sleep(1.0)  # the watch is established
        injected = time.monotonic()
        core.patch_namespaced_pod_status(pods[-1].metadata.name, scheduler.namespace, {"status": FAULTS[fault]})
    waiter.join(90)
    if not raised.is_set() or not clock.ended:
        raise RuntimeError(f"{fault}: get_workers did not fail and roll back within 90 s")
    return Sample(clock.started - injected, clock.ended - clock.started)


def run(
    profile: str, kubeconfig: str, progress: kit.Progress, *, results_dir: Path = harness.RESULTS
) -> harness.Result:
    settings = PROFILES[profile]
    load_start = kit.loadavg()
    core = kit.core_api(kubeconfig)
    samples: dict[str, list[Sample]] = {}
    # base's pods are Ready at once (KWOK alone); faulty's are left to the injected status.
    values = {
        "workerDefaults": {"podAnnotations": {"areal-workers.dev/readiness": "kwok"}},
        "roles": {"faulty": {"podAnnotations": kit.HOLD}},
    }
    with kit.namespace(core, "bench-detection") as namespace, kit.scratch_dir("detection") as scratch:
        scheduler = kit.make_scheduler(kubeconfig, namespace, "detection", values, Path(scratch), capacity_check="off")
        try:
            for fault in FAULTS:
                for repeat in range(settings.repeats):
                    sample = measure(scheduler, core, fault, settings.replicas)
                    samples.setdefault(fault, []).append(sample)
                    progress(
                        f"{fault} #{repeat + 1}: detection {sample.detection_s * 1000:.0f} ms, "
                        f"rollback {sample.rollback_s * 1000:.0f} ms"
                    )
                    scheduler.delete_workers()
        finally:
            scheduler.delete_workers()
            scheduler.close()
    outcome = kit.result(NAME, TITLE, _summary(settings), profile, load_start)
    rows = []
    for fault, found in samples.items():
        detection = [s.detection_s * 1000 for s in found]
        rollback = [s.rollback_s * 1000 for s in found]
        rows.append(
            [
                fault,
                round(kit.median(detection)),
                round(min(detection)),
                round(max(detection)),
                round(kit.median(rollback)),
                round(min(rollback)),
                round(max(rollback)),
            ]
        )
    outcome.tables.append(
        harness.Table(
            f"{settings.replicas} pods per faulty role, {settings.repeats} repeat(s) per fault",
            ["fault", "detection median ms", "min", "max", "rollback median ms", "min", "max"],
            rows,
        )
    )
    all_detection = [s.detection_s * 1000 for found in samples.values() for s in found]
    verdict = "met" if kit.median(all_detection) < TARGET_MEDIAN_MS else "missed"
    outcome.targets.append(
        f"{verdict}: detection median {kit.median(all_detection):.0f} ms over every fault "
        f"(target < {TARGET_MEDIAN_MS:.0f} ms)"
    )
    outcome.plots.append(_plot(samples, results_dir))
    return outcome


def _summary(settings: Settings) -> str:
    return (
        "Detection: from the fault written into one pod's status (or, for Unschedulable, from get_workers' "
        "start with the kube-scheduler's condition already on the pod) to the failure decided, its diagnosis "
        "(events, log tail) read. Rollback: from that decision to the release back at the last good revision "
        "(helm rollback, pods stuck on the failed revision replaced). The faulty role is the release's second "
        f"change; its {settings.replicas} pods are held by KWOK so only the injected status counts."
    )


def _plot(samples: dict[str, list[Sample]], results_dir: Path) -> str:
    plt = kit.pyplot()
    path, name = kit.plot_file(results_dir, NAME)
    faults = list(samples)
    detection = [kit.median([s.detection_s * 1000 for s in samples[f]]) for f in faults]
    rollback = [kit.median([s.rollback_s * 1000 for s in samples[f]]) for f in faults]
    figure, axes = plt.subplots(figsize=(8, 4))
    axes.bar(faults, detection, label="detection")
    axes.bar(faults, rollback, bottom=detection, label="rollback")
    axes.set_ylabel("median ms")
    axes.set_title(TITLE)
    axes.legend()
    kit.save_figure(figure, path)
    return name


if __name__ == "__main__":
    raise SystemExit(kit.main(run, TITLE))
