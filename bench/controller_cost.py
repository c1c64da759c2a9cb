"""What managing many workers costs the controller process: its resident memory (VmRSS and the peak VmHWM from
/proc/self/status) and CPU time (getrusage of the process, and of the helm subprocesses it ran and reaped) per
phase of create_workers, get_workers (waiting for Ready), call-free get_workers repeats and delete_workers, for N
workers (quick 128, full 1024) in roles of 64.

No worker process runs: the pods carry `areal-workers.dev/readiness: kwok` (workerDefaults.podAnnotations in the
scheduler's values file), which the `pod-ready-kwok` stage of tools/localkube/kwok-stages.yaml turns Ready (with a
pod IP) as soon as a pod is scheduled, and which podrunner leaves alone; the namespace is also private, so no
podrunner runs its pods. Memory is absolute for the whole process (the benchmark's own imports included); the
"RSS growth" column is relative to the moment before the scheduler was built.

    .venv/bin/python bench/controller_cost.py --profile quick --kubeconfig PATH
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cluster_kit as kit
import harness
from areal_workers import Job, SchedulingSpec

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


def measure(kubeconfig: str, settings: Settings, progress: kit.Progress) -> list[Phase]:
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
            phase("delete_workers", baseline, scheduler.delete_workers, phases, progress)
        finally:
            scheduler.delete_workers()
            scheduler.close()
    return phases


def report(phases: list[Phase], settings: Settings, profile: str, plot: str, load_start: list[float]) -> harness.Result:
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
    outcome = kit.result(
        NAME,
        TITLE,
        f"{settings.workers} workers in {-(-settings.workers // settings.role_size)} role(s): "
        f"{total_cpu:.1f} CPU s in the adapter's process and {total_helm:.1f} in helm over the "
        f"whole cycle; RSS grew by at most {held.growth_kib / 1024:.1f} MiB ({held.name}), "
        f"{held.growth_kib / settings.workers:.1f} KiB per worker.",
        profile,
        load_start,
    )
    outcome.tables = [
        harness.Table(
            f"Per phase, {settings.workers} workers (KWOK-ready pods, no worker process)",
            ["phase", "wall s", "adapter CPU s", "helm CPU s", "RSS MiB", "RSS growth MiB", "peak RSS MiB"],
            rows,
        )
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
    phases = measure(kubeconfig, settings, progress)
    path, plot = kit.plot_file(results_dir, NAME)
    draw(phases, settings.workers, path)
    return report(phases, settings, profile, plot, load_start)


if __name__ == "__main__":
    raise SystemExit(kit.main(run, __doc__.splitlines()[0]))
