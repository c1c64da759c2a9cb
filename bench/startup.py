"""Worker start-up: create_workers + get_workers for N workers in 1 and 4 roles, against the floor measured in the
same run: the same objects created directly with the Kubernetes client and one pod watch until all are Ready.

Two series. KWOK readiness: the pods carry `areal-workers.dev/readiness: kwok`, so KWOK reports them Ready at once
and nothing runs them (the chart always renders a container command, and KWOK's stage for pods with one would
otherwise wait for podrunner); this isolates the control plane and the adapter. Real guards: podrunner runs our
stand-in guard in every pod and probes it, as a kubelet would; sized to what a 2-core machine holds.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import plots
import workloads as w
from harness import RESULTS, Progress, Result, Table
from step_clock import Steps, clock

NAME = "startup"
TITLE = "Worker start-up: create_workers + get_workers against the floor"
RATIO_TARGET = 1.15
# Small experiments (issue 40): the fixed cost of each create_workers against what any client pays.
SMALL_TARGETS = (("kwok", 16, 4, 3.0), ("guards", 1, 1, 1.5))  # (series, N, roles, ratio at most)
SLOPE_TARGET = 1.1  # log-log slope of time over N: 1.0 is linear, the 0.1 absorbs noise of a shared machine


@dataclass(frozen=True)
class Plan:
    profile: str
    sizes: tuple[int, ...]  # KWOK-readiness series
    guard_sizes: tuple[int, ...]  # real-guard series (1 role)
    layouts: tuple[int, ...] = (1, 4)  # roles the N workers are split over
    repeats: int = 1  # the median is reported
    own_runner: bool = False  # guards run by a PodRunner of this process, not the cluster's (tests)
    timeout: float = 900.0
    results: Path = RESULTS


PLANS = {
    "quick": Plan("quick", sizes=(1, 16, 128), guard_sizes=(1, 16)),
    "full": Plan("full", sizes=(1, 16, 128, 512, 1024), guard_sizes=(1, 16, 128), repeats=3),
}


@dataclass
class Point:
    series: str  # "kwok" or "guards"
    n: int
    roles: int
    adapter: list[float] = field(default_factory=list)
    creating: list[float] = field(default_factory=list)  # of which in create_workers calls
    waiting: list[float] = field(default_factory=list)  # and in get_workers calls
    floor: list[float] = field(default_factory=list)
    steps: list[Steps] = field(default_factory=list)  # where the create_workers time went, per run

    @property
    def ratio(self) -> float:
        return statistics.median(self.adapter) / statistics.median(self.floor)


def run(profile: str, kubeconfig: str, progress: Progress) -> Result:
    return execute(PLANS[profile], kubeconfig, progress)


def execute(plan: Plan, kubeconfig: str, progress: Progress) -> Result:
    api = w.admin_client(kubeconfig)
    points: list[Point] = []
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        kwok_values = w.write_values(Path(tmp), "kwok", w.KWOK_READY)
        ns = stack.enter_context(w.namespace(api, "bench-startup", private=True))
        points += _series(plan, "kwok", plan.sizes, plan.layouts, kubeconfig, ns.name, [kwok_values], progress)
        guard_values = w.write_values(Path(tmp), "guards", w.REAL_GUARDS)
        ns = stack.enter_context(w.namespace(api, "bench-startup-guards", private=plan.own_runner))
        if plan.own_runner:
            stack.enter_context(w.own_runner(kubeconfig, ns, Path(tmp) / "pods"))
        points += _series(plan, "guards", plan.guard_sizes, (1,), kubeconfig, ns.name, [guard_values], progress)
    api.close()
    return _result(plan, points)


def _series(
    plan: Plan,
    series: str,
    sizes: tuple[int, ...],
    layouts: tuple[int, ...],
    kubeconfig: str,
    ns: str,
    values: list[str],
    progress: Progress,
) -> list[Point]:
    api = w.admin_client(kubeconfig)
    core = w.client.CoreV1Api(api)
    points = []
    for index, n in enumerate(sizes):
        for roles in layouts:
            if n < roles or n % roles:
                continue
            point = Point(series, n, roles)
            role_jobs = w.jobs(n, roles)
            planner = w.scheduler(kubeconfig, ns, values, f"floor-{uuid.uuid4().hex[:6]}", plan.timeout)
            manifests, release = w.floor_manifests(planner, role_jobs), planner.release
            planner.close()

            def adapter() -> float:
                total, creating, steps = _adapter_run(kubeconfig, ns, values, role_jobs, plan.timeout, core)
                point.steps.append(steps)
                point.creating.append(creating)
                point.waiting.append(total - creating)
                return total

            def floor() -> float:
                return _floor_run(api, core, ns, manifests, release, n, plan.timeout)

            for repeat in range(plan.repeats):
                runs: list[tuple[list[float], Callable[[], float]]] = [(point.floor, floor), (point.adapter, adapter)]
                if (index + repeat) % 2:  # alternate which goes first: neither always meets a fresher cluster
                    runs.reverse()
                for samples, measure in runs:
                    samples.append(measure())
                progress(
                    f"{NAME}: {series} N={n} roles={roles} run {repeat + 1}/{plan.repeats}: adapter "
                    f"{point.adapter[-1]:.2f}s, floor {point.floor[-1]:.2f}s"
                )
            points.append(point)
    api.close()
    return points


def _adapter_run(
    kubeconfig: str, ns: str, values: list[str], role_jobs: list[w.Job], timeout: float, core: w.client.CoreV1Api
) -> tuple[float, float, Steps]:
    """Seconds in all, and of them in create_workers, with the steps of these."""
    scheduler = w.scheduler(kubeconfig, ns, values, f"t-{uuid.uuid4().hex[:6]}", timeout)
    try:
        started = time.perf_counter()
        with clock(scheduler) as steps:
            for job in role_jobs:
                scheduler.create_workers(job)
        created = time.perf_counter()
        for job in role_jobs:
            scheduler.get_workers(job.role, timeout=timeout)
        return time.perf_counter() - started, created - started, steps
    finally:
        scheduler.delete_workers()
        scheduler.close()
        w.wait_no_pods(core, ns, timeout)


def _floor_run(
    api: w.client.ApiClient,
    core: w.client.CoreV1Api,
    ns: str,
    manifests: list[dict],
    release: str,
    n: int,
    timeout: float,
) -> float:
    try:
        started = time.perf_counter()
        w.create_objects(api, ns, manifests)
        w.wait_pods(core, ns, f"{w.RELEASE_LABEL}={release}", n, timeout)
        return time.perf_counter() - started
    finally:
        w.delete_objects(api, ns, manifests)
        w.wait_no_pods(core, ns, timeout)


# --- the result ----------------------------------------------------------------------------------------------


def _slope(points: list[Point]) -> tuple[float, int] | None:
    """Least-squares slope of log(adapter seconds) over log(N), and the smallest N it starts from: N >= 16 when
    two such points exist (below, fixed costs hide how time grows)."""
    chosen = [p for p in points if p.n >= 16]
    chosen = chosen if len(chosen) >= 2 else points
    if len(chosen) < 2:
        return None
    xs = [math.log(p.n) for p in chosen]
    ys = [math.log(statistics.median(p.adapter)) for p in chosen]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs), chosen[0].n


def _targets(points: list[Point]) -> list[str]:
    targets = []
    for roles in sorted({p.roles for p in points if p.series == "kwok"}):
        mine = sorted((p for p in points if p.series == "kwok" and p.roles == roles), key=lambda p: p.n)
        largest = mine[-1]
        verdict = "met" if largest.ratio <= RATIO_TARGET else "missed"
        targets.append(
            f"{verdict}: adapter/floor ratio {largest.ratio:.2f} at N={largest.n} ({roles} role(s), "
            f"KWOK readiness); target <= {RATIO_TARGET}"
        )
        fitted = _slope(mine)
        if fitted is not None:
            slope, first = fitted
            verdict = "met" if slope <= SLOPE_TARGET else "missed"
            targets.append(
                f"{verdict}: adapter time grows as N^{slope:.2f} over N={first}..{largest.n} "
                f"({roles} role(s)); target: no worse than linear (exponent <= {SLOPE_TARGET})"
            )
    for series, n, roles, limit in SMALL_TARGETS:
        for point in (p for p in points if (p.series, p.n, p.roles) == (series, n, roles)):
            verdict = "met" if point.ratio <= limit else "missed"
            kind = "KWOK readiness" if series == "kwok" else "real guards"
            targets.append(
                f"{verdict}: adapter/floor ratio {point.ratio:.2f} at N={n} ({roles} role(s), {kind}); "
                f"target <= {limit} (a small experiment)"
            )
    return targets


def _table(caption: str, points: list[Point]) -> Table:
    rows = []
    for p in points:
        adapter, floor = statistics.median(p.adapter), statistics.median(p.floor)
        creating, waiting = statistics.median(p.creating), statistics.median(p.waiting)
        rows.append(
            [
                p.n,
                p.roles,
                p.n // p.roles,
                f"{adapter:.2f}",
                f"{creating:.2f}",
                f"{waiting:.2f}",
                f"{floor:.2f}",
                f"{adapter - floor:+.2f}",
                f"{p.ratio:.2f}",
            ]
        )
    return Table(
        caption,
        [
            "N",
            "roles",
            "workers/role",
            "adapter s",
            "in create_workers s",
            "in get_workers s",
            "floor s",
            "adapter - floor s",
            "ratio",
        ],
        rows,
    )


def _steps_table(points: list[Point]) -> Table:
    """Where the create_workers time of each point went (medians over its runs): each helm subcommand's seconds
    and processes, the API requests of the calling thread, and the rest (the adapter's own Python)."""
    subcommands = sorted({name for p in points for steps in p.steps for name in steps.helm}, key=_helm_order)
    rows = []
    for p in points:
        if not p.steps:
            continue
        helm_cells = []
        for name in subcommands:
            seconds = statistics.median(steps.helm[name] for steps in p.steps)
            runs = statistics.median(steps.helm_runs[name] for steps in p.steps)
            helm_cells.append(f"{seconds:.2f} ({runs:g})")
        api = statistics.median(steps.api_seconds for steps in p.steps)
        requests = statistics.median(steps.api_requests for steps in p.steps)
        rest = statistics.median(
            creating - steps.helm_seconds() - steps.api_seconds for creating, steps in zip(p.creating, p.steps)
        )
        creating = statistics.median(p.creating)
        rows.append(
            [p.series, p.n, p.roles, f"{creating:.2f}", *helm_cells, f"{api:.2f} ({requests:g})", f"{rest:.2f}"]
        )
    header = ["series", "N", "roles", "create_workers s", *(f"helm {name} s (runs)" for name in subcommands)]
    return Table(
        "Where the create_workers time goes (all the point's create_workers calls; medians)",
        [*header, "API requests s (count)", "rest s"],
        rows,
    )


def _helm_order(subcommand: str) -> tuple[int, str]:
    return (0 if subcommand == "upgrade" else 1, subcommand)


def _plot(plan: Plan, points: list[Point]) -> str:
    plot = plots.Plot(
        "create_workers + get_workers (solid) vs the floor (dotted)", "workers (N)", "seconds (median)", log_y=True
    )
    colors = iter(["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"])
    for series, label in (("kwok", "KWOK readiness"), ("guards", "real guards")):
        for roles in sorted({p.roles for p in points if p.series == series}):
            mine = sorted((p for p in points if p.series == series and p.roles == roles), key=lambda p: p.n)
            xs, color = [float(p.n) for p in mine], next(colors, None)
            name = f"{label}, {roles} role{'s' if roles > 1 else ''}"
            plot.series.append(
                plots.Series(f"adapter, {name}", xs, [statistics.median(p.adapter) for p in mine], "-o", color)
            )
            plot.series.append(
                plots.Series(f"floor, {name}", xs, [statistics.median(p.floor) for p in mine], ":s", color)
            )
    return plots.save(plot, NAME, plan.results)


def _result(plan: Plan, points: list[Point]) -> Result:
    kwok = [p for p in points if p.series == "kwok"]
    guards = [p for p in points if p.series == "guards"]
    repeats = f"median of {plan.repeats} runs" if plan.repeats > 1 else "one run"
    summary = (
        "Seconds from the first create_workers call to the last get_workers return (every worker Ready), for N "
        "workers in one role or split evenly over 4 (4 create_workers, then 4 get_workers), and the part spent in "
        "create_workers: each is one helm revision, one helm upgrade --install whose post-renderer holds the "
        "render for the capacity preflight (helm 3; the last table splits the time by step), so 4 roles pay that 4 "
        "times, "
        "while pods of earlier roles already start. The floor is the same "
        "objects (the chart's render from `scheduler.dry_run`, test hooks left out) created one by one with the "
        "Kubernetes client, then one list and watch of the pods until all are Ready: what any client must do to "
        "reach the same state. Adapter and floor alternate on the same cluster, pods all gone between runs; "
        f"{repeats} per point. KWOK readiness: pods annotated `areal-workers.dev/readiness: kwok` are reported "
        "Ready by KWOK at once and nothing runs them (the chart always renders a command, and a pod with one "
        "otherwise waits for podrunner); real guards: podrunner runs the reference stand-in guard in each pod and "
        "probes its /health."
    )
    tables = [_table("KWOK readiness (no process per pod)", kwok)]
    if guards:
        tables.append(_table("Real guard processes (reference stand-in, run and probed by podrunner)", guards))
    tables.append(_steps_table(points))
    return Result(
        name=NAME,
        title=TITLE,
        summary=summary,
        profile=plan.profile,
        command=f"python bench/run.py --profile {plan.profile} --only {NAME}",
        tables=tables,
        plots=[_plot(plan, points)],
        targets=_targets(points),
    )
