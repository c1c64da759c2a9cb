"""fork_workers and the deletion of forks: AReaL's process forks (a child of each target worker, started through
the target's guard) recorded in the release, and pod-mode forks (pods of their own, a Kubernetes-only option)."""

from __future__ import annotations

import asyncio
from typing import Any

from .. import naming
from ..areal_types import Worker
from ..config import KubernetesSchedulerConfig
from ..errors import WorkerCreationError, WorkerFailedError, WorkerTimeoutError
from ..guard import forks
from ..guard.client import GuardClient
from ..pods.held_workers import HeldWorkers
from ..pods.inspector import ReleaseInspector
from ..pods.watch import pod_index
from ..runtime.loop_thread import LoopThread
from .driver import ReleaseDriver
from .finder import WorkerFinder

FORK_LOG_LINES = 400  # of the parent pod's log searched for a fork's exit marker
KILL_LOOKUP_TIMEOUT = 5.0  # for the targets' pods when a fork is deleted: gone pods took their forks with them


class ForkOperations:
    def __init__(
        self,
        driver: ReleaseDriver,
        finder: WorkerFinder,
        guard: GuardClient,
        loop: LoopThread,
        held: HeldWorkers,
        inspector: ReleaseInspector,
        config: KubernetesSchedulerConfig,
        experiment: str,
        trial: str,
    ) -> None:
        self.driver, self.finder, self.guard, self.loop, self.held = driver, finder, guard, loop, held
        self.inspector, self.config, self.experiment, self.trial = inspector, config, experiment, trial

    def fork_processes(self, role: str, target_role: str, targets: list[Worker], command: str | None) -> list[Worker]:
        """One child per target worker; all of them answer, or none is kept and nothing is recorded."""
        module = command or self.config.fork_module
        plan = forks.ForkPlan(
            role=role,
            module=module,
            python=self.config.python_executable,
            experiment=self.experiment,
            trial=self.trial,
            worker_flags=self._worker_flags(role),
            port_count=len(targets[0].worker_ports) if targets else 1,
            ready_timeout=self.config.fork_ready_timeout,
            pods=len(targets),
        )
        results = self.loop.run(forks.fork_all(self.guard, plan, targets, self._exit_probe(target_role)))
        failed = [i for i, result in enumerate(results) if isinstance(result, BaseException)]
        errors = [result for result in results if isinstance(result, BaseException)]
        if failed:
            started = [i for i in range(len(targets)) if i not in failed]
            self.loop.run(forks.kill_forks(self.guard, role, targets, started))
            reasons = "\n".join(f"worker {i}: {results[i]}" for i in failed[:4])
            raise WorkerCreationError(
                role,
                f"Failed to fork {len(failed)} out of {len(targets)} workers",
                f"Failed indices: {failed}\n{reasons}",
            ) from errors[0]
        ports = [result for result in results if not isinstance(result, BaseException)]
        fork = {"target": target_role, "mode": "process", "command": [module], "ports": ports}
        try:
            self.driver.apply(
                self.driver.model.with_fork(role, fork),
                f"fork {role} from {target_role} ({len(targets)} processes)",
                role,
            )
        except WorkerCreationError:
            self.loop.run(forks.kill_forks(self.guard, role, targets, range(len(targets))))
            raise
        workers = [
            Worker(id=naming.worker_id(role, i), ip=t.ip, worker_ports=[str(p) for p in ports[i]])
            for i, t in enumerate(targets)
        ]
        self.held.hold(role, self.driver.epoch(role), workers)
        self.driver.settle()
        return workers

    def pod_fork_values(self, role: str, target_role: str, command: str | None) -> dict[str, Any]:
        """The release's values with a pod-mode fork: pods of their own, shaped like the target's."""
        fork: dict[str, Any] = {"target": target_role, "mode": "pod"}
        if command:
            fork["command"] = [self.config.python_executable, "-m", command]
        return self.driver.model.with_fork(role, fork)

    def kill(self, role: str, reverse_order: bool) -> None:
        """Stops a process fork's children through their targets' guards (in reverse rank order if asked)."""
        model = self.driver.model
        target = model.forks[role]["target"]
        try:
            targets = self.finder.known_workers(target) or self.finder.wait_for_pods(target, model, KILL_LOOKUP_TIMEOUT)
        except (WorkerTimeoutError, WorkerFailedError):
            return  # the target's pods are gone or down, and their forked children with them
        indices = list(range(len(targets)))
        if reverse_order:
            indices.reverse()
        self.loop.run(forks.kill_forks(self.guard, role, targets, indices, sequential=reverse_order))

    def _worker_flags(self, role: str) -> tuple[str, ...]:
        """The name-resolve and fileroot flags the chart gave the release's pods (from its topology ConfigMap)."""
        flags = self.driver.model.worker_flags
        if flags is None:
            raise WorkerCreationError(
                role,
                "Cannot fork: the release's chart records no worker flags",
                f"release {self.driver.name} was installed by an older areal-workers chart; "
                f"upgrade it to this version's chart",
            )
        return flags

    def _exit_probe(self, target_role: str) -> forks.ForkExitProbe:
        """Finds a fork's exit marker in the log of the target pod that runs it."""
        pod_role = self.driver.model.pod_role(target_role)
        pods, _ = self.finder.pods.list(naming.role_selector(self.driver.name, pod_role))
        by_index = {pod_index(pod): pod for pod in pods}

        async def probe(index: int, marker: str) -> forks.ForkExit | None:
            pod = by_index.get(index)
            if pod is None:
                return None
            lines = await asyncio.to_thread(self.inspector.log_lines, pod, FORK_LOG_LINES)
            return forks.parse_exit(lines, marker)

        return probe
