"""What the adapter adds to an engine call: `call_engine` and `async_call_engine` against a plain HTTP client on
persistent connections (a `requests.Session`, an `aiohttp.ClientSession`) POSTing the same `/call` payloads to the
same workers, side by side in one run. A third client, the adapter's GuardClient called with the Worker at hand,
separates what the HTTP layer (guard/client.py over guard/transport.py) costs from what the scheduler's call path
adds; the latter is also timed inside each adapter call (the call minus its GuardClient call), which no load on the
machine blurs.

Two targets, each in a private namespace of its own with a podrunner of its own: workers running AReaL's real
rpc_server (quick 2, full 4) and the stand-in guards (quick 16, full 64). Each worker hosts a Counter engine; the
trivial call is `value()`. Latency comes from sequential calls cycling over the workers (the clients in
rotating blocks, so a change of machine load hits all of them); async throughput from rounds of one concurrent call
per worker; scaling from rounds of `sleep(0.05)` calls to 1, 2, 4, ... distinct workers at once, where an
adapter that serialized calls would stay at one worker's rate.

    .venv/bin/python bench/rpc_overhead.py --profile quick --kubeconfig PATH
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import requests
from requests.adapters import HTTPAdapter

import cluster_kit as kit
import harness
from areal_workers import Job, KubernetesScheduler, SchedulingSpec, Worker
from areal_workers.release.client import merge_values

NAME = "rpc_overhead"
TITLE = "Engine-call overhead: call_engine / async_call_engine vs a plain HTTP client"
WORK_SECONDS = 0.05  # server-side duration of a scaling call
JSON_HEADERS = {"Content-Type": "application/json"}


@dataclass(frozen=True)
class Settings:
    areal_workers: int
    stand_in_workers: int
    blocks: int  # the clients take turns in this many blocks; each block compares them under the same load
    calls: int  # sequential calls per client, API and block; also the calls of an async throughput block
    scaling_rounds: int


PROFILES = {"tiny": Settings(0, 2, 2, 30, 2), "quick": Settings(2, 16, 6, 200, 6), "full": Settings(4, 64, 20, 300, 20)}


@dataclass
class Measured:
    """One target's numbers, per block; latencies in seconds, throughputs in calls/s."""

    lane: kit.Lane
    workers: int
    latency: dict[tuple[str, str], list[list[float]]] = field(default_factory=dict)  # (api, client) -> blocks
    throughput: dict[tuple[str, str], list[float]] = field(default_factory=dict)
    layer: dict[str, list[float]] = field(default_factory=dict)  # api -> the scheduler's own part of each call
    scaling: dict[str, list[tuple[int, float]]] = field(default_factory=dict)  # client -> (workers, calls/s)

    def samples(self, api: str, client: str) -> list[float]:
        return [value for block in self.latency[(api, client)] for value in block]

    def p50_difference(self, api: str, client: str) -> float:
        """Median over blocks of the client's p50 minus the plain client's p50 in the same block."""
        pairs = zip(self.latency[(api, client)], self.latency[(api, "plain")])
        return kit.median([kit.median(mine) - kit.median(theirs) for mine, theirs in pairs])

    def rate_ratio(self, api: str, client: str) -> float:
        """Median over blocks of the client's throughput over the plain client's in the same block."""
        pairs = zip(self.throughput[(api, client)], self.throughput[(api, "plain")])
        return kit.median([mine / theirs for mine, theirs in pairs])


# --------------------------------------------------------------------------- the plain clients


def call_body(worker_id: str, method: str, args: list[Any]) -> bytes:
    """The body the adapter sends (guard.replies.call_payload): the worker's own engine, no kwargs, no rpc_meta."""
    return json.dumps(
        {"method": method, "engine_name": worker_id, "args": args, "kwargs": {}, "rpc_meta": None}
    ).encode()


class PlainSync:
    def __init__(self, workers: list[Worker]) -> None:
        self.urls = {w.id: f"http://{w.ip}:{w.worker_ports[0]}/call" for w in workers}
        self.session = requests.Session()
        self.session.trust_env = False  # as the adapter's session: no proxy or netrc lookups per request
        # requests keeps the connections of 10 hosts by default: with more workers than that, a default Session
        # would reconnect on every call and not be the persistent-connection baseline this is meant to be.
        pools = max(10, len(workers))
        self.session.mount("http://", HTTPAdapter(pool_connections=pools, pool_maxsize=pools))

    def call(self, worker_id: str, method: str = "value", args: list[Any] | None = None) -> Any:
        response = self.session.post(
            self.urls[worker_id],
            data=call_body(worker_id, method, args or []),
            headers=JSON_HEADERS,
            timeout=(10.0, 7200.0),
        )
        response.raise_for_status()
        return json.loads(response.content)["result"]


class PlainAsync:
    def __init__(self, workers: list[Worker]) -> None:
        self.urls = {w.id: f"http://{w.ip}:{w.worker_ports[0]}/call" for w in workers}
        self.session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))

    async def call(self, worker_id: str, method: str = "value", args: list[Any] | None = None) -> Any:
        async with self.session.post(
            self.urls[worker_id], data=call_body(worker_id, method, args or []), headers=JSON_HEADERS
        ) as response:
            response.raise_for_status()
            return json.loads(await response.read())["result"]


# --------------------------------------------------------------------------- measuring


def timed_calls(call: Callable[[str], Any], ids: list[str], count: int, out: list[float]) -> None:
    for i in range(count):
        started = time.perf_counter()
        call(ids[i % len(ids)])
        out.append(time.perf_counter() - started)


async def atimed_calls(call: Callable[[str], Awaitable[Any]], ids: list[str], count: int, out: list[float]) -> None:
    for i in range(count):
        started = time.perf_counter()
        await call(ids[i % len(ids)])
        out.append(time.perf_counter() - started)


async def rounds_rate(call: Callable[[str], Awaitable[Any]], ids: list[str], rounds: int) -> float:
    """Calls/s of `rounds` rounds, each one concurrent call per worker of `ids`."""
    started = time.perf_counter()
    for _ in range(rounds):
        await asyncio.gather(*(call(worker_id) for worker_id in ids))
    return len(ids) * rounds / (time.perf_counter() - started)


class GuardTimer:
    """Times the GuardClient's part of every adapter call (by wrapping it), so that the scheduler's own part of a
    call is its time minus that, call by call: free of the load noise that comparing separate clients carries."""

    def __init__(self, scheduler: KubernetesScheduler) -> None:
        guard = scheduler.guard
        self.call, self.async_call = guard.call, guard.async_call  # unwrapped, for the guard-client client
        self.inner: list[float] = []
        guard.call, guard.async_call = self._call, self._async_call  # type: ignore[method-assign]

    def _call(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return self.call(*args, **kwargs)
        finally:
            self.inner.append(time.perf_counter() - started)

    async def _async_call(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await self.async_call(*args, **kwargs)
        finally:
            self.inner.append(time.perf_counter() - started)

    def own(self, block: list[float]) -> list[float]:
        """The scheduler's part of each call of an adapter block timed since the last call of this."""
        own = [outer - inner for outer, inner in zip(block, self.inner)]
        self.inner.clear()
        return own


def block_orders(names: list[str], blocks: int) -> list[list[str]]:
    """Each block runs every client once, in an order rotated from block to block."""
    return [names[block % len(names) :] + names[: block % len(names)] for block in range(blocks)]


def measure_sync(
    scheduler: KubernetesScheduler, timer: GuardTimer, workers: list[Worker], settings: Settings, into: Measured
) -> None:
    plain = PlainSync(workers)
    by_id = {w.id: w for w in workers}
    ids = list(by_id)
    clients: dict[str, Callable[[str], Any]] = {
        "adapter": lambda w: scheduler.call_engine(w, "value"),
        "guard": lambda w: timer.call(by_id[w], "value", w, [], {}),
        "plain": plain.call,
    }
    try:
        for client in clients.values():  # warm-up: connections, first-call paths
            timed_calls(client, ids, 2 * len(ids), [])
        for order in block_orders(list(clients), settings.blocks):
            for name in order:
                block: list[float] = []
                timer.inner.clear()
                timed_calls(clients[name], ids, settings.calls, block)
                if name == "adapter":
                    into.layer.setdefault("call_engine", []).extend(timer.own(block))
                into.latency.setdefault(("call_engine", name), []).append(block)
                into.throughput.setdefault(("call_engine", name), []).append(len(block) / sum(block))
    finally:
        plain.session.close()


async def measure_async(
    scheduler: KubernetesScheduler, timer: GuardTimer, workers: list[Worker], settings: Settings, into: Measured
) -> None:
    plain = PlainAsync(workers)
    by_id = {w.id: w for w in workers}
    ids = list(by_id)
    clients: dict[str, Callable[[str], Awaitable[Any]]] = {
        "adapter": lambda w: scheduler.async_call_engine(w, "value"),
        "guard": lambda w: timer.async_call(by_id[w], "value", w, [], {}),
        "plain": plain.call,
    }
    work: dict[str, Callable[[str], Awaitable[Any]]] = {
        "adapter": lambda w: scheduler.async_call_engine(w, "sleep", None, WORK_SECONDS),
        "plain": lambda w: plain.call(w, "sleep", [WORK_SECONDS]),
    }
    try:
        for client in clients.values():
            await atimed_calls(client, ids, 2 * len(ids), [])
            await rounds_rate(client, ids, 2)
        for order in block_orders(list(clients), settings.blocks):
            for name in order:
                block: list[float] = []
                timer.inner.clear()
                await atimed_calls(clients[name], ids, settings.calls, block)
                if name == "adapter":
                    into.layer.setdefault("async_call_engine", []).extend(timer.own(block))
                into.latency.setdefault(("async_call_engine", name), []).append(block)
                into.throughput.setdefault(("async_call_engine", name), []).append(
                    await rounds_rate(clients[name], ids, -(-settings.calls // len(ids)))
                )
        for count in worker_counts(len(ids)):
            rates: dict[str, list[float]] = {name: [] for name in work}
            for order in block_orders(list(work), 2):
                for name in order:
                    rates[name].append(await rounds_rate(work[name], ids[:count], settings.scaling_rounds))
            for name, pair in rates.items():
                into.scaling.setdefault(name, []).append((count, kit.mean(pair)))
    finally:
        await plain.session.close()


def worker_counts(available: int) -> list[int]:
    counts = [1]
    while counts[-1] * 2 <= available:
        counts.append(counts[-1] * 2)
    return counts if counts[-1] == available else [*counts, available]


def measure_target(kubeconfig: str, lane: kit.Lane, count: int, settings: Settings, progress: kit.Progress) -> Measured:
    core = kit.core_api(kubeconfig)
    measured = Measured(lane, count)
    with kit.namespace(core, f"bench-rpc-{lane.name}") as ns, kit.scratch_dir("bench-rpc") as tmp:
        root = Path(tmp)
        with kit.private_podrunner(kubeconfig, ns, lane, root / "pods"):
            values = merge_values(kit.RUN_PODS, lane.values(root / "areal"))
            scheduler = kit.make_scheduler(kubeconfig, ns, "rpc", values, root, lane)
            try:
                progress(f"{lane.label}: starting {count} worker(s) in namespace {ns}")
                started = time.monotonic()
                spec = SchedulingSpec(cpu=0.25, mem=0.5, port_count=1, cmd="python -m areal.infra.rpc.rpc_server")
                scheduler.create_workers(Job(role="w", replicas=count, tasks=[spec]))
                workers = scheduler.get_workers("w")
                asyncio.run(create_engines(scheduler, workers, lane.engine))
                progress(f"{lane.label}: {count} worker(s) ready with engines in {time.monotonic() - started:.0f}s")
                plain = PlainSync(workers)
                if scheduler.call_engine(workers[0].id, "value") != plain.call(workers[0].id):
                    raise RuntimeError("the adapter and the plain client disagree on value()")
                plain.session.close()
                timer = GuardTimer(scheduler)
                measure_sync(scheduler, timer, workers, settings, measured)
                asyncio.run(measure_async(scheduler, timer, workers, settings, measured))
                progress(f"{lane.label}: measured")
            finally:
                scheduler.delete_workers()
                scheduler.close()
    return measured


async def create_engines(scheduler: KubernetesScheduler, workers: list[Worker], engine: str) -> None:
    await asyncio.gather(*(scheduler.create_engine(w.id, engine) for w in workers))


# --------------------------------------------------------------------------- report


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def report(targets: list[Measured], profile: str, plot: str, load_start: list[float]) -> harness.Result:
    latency_rows, scaling_rows, verdicts = [], [], []
    for target in targets:
        label = f"{target.lane.label} x{target.workers}"
        for api in ("call_engine", "async_call_engine"):
            adapter, plain = target.samples(api, "adapter"), target.samples(api, "plain")
            overhead, guard_overhead = target.p50_difference(api, "adapter"), target.p50_difference(api, "guard")
            ratio, layer = target.rate_ratio(api, "adapter"), kit.median(target.layer[api])
            latency_rows.append(
                [
                    label,
                    api,
                    ms(kit.median(adapter)),
                    ms(kit.median(target.samples(api, "guard"))),
                    ms(kit.median(plain)),
                    ms(kit.percentile(adapter, 0.99)),
                    ms(kit.percentile(plain, 0.99)),
                    ms(overhead),
                    ms(guard_overhead),
                    ms(layer),
                    round(kit.mean(target.throughput[(api, "adapter")])),
                    round(kit.mean(target.throughput[(api, "plain")])),
                    round(ratio, 2),
                ]
            )
            verdicts.append(
                f"{'met' if ratio >= 0.9 else 'missed'}: throughput >= 0.9x plain — {label} {api}: "
                f"{ratio:.2f}x (guard client alone {target.rate_ratio(api, 'guard'):.2f}x)"
            )
            verdicts.append(
                f"{'met' if overhead < 0.0005 else 'missed'}: p50 overhead < 0.5 ms — {label} {api}: "
                f"{ms(overhead)} ms (guard client alone {ms(guard_overhead)} ms; the scheduler's own "
                f"part timed inside each call: {ms(layer)} ms)"
            )
        base = {name: dict(points)[1] for name, points in target.scaling.items()}
        for (count, rate), (_, plain_rate) in zip(target.scaling["adapter"], target.scaling["plain"]):
            scaling_rows.append(
                [
                    label,
                    count,
                    round(rate),
                    round(plain_rate),
                    round(rate / base["adapter"], 2),
                    round(plain_rate / base["plain"], 2),
                    count,
                ]
            )
        top, rate = target.scaling["adapter"][-1]
        speedup, plain_speedup = rate / base["adapter"], target.scaling["plain"][-1][1] / base["plain"]
        # Scaling counts as met when the adapter reaches 70% of linear, or 90% of what the plain client reaches
        # on this machine at the same moment (a loaded machine can cap both).
        scaled = speedup >= min(0.7 * top, 0.9 * plain_speedup)
        verdicts.append(
            f"{'met' if scaled else 'missed'}: concurrent calls scale with the workers — {label}: "
            f"{speedup:.1f}x at {top} workers (plain {plain_speedup:.1f}x, linear {top}x)"
        )
    outcome = kit.result(NAME, TITLE, summary(targets), profile, load_start)
    outcome.tables = [
        harness.Table(
            "Latency (ms, sequential calls cycling over the workers) and throughput (calls/s: sequential "
            "for call_engine, one concurrent call per worker for async_call_engine). Overheads and the "
            "ratio are medians of per-block comparisons with plain (the clients take turns, block by "
            "block); the scheduler layer is each adapter call minus its GuardClient call, timed inside",
            [
                "target",
                "API",
                "adapter p50",
                "guard client p50",
                "plain p50",
                "adapter p99",
                "plain p99",
                "p50 overhead",
                "guard client - plain",
                "scheduler layer p50",
                "adapter calls/s",
                "plain calls/s",
                "throughput ratio",
            ],
            latency_rows,
        ),
        harness.Table(
            f"Concurrency scaling: async calls of sleep({WORK_SECONDS}) to N distinct workers at once",
            ["target", "workers", "adapter calls/s", "plain calls/s", "adapter speedup", "plain speedup", "linear"],
            scaling_rows,
        ),
    ]
    outcome.plots = [plot]
    outcome.targets = verdicts
    return outcome


def summary(targets: list[Measured]) -> str:
    parts = [
        f"{t.lane.label} x{t.workers}: call_engine p50 {ms(kit.median(t.samples('call_engine', 'adapter')))} "
        f"ms vs plain {ms(kit.median(t.samples('call_engine', 'plain')))} ms"
        for t in targets
    ]
    return (
        "; ".join(parts) + ". Adapter = KubernetesScheduler.call_engine/async_call_engine; guard client = its "
        "GuardClient given the Worker; plain = requests/aiohttp sessions POSTing the same /call bodies."
    )


def draw(targets: list[Measured], path: Path) -> None:
    plt = kit.pyplot()
    figure, (bars, lines) = plt.subplots(1, 2, figsize=(13, 4.8))
    labels, position = [], 0
    for target in targets:
        for api in ("call_engine", "async_call_engine"):
            for offset, client, color in (
                (-0.27, "adapter", "tab:blue"),
                (0, "guard client", "tab:cyan"),
                (0.27, "plain", "tab:gray"),
            ):
                samples = target.samples(api, client.split()[0])
                bars.bar(
                    position + offset,
                    ms(kit.median(samples)),
                    0.27,
                    color=color,
                    label=client if position == 0 else None,
                )
                bars.plot(position + offset, ms(kit.percentile(samples, 0.99)), "k_", markersize=12)
            labels.append(f"{target.lane.label}\n{api}")
            position += 1
    bars.set_xticks(range(len(labels)), labels, fontsize=7)
    bars.set_yscale("log")
    bars.set_ylabel("ms (bar p50, tick p99; log scale)")
    bars.set_title("Call latency")
    bars.legend()
    for target, color in zip(targets, ("tab:red", "tab:green")):
        for client, style in (("adapter", "-o"), ("plain", "--s")):
            counts, rates = zip(*target.scaling[client])
            lines.plot(counts, rates, style, color=color, label=f"{target.lane.label} {client}")
        single = dict(target.scaling["adapter"])[1]
        lines.plot(counts, [single * c for c in counts], ":", color=color, alpha=0.5)
    lines.set_xscale("log", base=2)
    ticks = sorted({count for target in targets for count, _ in target.scaling["adapter"]})
    lines.set_xticks(ticks, [str(count) for count in ticks])
    lines.set_yscale("log")
    lines.set_xlabel("workers called at once")
    lines.set_ylabel(f"calls/s of sleep({WORK_SECONDS}) (dotted: linear)")
    lines.set_title("Concurrency scaling (async)")
    lines.legend(fontsize=7)
    kit.save_figure(figure, path)


def run(
    profile: str, kubeconfig: str, progress: kit.Progress, *, results_dir: Path = harness.RESULTS
) -> harness.Result:
    settings = PROFILES[profile]
    load_start = kit.loadavg()
    targets = []
    if settings.areal_workers and kit.AREAL.available():
        targets.append(measure_target(kubeconfig, kit.AREAL, settings.areal_workers, settings, progress))
    elif settings.areal_workers:
        progress(f"skipping AReaL's rpc_server: {kit.AREAL.python} is missing (make areal-worker)")
    targets.append(measure_target(kubeconfig, kit.REFERENCE, settings.stand_in_workers, settings, progress))
    path, plot = kit.plot_file(results_dir, NAME)
    draw(targets, path)
    return report(targets, profile, plot, load_start)


if __name__ == "__main__":
    raise SystemExit(kit.main(run, __doc__.splitlines()[0]))
