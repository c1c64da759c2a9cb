"""Process-mode forks: AReaL's fork_workers choreography against each target worker's guard.

For every target worker, concurrently: ask its guard for ports (/alloc_ports), start the fork as a child of the
guard (/fork) bound to the pod's IP, and wait for the fork's /health. Forks share their target's pod: same IP,
same GPUs.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .guard_client import GuardClient
from .types import Worker


@dataclass(frozen=True)
class ForkPlan:
    role: str
    module: str  # run with `python -m`
    python: str
    experiment: str
    trial: str
    worker_flags: tuple[str, ...]  # name-resolve and fileroot flags, as the pods' own workers get them
    port_count: int
    ready_timeout: float

    def argv(self, index: int, host: str, port: int) -> list[str]:
        return [self.python, "-m", self.module, "--host", host, "--port", str(port),
                "--experiment-name", self.experiment, "--trial-name", self.trial, "--role", self.role,
                "--worker-index", str(index), *self.worker_flags]


def worker_flags(cluster: Mapping[str, Any]) -> tuple[str, ...]:
    """AReaL's worker flags from the chart's `cluster` values (set ones only, as AReaL's fork does)."""
    resolve = cluster.get("nameResolve", {}) or {}
    pairs = (("--name-resolve-type", resolve.get("type")), ("--nfs-record-root", resolve.get("nfsRecordRoot")),
             ("--etcd3-addr", resolve.get("etcd3Addr")), ("--fileroot", cluster.get("fileroot")))
    return tuple(part for flag, value in pairs if value for part in (flag, str(value)))


async def fork_all(guard: GuardClient, plan: ForkPlan, targets: list[Worker]) -> list[list[int] | BaseException]:
    """The ports of each fork (its guard port first), or the exception that stopped it, by worker index."""
    return await asyncio.gather(*(_fork_one(guard, plan, index, target) for index, target in enumerate(targets)),
                                return_exceptions=True)


async def _fork_one(guard: GuardClient, plan: ForkPlan, index: int, target: Worker) -> list[int]:
    host, ports = await guard.alloc_ports(target, plan.port_count)
    host = host or target.ip
    await guard.fork(target, plan.role, index, plan.argv(index, host, ports[0]))
    try:
        await guard.wait_healthy(host, ports[0], plan.ready_timeout)
    except TimeoutError:
        await guard.kill_forked(target, plan.role, index)
        raise
    return ports


async def kill_forks(guard: GuardClient, role: str, targets: list[Worker], indices: Iterable[int],
                     sequential: bool = False) -> None:
    """Stops forks through their parents' guards (already gone is fine); `sequential` keeps the given order."""
    if sequential:
        for index in indices:
            await guard.kill_forked(targets[index], role, index)
        return
    await asyncio.gather(*(guard.kill_forked(targets[i], role, i) for i in indices), return_exceptions=True)
