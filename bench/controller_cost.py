"""What managing many workers costs the controller process: its resident memory (VmRSS and the peak VmHWM from
/proc/self/status) and CPU time (getrusage of the process, and of the helm subprocesses it ran and reaped) per
phase of create_workers, get_workers (waiting for Ready), call-free get_workers repeats and delete_workers, for N
workers (quick 128, full 1024) in roles of 64.

No worker process runs: the pods carry `areal-workers.dev/readiness: kwok` (workerDefaults.podAnnotations in the
scheduler's values file), which the `pod-ready-kwok` stage of tools/localkube/kwok-stages.yaml turns Ready (with a
pod IP) as soon as a pod is scheduled, and which podrunner leaves alone; the namespace is also private, so no
podrunner runs its pods. Memory is absolute for the whole process (the benchmark's own imports included); the
"RSS growth" column is relative to the moment before the scheduler was built.

It also measures the record of the worker pods AReaL holds (`areal.io/ready-pods` on the release's topology ConfigMap,
adapter/areal_workers/pods/ready_pods.py), which get_workers writes once a role's workers are ready: each write's
size and time (the inspector's GET of the ConfigMap, render and PATCH), and its size against the apiserver's limit of
256 KiB for one object's annotations once every worker is held.

    .venv/bin/python bench/controller_cost.py --profile quick --kubeconfig PATH
"""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cluster_kit as kit
import harness
from areal_workers import Job, KubernetesScheduler, SchedulingSpec, naming
from areal_workers.pods import ready_pods
from areal_workers.pods.inspector import ReadyRevision

NAME = "controller_cost"
TITLE = "Controller cost: memory and CPU of the adapter managing N workers"
KWOK_READY = {"areal-workers.dev/readiness": "kwok"}
SPEC = SchedulingSpec(cpu=0.1, mem=0.1, port_count=1, cmd="python -m areal.infra.rpc.rpc_server")


@dataclass(frozen=True)
class Settings:
    workers: int
    role_size: int
    repeats: int  # call-free get_workers rounds once every worker is Ready


PROFILES = {"tiny": Settings(8, 8, 2), "quick": Settings(128, 64, 3), "full": Settings(1024, 64, 3)}
ANNOTATIONS_LIMIT = 256 * 1024  # bytes: the apiserver's limit on all annotations of one object, keys included
CODEC_REPEATS = 20


@dataclass(frozen=True)
class Usage:
    cpu_s: float  # this process, user + system
    helm_cpu_s: float  # reaped children (the helm subprocesses), user + system
    rss_kib: int
    peak_kib: int
    at: float

    @staticmethod
    def now() -> Usage:
        own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
        return Usage(
            own.ru_utime + own.ru_stime,
            children.ru_utime + children.ru_stime,
            int(status["VmRSS"].split()[0]),
            int(status["VmHWM"].split()[0]),
            time.perf_counter(),
        )


@dataclass(frozen=True)
class Phase:
    name: str
    wall_s: float
    cpu_s: float
    helm_cpu_s: float
    rss_kib: int
    peak_kib: int
    growth_kib: int


def phase(
    name: str, baseline: Usage, operation: Callable[[], Any], phases: list[Phase], progress: kit.Progress
) -> None:
    before = Usage.now()
    operation()
    after = Usage.now()
    phases.append(
        Phase(
            name,
            after.at - before.at,
            after.cpu_s - before.cpu_s,
            after.helm_cpu_s - before.helm_cpu_s,
            after.rss_kib,
            after.peak_kib,
            after.rss_kib - baseline.rss_kib,
        )
    )
    progress(f"{name}: {after.at - before.at:.1f}s, RSS {after.rss_kib / 1024:.0f} MiB")


@dataclass(frozen=True)
class RecordWrite:
    pods: int
    size: int  # bytes of the annotation's value
    seconds: float


@dataclass(frozen=True)
class HeldRecord:
    """The ready-pods record once every worker is held, as read back from the topology ConfigMap."""

    writes: list[RecordWrite]
    size: int  # bytes of the annotation's value
    annotations_size: int  # bytes of every annotation of the ConfigMap, keys included
    render_s: float  # ready_pods.render of the whole record, median of CODEC_REPEATS
    parse_s: float  # ready_pods.parse of it

    @property
    def pods(self) -> int:
        return self.writes[-1].pods if self.writes else 0


def time_record_writes(scheduler: KubernetesScheduler) -> list[tuple[ready_pods.Record, float]]:
    """Wraps the scheduler's inspector so that each write of the ready-pods record is timed: the records written and
    the seconds each write took (rendered after the run, so that measuring costs the measured phases nothing)."""
    inspector = scheduler.driver.inspector
    write = inspector.record_ready
    writes: list[tuple[ready_pods.Record, float]] = []

    def timed(held: ready_pods.Record | None = None, ready: ReadyRevision | None = None) -> None:
        started = time.perf_counter()
        write(held, ready)
        if held is not None:  # the patch that carries it may carry the ready revision too
            writes.append((held, time.perf_counter() - started))

    inspector.record_ready = timed  # type: ignore[method-assign]
    return writes


def median_seconds(operation: Callable[[], Any]) -> float:
    samples = []
    for _ in range(CODEC_REPEATS):
        started = time.perf_counter()
        operation()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def held_record(core: Any, namespace: str, release: str, writes: list[tuple[ready_pods.Record, float]]) -> HeldRecord:
    selector = f"{naming.release_selector(release)},{naming.LABEL_COMPONENT}=topology"
    [configmap] = core.list_namespaced_config_map(namespace, label_selector=selector).items
    annotations: dict[str, str] = configmap.metadata.annotations or {}
    value = annotations.get(ready_pods.READY_PODS_ANNOTATION, "")
    record = ready_pods.parse(annotations)
    return HeldRecord(
        writes=[
            RecordWrite(sum(map(len, written.values())), len(ready_pods.render(written).encode()), seconds)
            for written, seconds in writes
        ],
        size=len(value.encode()),
        annotations_size=sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items()),
        render_s=median_seconds(lambda: ready_pods.render(record)),
        parse_s=median_seconds(lambda: ready_pods.parse(annotations)),
    )


def measure(kubeconfig: str, settings: Settings, progress: kit.Progress) -> tuple[list[Phase], HeldRecord]:
    core = kit.core_api(kubeconfig)
    roles = [
        (f"g{index:02d}", min(settings.role_size, settings.workers - start))
        for index, start in enumerate(range(0, settings.workers, settings.role_size))
    ]
    values = {"workerDefaults": {"podAnnotations": KWOK_READY}}
    phases: list[Phase] = []
    kit.require_pod_room(core, settings.workers)
    with kit.namespace(core, "bench-cost") as ns, kit.scratch_dir("bench-cost") as tmp:
        baseline = Usage.now()
        made: list[Any] = []
        phase(
            "build the scheduler",
            baseline,
            lambda: made.append(
                kit.make_scheduler(
                    kubeconfig, ns, "cost", values, Path(tmp), ready_timeout=max(60.0, settings.workers / 4)
                )
            ),
            phases,
            progress,
        )
        scheduler = made[0]
        writes = time_record_writes(scheduler)
        try:
            phase(
                f"create_workers x{len(roles)} ({settings.workers} workers)",
                baseline,
                lambda: [
                    scheduler.create_workers(Job(role=role, replicas=count, tasks=[SPEC])) for role, count in roles
                ],
                phases,
                progress,
            )
            phase(
                "get_workers, waiting for Ready",
                baseline,
                lambda: [scheduler.get_workers(role) for role, _ in roles],
                phases,
                progress,
            )
            for repeat in range(1, settings.repeats + 1):
                phase(
                    f"get_workers again ({repeat})",
                    baseline,
                    lambda: [scheduler.get_workers(role) for role, _ in roles],
                    phases,
                    progress,
                )
            held = held_record(core, ns, scheduler.release, writes)
            progress(f"ready-pods record: {held.pods} pods, {held.size} bytes, {len(held.writes)} write(s)")
            phase("delete_workers", baseline, scheduler.delete_workers, phases, progress)
        finally:
            scheduler.delete_workers()
            scheduler.close()
    return phases, held


def record_tables(held: HeldRecord) -> list[harness.Table]:
    per_pod = held.size / held.pods if held.pods else 0.0
    fits = int((ANNOTATIONS_LIMIT - (held.annotations_size - held.size)) / per_pod) if per_pod else 0
    return [
        harness.Table(
            f"The ready-pods record (areal.io/ready-pods) once {held.pods} workers are held",
            [
                "pods held",
                "annotation KiB",
                "bytes a pod",
                "all annotations KiB (limit 256)",
                "workers that fit the limit",
                "render ms",
                "parse ms",
            ],
            [
                [
                    held.pods,
                    round(held.size / 1024, 1),
                    round(per_pod, 1),
                    round(held.annotations_size / 1024, 1),
                    fits,
                    round(held.render_s * 1000, 2),
                    round(held.parse_s * 1000, 2),
                ]
            ],
        ),
        harness.Table(
            "Each write of the ready-pods record by get_workers (GET of the ConfigMap, render, PATCH)",
            ["write", "pods held", "annotation KiB", "write ms"],
            [
                [index, write.pods, round(write.size / 1024, 1), round(write.seconds * 1000, 1)]
                for index, write in enumerate(held.writes, 1)
            ],
        ),
    ]


def report(
    phases: list[Phase], record: HeldRecord, settings: Settings, profile: str, plot: str, load_start: list[float]
) -> harness.Result:
    rows = [
        [
            p.name,
            round(p.wall_s, 2),
            round(p.cpu_s, 2),
            round(p.helm_cpu_s, 2),
            round(p.rss_kib / 1024, 1),
            round(p.growth_kib / 1024, 1),
            round(p.peak_kib / 1024, 1),
        ]
        for p in phases
    ]
    total_cpu = sum(p.cpu_s for p in phases)
    total_helm = sum(p.helm_cpu_s for p in phases)
    held = max(phases, key=lambda p: p.growth_kib)
    slowest = max((write.seconds for write in record.writes), default=0.0)
    outcome = kit.result(
        NAME,
        TITLE,
        f"{settings.workers} workers in {-(-settings.workers // settings.role_size)} role(s): "
        f"{total_cpu:.1f} CPU s in the adapter's process and {total_helm:.1f} in helm over the "
        f"whole cycle; RSS grew by at most {held.growth_kib / 1024:.1f} MiB ({held.name}), "
        f"{held.growth_kib / settings.workers:.1f} KiB per worker. The ready-pods record of the {record.pods} held "
        f"workers is {record.size / 1024:.1f} KiB of the ConfigMap's {record.annotations_size / 1024:.1f} KiB of "
        f"annotations (limit 256 KiB); its slowest write took {slowest * 1000:.0f} ms.",
        profile,
        load_start,
    )
    outcome.targets = [
        f"{'met' if record.annotations_size <= ANNOTATIONS_LIMIT // 2 else 'missed'}: the topology ConfigMap's "
        f"annotations {record.annotations_size / 1024:.1f} KiB with {record.pods} workers held; target <= 128 KiB "
        "(half the apiserver's 256 KiB limit)"
    ]
    outcome.tables = [
        harness.Table(
            f"Per phase, {settings.workers} workers (KWOK-ready pods, no worker process)",
            ["phase", "wall s", "adapter CPU s", "helm CPU s", "RSS MiB", "RSS growth MiB", "peak RSS MiB"],
            rows,
        ),
        *record_tables(record),
    ]
    outcome.plots = [plot]
    return outcome


def draw(phases: list[Phase], workers: int, path: Path) -> None:
    plt = kit.pyplot()
    figure, (cpu, memory) = plt.subplots(1, 2, figsize=(13, 4.8))
    names = [p.name.replace(" (", "\n(").replace(", ", ",\n") for p in phases]
    positions = range(len(phases))
    cpu.bar(positions, [p.cpu_s for p in phases], 0.6, label="adapter process", color="tab:blue")
    cpu.bar(
        positions,
        [p.helm_cpu_s for p in phases],
        0.6,
        bottom=[p.cpu_s for p in phases],
        label="helm",
        color="tab:orange",
    )
    cpu.set_xticks(positions, names, fontsize=7, rotation=30, ha="right")
    cpu.set_ylabel("CPU seconds")
    cpu.set_title(f"CPU per phase, {workers} workers")
    cpu.legend()
    memory.plot(positions, [p.rss_kib / 1024 for p in phases], "o-", label="RSS after the phase")
    memory.plot(positions, [p.peak_kib / 1024 for p in phases], "s--", label="peak RSS (VmHWM)")
    memory.set_xticks(positions, names, fontsize=7, rotation=30, ha="right")
    memory.set_ylabel("MiB")
    memory.set_ylim(bottom=0)
    memory.set_title("Resident memory of the controller process")
    memory.legend()
    kit.save_figure(figure, path)


def run(
    profile: str, kubeconfig: str, progress: kit.Progress, *, results_dir: Path = harness.RESULTS
) -> harness.Result:
    settings = PROFILES[profile]
    load_start = kit.loadavg()
    phases, record = measure(kubeconfig, settings, progress)
    path, plot = kit.plot_file(results_dir, NAME)
    draw(phases, settings.workers, path)
    return report(phases, record, settings, profile, plot, load_start)


if __name__ == "__main__":
    raise SystemExit(kit.main(run, __doc__.splitlines()[0]))
