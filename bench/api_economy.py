"""API economy: apiserver requests per create_workers, get_workers and delete_workers as N grows, and guard HTTP
requests per call.

Counted by the apiserver (its /metrics, before and after each call): every client's requests by verb and
resource, and the requests of the scheduler's identity, the rbac/ controller ServiceAccount, which is the only
client of the API Priority and Fairness flow schema `service-accounts` (so adapter plus helm, exactly). The
adapter's own Kubernetes client is also counted in-process; helm's share is the difference. The pods are Ready by
KWOK alone (`areal-workers.dev/readiness: kwok`). Guard requests are counted in-process on the guard client's
transports, with the reference stand-in guard in every pod and an experiment config, so that create_workers waits
for the workers and sends /configure as AReaL's schedulers do.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import apiserver_metrics as metrics
import plots
import request_counts
import workloads as w
from harness import RESULTS, Progress, Result, Table

NAME = "api_economy"
TITLE = "API economy: apiserver and guard requests per call"
CALLS = ("create_workers", "get_workers", "delete_workers")
CONSTANT_SLACK = 2  # requests a wait may vary by (a watch re-established) and still count as O(1) in N


@dataclass(frozen=True)
class Plan:
    profile: str
    sizes: tuple[int, ...]  # apiserver counts, KWOK readiness
    guard_sizes: tuple[int, ...]  # guard counts, reference guards run by podrunner
    own_runner: bool = False  # guards run by a PodRunner of this process, not the cluster's (tests)
    timeout: float = 900.0
    settle: float = 1.0  # seconds before a scrape after a wait, so that its watch, just ended, is counted
    results: Path = RESULTS


PLANS = {
    "quick": Plan("quick", sizes=(1, 16, 128), guard_sizes=(1, 16)),
    "full": Plan("full", sizes=(1, 16, 128, 512, 1024), guard_sizes=(1, 16, 128)),
}


@dataclass
class Sample:
    n: int
    server: dict[str, metrics.Snapshot] = field(default_factory=dict)  # call -> apiserver delta
    client: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)  # call -> adapter's kube client
    guard: dict[str, Counter[tuple[str, str]]] = field(default_factory=dict)  # call -> (method, path)


def run(profile: str, kubeconfig: str, progress: Progress) -> Result:
    return execute(PLANS[profile], kubeconfig, progress)


def execute(plan: Plan, kubeconfig: str, progress: Progress) -> Result:
    admin = w.admin_client(kubeconfig)
    core = w.client.CoreV1Api(admin)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        values = [w.write_values(Path(tmp), "kwok", w.KWOK_READY)]
        ns = stack.enter_context(w.namespace(admin, "bench-api", private=True))
        identity = w.controller_kubeconfig(kubeconfig, ns.name, Path(tmp) / "controller.yaml")
        samples = [_apiserver_sample(plan, n, identity, ns.name, values, admin, core, progress) for n in plan.sizes]
        values = [w.write_values(Path(tmp), "guards", w.REAL_GUARDS)]
        ns = stack.enter_context(w.namespace(admin, "bench-api-guards", private=plan.own_runner))
        if plan.own_runner:
            stack.enter_context(w.own_runner(kubeconfig, ns, Path(tmp) / "pods"))
        guards = [_guard_sample(plan, n, kubeconfig, ns.name, values, core, progress) for n in plan.guard_sizes]
    admin.close()
    return _result(plan, samples, guards)


def _apiserver_sample(
    plan: Plan,
    n: int,
    identity: str,
    ns: str,
    values: list[str],
    admin: w.client.ApiClient,
    core: w.client.CoreV1Api,
    progress: Progress,
) -> Sample:
    sample = Sample(n)
    [job] = w.jobs(n, 1)
    scheduler = w.scheduler(identity, ns, values, f"a-{uuid.uuid4().hex[:6]}", plan.timeout)
    actions = {
        "create_workers": lambda: scheduler.create_workers(job),
        "get_workers": lambda: scheduler.get_workers(job.role, timeout=plan.timeout),
        "delete_workers": lambda: scheduler.delete_workers(job.role),
    }
    try:
        with request_counts.kube_requests() as kube:
            before = metrics.scrape(admin)
            for call in CALLS:
                kube.take()
                actions[call]()
                if call != "create_workers":  # get_workers follows at once, as in AReaL, so that it waits
                    time.sleep(plan.settle)
                after = metrics.scrape(admin)
                sample.server[call], sample.client[call] = after - before, kube.take()
                before = after
    finally:
        scheduler.delete_workers()
        scheduler.close()
        w.wait_no_pods(core, ns, plan.timeout)
    progress(
        f"{NAME}: N={n}: controller identity "
        + ", ".join(f"{call} {sample.server[call].controller}" for call in CALLS)
        + " apiserver requests"
    )
    return sample


def _guard_sample(
    plan: Plan, n: int, kubeconfig: str, ns: str, values: list[str], core: w.client.CoreV1Api, progress: Progress
) -> Sample:
    from wire_types import ExperimentConfig  # the parts of AReaL's experiment config a scheduler reads

    sample = Sample(n)
    [job] = w.jobs(n, 1)
    scheduler = w.scheduler(
        kubeconfig, ns, values, "", plan.timeout, exp_config=ExperimentConfig("bench", f"g-{uuid.uuid4().hex[:6]}")
    )
    actions = {
        "create_workers": lambda: scheduler.create_workers(job),
        "get_workers": lambda: scheduler.get_workers(job.role, timeout=plan.timeout),
        "delete_workers": lambda: scheduler.delete_workers(job.role),
    }
    try:
        with request_counts.guard_requests() as guard:
            for call in CALLS:
                guard.take()
                actions[call]()
                sample.guard[call] = guard.take()
    finally:
        scheduler.delete_workers()
        scheduler.close()
        w.wait_no_pods(core, ns, plan.timeout)
    progress(
        f"{NAME}: N={n} real guards: guard requests "
        + ", ".join(f"{call} {sum(sample.guard[call].values())}" for call in CALLS)
    )
    return sample


# --- the result ----------------------------------------------------------------------------------------------


def _targets(samples: list[Sample], guards: list[Sample]) -> list[str]:
    targets = []
    waits = [s.server["get_workers"].controller - _heartbeat(s.client["get_workers"]) for s in samples]
    if waits:
        verdict = "met" if max(waits) - min(waits) <= CONSTANT_SLACK else "missed"
        targets.append(
            f"{verdict}: get_workers costs {min(waits)}..{max(waits)} apiserver requests of the "
            f"scheduler's identity for N={samples[0].n}..{samples[-1].n}, besides the trainer's Lease heartbeat; "
            f"target: O(1) in N (they vary by at most {CONSTANT_SLACK})"
        )
    if guards:
        worst = max((sum(s.guard[call].values()) / s.n, call, s.n) for s in guards for call in CALLS)
        verdict = "met" if worst[0] <= 1 else "missed"
        targets.append(
            f"{verdict}: at most {worst[0]:g} guard request(s) per worker per call ({worst[1]}, N="
            f"{worst[2]}); target: at most one"
        )
    return targets


def _heartbeat(client: Counter[tuple[str, str]]) -> int:
    """The Lease renewals among the adapter's requests: the trainer's heartbeat, every few seconds whatever the
    scheduler does, so a wait of 50 s (N=1024) has ten of them and one of 0.1 s none."""
    return sum(count for (_, resource), count in client.items() if resource == "leases")


def _per_call_table(samples: list[Sample]) -> Table:
    rows = []
    for call in CALLS:
        for s in samples:
            identity, python = s.server[call].controller, sum(s.client[call].values())
            rows.append([call, s.n, identity, python, identity - python, s.server[call].total])
    return Table(
        "Apiserver requests per call: the scheduler's identity (adapter + helm, counted by the apiserver), "
        "of which the adapter's Kubernetes client (counted in-process) and helm (the difference), and "
        "every client's (with the StatefulSet controller's, the scheduler's and KWOK's work on the pods)",
        ["call", "N", "scheduler identity", "adapter client", "helm", "all clients"],
        rows,
    )


def _verb_table(call: str, samples: list[Sample]) -> Table:
    keys = sorted({k for s in samples for k in (*s.server[call].requests, *s.client[call])}, key=lambda k: (k[1], k[0]))
    rows = [
        [
            verb,
            resource,
            *(f"{s.server[call].requests[(verb, resource)]} / {s.client[call][(verb, resource)]}" for s in samples),
        ]
        for verb, resource in keys
    ]
    return Table(
        f"{call}: apiserver requests by verb and resource, all clients / the adapter's Kubernetes client",
        ["verb", "resource", *(f"N={s.n}" for s in samples)],
        rows,
    )


def _guard_table(guards: list[Sample]) -> Table:
    rows = []
    for call in CALLS:
        for s in guards:
            total = sum(s.guard[call].values())
            paths = ", ".join(f"{method} {path} x{count}" for (method, path), count in sorted(s.guard[call].items()))
            rows.append([call, s.n, total, f"{total / s.n:g}", paths or "-"])
    return Table(
        "Guard HTTP requests per call (reference guards; create_workers with an experiment config waits "
        "and sends /configure, as in AReaL)",
        ["call", "N", "guard requests", "per worker", "requests"],
        rows,
    )


def _plot(plan: Plan, samples: list[Sample], guards: list[Sample]) -> str:
    plot = plots.Plot(
        "Requests per call: scheduler identity (solid), all clients (dotted), guard (dashed)",
        "workers (N)",
        "requests",
        log_y=True,
    )
    xs = [float(s.n) for s in samples]
    for call, color in zip(CALLS, ("tab:blue", "tab:orange", "tab:green")):
        plot.series.append(
            plots.Series(
                f"{call}: scheduler identity", xs, [float(s.server[call].controller) for s in samples], "-o", color
            )
        )
        plot.series.append(
            plots.Series(f"{call}: all clients", xs, [float(s.server[call].total) for s in samples], ":s", color)
        )
        plot.series.append(
            plots.Series(
                f"{call}: guard requests",
                [float(s.n) for s in guards],
                [float(sum(s.guard[call].values())) for s in guards],
                "--^",
                color,
            )
        )
    return plots.save(plot, NAME, plan.results)


def _result(plan: Plan, samples: list[Sample], guards: list[Sample]) -> Result:
    tables = [_per_call_table(samples), *(_verb_table(call, samples) for call in CALLS)]
    if guards:
        tables.append(_guard_table(guards))
    summary = (
        "Requests each scheduler call causes for one role of N workers (create_workers, then get_workers at once, "
        "then delete_workers(role): destroy, helm upgrade, wait until its pods are gone), counted before and after "
        "the call. Apiserver side: `apiserver_request_total` from /metrics (every client, by verb and resource; "
        "the watch of a wait is counted when it ends, so the scrape after a wait comes a second later) and "
        "`apiserver_flowcontrol_dispatched_requests_total` of the flow schema `service-accounts`, whose only "
        "client is the scheduler acting as the rbac/ controller ServiceAccount (least privilege, so no node "
        "reads): the adapter's and helm's requests exactly. In-process: the adapter's Kubernetes client by verb "
        "and resource. create_workers returns once helm has written the release, so the pods' own requests "
        "(StatefulSet controller, scheduler, KWOK) land in both its and get_workers' all-clients counts. Pods are "
        "Ready by KWOK alone (`areal-workers.dev/readiness: kwok`). Guard requests: reference guards run by "
        "podrunner, counted on the guard client's transports."
    )
    return Result(
        name=NAME,
        title=TITLE,
        summary=summary,
        profile=plan.profile,
        command=f"python bench/run.py --profile {plan.profile} --only {NAME}",
        tables=tables,
        plots=[_plot(plan, samples, guards)],
        targets=_targets(samples, guards),
    )
