"""Process-mode forks: AReaL's fork_workers choreography against each target worker's guard.

For every target worker, concurrently: ask its guard for ports (/alloc_ports), start the fork as a child of the
guard (/fork) bound to the pod's IP, and wait for the fork's /health. Forks share their target's pod: same IP,
same GPUs.

AReaL's guard does not report a child's exit, and a child that dies at once would only show as a health check
that never answers. So the fork runs under a `bash -c` wrapper that prints a marker line with its exit code; the
guard streams its children's output into the container log, where `exit_probe` finds it while we wait.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from ..areal_types import Worker
from ..errors import SchedulerError
from .client import GuardClient

EXIT_POLL_INTERVAL = 1.0  # seconds between looks at the parent's log while a fork starts
FORK_SLOT = 0  # a process fork's slot among its pod's GPUs: one fork of a role per pod
ForkExitProbe = Callable[[int, str], Awaitable["ForkExit | None"]]
"""(worker index, the fork's exit marker) -> how the fork's process ended, or None while it runs."""


@dataclass(frozen=True)
class ForkExit:
    exit_code: int
    log_tail: tuple[str, ...]


class ForkExitedError(SchedulerError):
    """A forked process ended before it answered /health."""

    def __init__(self, worker_id: str, exit_code: int, log_tail: tuple[str, ...]) -> None:
        self.worker_id, self.exit_code, self.log_tail = worker_id, exit_code, log_tail
        lines = "\n".join(f"  | {line}" for line in log_tail) or "  (no output)"
        super().__init__(
            f"forked worker {worker_id} exited with code {exit_code} before answering /health; "
            f"its last output in the parent pod's log:\n{lines}"
        )


@dataclass(frozen=True)
class ForkPlan:
    role: str
    module: str  # run with `python -m`
    python: str
    experiment: str
    trial: str
    worker_flags: tuple[str, ...]  # name-resolve and fileroot flags exactly as the chart gives the pods
    port_count: int
    ready_timeout: float
    pods: int = 0  # the target's pods, one fork in each (SLURM_NNODES); 0: not said
    token: str = field(default_factory=lambda: uuid.uuid4().hex[:12])  # tells this attempt's exit from older ones

    def exit_marker(self, index: int) -> str:
        return f"areal-workers: fork {self.role}/{index} [{self.token}] exited with code "

    def worker_argv(self, index: int, host: str, port: int) -> list[str]:
        """AReaL's fork command line (LocalScheduler._fork_single_worker)."""
        return [
            self.python,
            "-m",
            self.module,
            "--host",
            host,
            "--port",
            str(port),
            "--experiment-name",
            self.experiment,
            "--trial-name",
            self.trial,
            "--role",
            self.role,
            "--worker-index",
            str(index),
            *self.worker_flags,
        ]

    def env(self, index: int) -> dict[str, str]:
        """The fork's own identity: a guard's children inherit its environment, which names the parent's role."""
        return {"AREAL_ROLE": self.role, "AREAL_WORKER_INDEX": str(index), "AREAL_WORKER_ID": f"{self.role}/{index}"}

    def slurm_defaults(self, index: int) -> dict[str, str]:
        """Where the fork sits, in the variables AReaL's colocation reads (main, areal-project/AReaL#1500): its slot
        among its pod's GPUs (SLURM_LOCALID: a pod holds one fork of a role, its GPUs numbered from 0 in the
        container), and its pod among the target's (SLURM_NODEID, SLURM_NNODES), as AReaL's Ray scheduler gives a
        colocated worker its slot, node and node count (#1575). Colocated SGLang takes `SLURM_LOCALID x
        gpus_per_server` as its first GPU; the AWEX plugin its transfer rank from the node and node count."""
        defaults = {"SLURM_LOCALID": str(FORK_SLOT)}
        if self.pods > 0:
            defaults |= {"SLURM_NODEID": str(index), "SLURM_NNODES": str(self.pods)}
        return defaults

    def argv(self, index: int, host: str, port: int) -> list[str]:
        """The worker's command line under a wrapper that reports its exit code in the log. The wrapper also exports
        `slurm_defaults`, each unless the guard's environment (e.g. the user's env_vars) sets it."""
        exports = " ".join(f'{name}="${{{name}:-{value}}}"' for name, value in self.slurm_defaults(index).items())
        script = f'export {exports}; "$@"; code=$?; echo "{self.exit_marker(index)}$code"; exit $code'
        return ["bash", "-c", script, "areal-fork", *self.worker_argv(index, host, port)]


def parse_exit(lines: list[str], marker: str) -> ForkExit | None:
    """The fork's exit from the parent's log lines, with the lines before it (the fork's last output)."""
    for position in range(len(lines) - 1, -1, -1):
        _, found, code = lines[position].partition(marker)
        if found and code.strip().lstrip("-").isdigit():
            return ForkExit(int(code.strip()), tuple(lines[max(0, position - 20) : position]))
    return None


async def fork_all(
    guard: GuardClient, plan: ForkPlan, targets: list[Worker], exit_probe: ForkExitProbe
) -> list[list[int] | BaseException]:
    """The ports of each fork (its guard port first), or the exception that stopped it, by worker index."""
    return await asyncio.gather(
        *(_fork_one(guard, plan, index, target, exit_probe) for index, target in enumerate(targets)),
        return_exceptions=True,
    )


async def _fork_one(
    guard: GuardClient, plan: ForkPlan, index: int, target: Worker, exit_probe: ForkExitProbe
) -> list[int]:
    host, ports = await guard.alloc_ports(target, plan.port_count)
    host = host or target.ip
    await guard.fork(target, plan.role, index, plan.argv(index, host, ports[0]), env=plan.env(index))
    healthy = asyncio.ensure_future(guard.wait_healthy(host, ports[0], plan.ready_timeout))
    try:
        while not healthy.done():
            await asyncio.wait({healthy}, timeout=EXIT_POLL_INTERVAL)
            if healthy.done():
                break
            ended = await exit_probe(index, plan.exit_marker(index))
            if ended is not None:
                raise ForkExitedError(f"{plan.role}/{index}", ended.exit_code, ended.log_tail)
        healthy.result()
    except (TimeoutError, ForkExitedError):
        healthy.cancel()
        await guard.kill_forked(target, plan.role, index)
        raise
    return ports


async def kill_forks(
    guard: GuardClient, role: str, targets: list[Worker], indices: Iterable[int], sequential: bool = False
) -> None:
    """Stops forks through their parents' guards (already gone is fine); `sequential` keeps the given order."""
    if sequential:
        for index in indices:
            await guard.kill_forked(targets[index], role, index)
        return
    await asyncio.gather(*(guard.kill_forked(targets[i], role, i) for i in indices), return_exceptions=True)
