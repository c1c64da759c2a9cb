"""How the Helm release grows: helm upgrade time, the size of the release's Secret
(`sh.helm.release.v1.<release>.v<N>`, which Kubernetes caps at 1 MiB of data) and the number of revisions kept,
as roles are added one by one (quick 1..16, full 1..64), as one role's replicas grow, and over many revisions with
the scheduler's history_max bounding the history.

Every change is made through KubernetesScheduler (create_workers, scale_workers) in a private namespace; the
workers' pods carry `areal-workers.dev/kwok-hold`, so they stay Pending and nothing runs or reports them (only the
release is measured, get_workers is never called). "helm upgrade" is the time of the scheduler's one
`helm upgrade --install`; "create_workers" adds what the scheduler does around it (helm template for the capacity
preflight, then helm get values and the topology ConfigMap read back).

    .venv/bin/python bench/release_growth.py --profile quick --kubeconfig PATH
"""

from __future__ import annotations

import base64
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

import cluster_kit as kit
import harness
from areal_workers import Job, KubernetesScheduler, SchedulingSpec

NAME = "release_growth"
TITLE = "Release growth: helm upgrade time, release Secret size and history"
SECRET_LIMIT = 1024 * 1024  # bytes of data in one Secret
SPEC = SchedulingSpec(cpu=0.1, mem=0.1, port_count=1, cmd="python -m areal.infra.rpc.rpc_server")
TARGET_ROLES = 64


@dataclass(frozen=True)
class Settings:
    roles: tuple[int, ...]  # checkpoints of the role series (roles are created one by one up to the last)
    replicas: tuple[int, ...]
    revisions: int


PROFILES = {
    "tiny": Settings((1, 2), (1, 2), 3),
    "quick": Settings((1, 4, 12), (1, 4, 16), 14),
    "full": Settings((1, 4, 16, 64), (1, 4, 16, 64), 60),
}


@dataclass
class Step:
    x: int  # roles, replicas or revision number
    upgrade_s: float
    operation_s: float
    secret_bytes: int  # the current revision's Secret data
    history: int  # revisions kept
    kept_bytes: int  # all kept revisions' Secret data


@dataclass
class Series:
    name: str
    steps: list[Step] = field(default_factory=list)


class UpgradeTimer:
    """Times the scheduler's helm upgrades by wrapping its Releases.apply (the only call that runs one)."""

    def __init__(self, scheduler: KubernetesScheduler) -> None:
        self.last = 0.0
        releases = scheduler.driver.releases
        apply: Callable[..., Awaitable[Any]] = releases.apply

        async def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return await apply(*args, **kwargs)
            finally:
                self.last = time.perf_counter() - started

        releases.apply = timed  # type: ignore[method-assign]


def release_secrets(core: client.CoreV1Api, namespace: str, release: str) -> dict[int, int]:
    """Revision -> bytes of its Secret's data (helm's gzipped, base64-encoded release record)."""
    secrets = core.list_namespaced_secret(namespace, label_selector=f"owner=helm,name={release}").items
    return {
        int(s.metadata.labels["version"]): sum(len(base64.b64decode(v)) for v in (s.data or {}).values())
        for s in secrets
    }


def step(
    core: client.CoreV1Api, scheduler: KubernetesScheduler, timer: UpgradeTimer, x: int, operation: Callable[[], Any]
) -> Step:
    started = time.perf_counter()
    operation()
    elapsed = time.perf_counter() - started
    kept = release_secrets(core, scheduler.namespace, scheduler.release)
    return Step(x, timer.last, elapsed, kept[max(kept)], len(kept), sum(kept.values()))


def measure(kubeconfig: str, settings: Settings, progress: kit.Progress) -> tuple[list[Series], int]:
    core = kit.core_api(kubeconfig)
    values = {"workerDefaults": {"podAnnotations": kit.HOLD}}
    roles, replicas, revisions = Series("roles"), Series("replicas"), Series("revisions")
    with kit.namespace(core, "bench-release") as ns, kit.scratch_dir("bench-release") as tmp:
        for series in (roles, replicas, revisions):
            scheduler = kit.make_scheduler(kubeconfig, ns, series.name, values, Path(tmp))
            timer = UpgradeTimer(scheduler)
            try:
                if series is roles:
                    for count in range(1, settings.roles[-1] + 1):
                        job = Job(role=f"r{count:02d}", replicas=1, tasks=[SPEC])
                        series.steps.append(step(core, scheduler, timer, count, lambda: scheduler.create_workers(job)))
                elif series is replicas:
                    first = Job(role="w", replicas=settings.replicas[0], tasks=[SPEC])
                    series.steps.append(
                        step(core, scheduler, timer, first.replicas, lambda: scheduler.create_workers(first))
                    )
                    for count in settings.replicas[1:]:
                        series.steps.append(
                            step(core, scheduler, timer, count, lambda: scheduler.scale_workers("w", count))
                        )
                else:
                    first = Job(role="w", replicas=1, tasks=[SPEC])
                    series.steps.append(step(core, scheduler, timer, 1, lambda: scheduler.create_workers(first)))
                    for revision in range(2, settings.revisions + 1):
                        series.steps.append(
                            step(
                                core, scheduler, timer, revision, lambda: scheduler.scale_workers("w", 2 - revision % 2)
                            )
                        )
                progress(f"{series.name}: {len(series.steps)} helm revisions measured")
                history_max = scheduler.config.history_max
            finally:
                scheduler.delete_workers()
                scheduler.close()
    return [roles, replicas, revisions], history_max


# --------------------------------------------------------------------------- report


def kib(size: int) -> float:
    return round(size / 1024, 1)


def loglog_slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of log(y) over log(x): 1 is linear growth, below 1 better than linear."""
    xs, ys = [math.log(x) for x, _ in points], [math.log(y) for _, y in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def size_at(steps: list[Step], roles: int) -> tuple[int, bool]:
    """The Secret size at `roles` roles: measured, or extrapolated by a least-squares line (True)."""
    for item in steps:
        if item.x == roles:
            return item.secret_bytes, False
    xs, ys = [s.x for s in steps], [s.secret_bytes for s in steps]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / (sum((x - mx) ** 2 for x in xs) or 1)
    return int(my + slope * (roles - mx)), True


def report(
    series: list[Series], history_max: int, settings: Settings, profile: str, plot: str, load_start: list[float]
) -> harness.Result:
    roles, replicas, revisions = series
    checkpoints = {"roles": settings.roles, "replicas": settings.replicas}
    rows = [
        [
            s.name,
            item.x,
            round(item.upgrade_s, 2),
            round(item.operation_s, 2),
            kib(item.secret_bytes),
            round(100 * item.secret_bytes / SECRET_LIMIT, 1),
            item.history,
            kib(item.kept_bytes),
        ]
        for s in (roles, replicas)
        for item in s.steps
        if item.x in checkpoints[s.name]
    ]
    every = max(1, len(revisions.steps) // 12)
    revision_rows = [
        [item.x, round(item.upgrade_s, 2), kib(item.secret_bytes), item.history, kib(item.kept_bytes)]
        for i, item in enumerate(revisions.steps)
        if i % every == 0 or i == len(revisions.steps) - 1
    ]
    size, extrapolated = size_at(roles.steps, TARGET_ROLES)
    history = max(item.history for s in series for item in s.steps)
    slope = loglog_slope([(item.x, item.upgrade_s) for item in roles.steps if item.x in settings.roles])
    verdicts = [
        f"{'met' if size < SECRET_LIMIT / 4 else 'missed'}: release Secret well under 1 MiB at {TARGET_ROLES} roles "
        f"(< 25%) — {kib(size)} KiB, {100 * size / SECRET_LIMIT:.1f}%"
        + (f" (extrapolated from {roles.steps[-1].x} roles)" if extrapolated else ""),
        f"{'met' if history <= history_max else 'missed'}: history bounded by history_max={history_max} — at most "
        f"{history} revisions kept over {len(revisions.steps)} revisions",
        f"{'met' if slope <= 1.1 else 'missed'}: helm upgrade time linear or better in roles — log-log slope "
        f"{slope:.2f} from {roles.steps[0].upgrade_s:.2f}s at 1 role to {roles.steps[-1].upgrade_s:.2f}s at "
        f"{roles.steps[-1].x}",
    ]
    last = roles.steps[-1]
    outcome = kit.result(
        NAME,
        TITLE,
        f"{last.x} roles: helm upgrade {last.upgrade_s:.2f}s, release Secret {kib(last.secret_bytes)} "
        f"KiB ({100 * last.secret_bytes / SECRET_LIMIT:.1f}% of 1 MiB); history stays at "
        f"{history_max} revisions ({kib(revisions.steps[-1].kept_bytes)} KiB kept after "
        f"{len(revisions.steps)} revisions).",
        profile,
        load_start,
    )
    outcome.tables = [
        harness.Table(
            "Growth in roles (one create_workers per role, 1 replica each) and in one role's replicas (scale_workers)",
            [
                "series",
                "roles / replicas",
                "helm upgrade s",
                "create/scale s",
                "Secret KiB",
                "% of 1 MiB",
                "revisions kept",
                "kept KiB",
            ],
            rows,
        ),
        harness.Table(
            f"Growth in revisions (scale_workers 1 <-> 2), history_max={history_max}",
            ["revision", "helm upgrade s", "Secret KiB", "revisions kept", "kept KiB"],
            revision_rows,
        ),
    ]
    outcome.plots = [plot]
    outcome.targets = verdicts
    return outcome


def draw(series: list[Series], history_max: int, path: Path) -> None:
    plt = kit.pyplot()
    figure, axes = plt.subplots(2, 2, figsize=(12, 8))
    panels = zip(axes.flat, series, ("roles", "replicas of one role", "revision"))
    for axis, s, xlabel in panels:
        xs = [item.x for item in s.steps]
        axis.plot(xs, [item.upgrade_s for item in s.steps], "o-", color="tab:blue", label="helm upgrade s")
        axis.plot(xs, [item.operation_s for item in s.steps], ".--", color="tab:cyan", label="scheduler call s")
        axis.set_xlabel(xlabel)
        axis.set_ylabel("seconds")
        axis.set_ylim(bottom=0)
        right = axis.twinx()
        kept = s.name == "revisions"
        right.plot(
            xs,
            [(item.kept_bytes if kept else item.secret_bytes) / 1024 for item in s.steps],
            "s-",
            color="tab:orange",
            label="KiB of all kept revisions" if kept else "release Secret KiB",
        )
        right.set_ylabel("KiB")
        right.set_ylim(bottom=0)
        lines = axis.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
        axis.legend(lines, [line.get_label() for line in lines], fontsize=7, loc="center right")
        axis.set_title(f"Growth in {s.name}")
    history = axes.flat[3]
    for s, style in zip(series, ("o-", "s-", ".-")):
        history.plot(range(1, len(s.steps) + 1), [item.history for item in s.steps], style, label=s.name)
    history.axhline(history_max, linestyle=":", color="tab:red", label=f"history_max {history_max}")
    history.set_xlabel("helm revisions made")
    history.set_ylabel("revisions kept (release Secrets)")
    history.set_title("History")
    history.legend(fontsize=7)
    kit.save_figure(figure, path)


def run(
    profile: str, kubeconfig: str, progress: kit.Progress, *, results_dir: Path = harness.RESULTS
) -> harness.Result:
    settings = PROFILES[profile]
    load_start = kit.loadavg()
    series, history_max = measure(kubeconfig, settings, progress)
    path, plot = kit.plot_file(results_dir, NAME)
    draw(series, history_max, path)
    return report(series, history_max, settings, profile, plot, load_start)


if __name__ == "__main__":
    raise SystemExit(kit.main(run, __doc__.splitlines()[0]))
