"""WorkerCalls: AReaL's calls on its workers. An engine call names its worker by id: a worker AReaL holds is a
dictionary read, one of a role not known yet is waited for; the call then goes to the worker's guard in AReaL's
serialization. The calls on whole roles are here too: the experiment config once they answer, engine.destroy()
before they go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from .. import naming
from ..areal_types import Worker
from ..config import KubernetesSchedulerConfig
from ..errors import WorkerNotFoundError
from ..guard.client import CallOptions, GuardClient
from ..guard.wire_format import deserialize_value, serialize_value
from ..runtime.loop_thread import LoopThread
from .driver import ReleaseDriver
from .finder import WorkerFinder

logger = logging.getLogger(__name__)

# The scheduler's get_workers(role, timeout): it also follows colocations and forks, and rolls a failed change back.
WaitForWorkers = Callable[[str, float], list[Worker]]


class WorkerCalls:
    """The guard calls of one release's workers, addressed as AReaL addresses them."""

    def __init__(
        self,
        driver: ReleaseDriver,
        finder: WorkerFinder,
        guard: GuardClient,
        loop: LoopThread,
        config: KubernetesSchedulerConfig,
        wait_for_workers: WaitForWorkers,
    ) -> None:
        self.driver, self.finder, self.guard, self.loop, self.config = driver, finder, guard, loop, config
        self.wait_for_workers = wait_for_workers

    def worker(self, worker_id: str) -> Worker:
        parsed = naming.parse_worker_id(worker_id)
        if parsed is None:
            raise WorkerNotFoundError(worker_id)
        role, index = parsed
        workers = self.finder.known_workers(role)  # answered without the lock a change holds
        if workers is None and self.driver.model.exists(role):
            workers = self.wait_for_workers(role, self.config.ready_timeout)
        if not workers or index >= len(workers):
            raise WorkerNotFoundError(worker_id)
        return workers[index]

    async def aworker(self, worker_id: str) -> Worker:
        """worker() for coroutines: a known worker is a dictionary read on the caller's loop; only a wait for
        workers not known yet goes to a thread (a thread hop per call costs more than the call's HTTP)."""
        parsed = naming.parse_worker_id(worker_id)
        if parsed is not None:
            workers = self.finder.known_workers(parsed[0])
            if workers is not None and parsed[1] < len(workers):
                return workers[parsed[1]]
        return await asyncio.to_thread(self.worker, worker_id)

    async def create_engine(
        self, worker_id: str, engine: str, engine_name: str | None, args: tuple[Any, ...], kwargs: dict[str, Any]
    ) -> Any:
        worker = await self.aworker(worker_id)
        await asyncio.to_thread(self.finder.check_alive, worker)
        name = worker_id if engine_name is None else engine_name
        return await self.guard.create_engine(
            worker, engine, name, serialize_value(list(args)), serialize_value(kwargs)
        )

    async def set_env(self, worker_id: str, env: dict[str, str]) -> None:
        worker = await self.aworker(worker_id)
        await self.guard.set_env(worker, env)

    def call(
        self,
        worker_id: str,
        method: str,
        engine_name: str | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: CallOptions,
    ) -> Any:
        worker = self.worker(worker_id)
        name = worker_id if engine_name is None else engine_name  # AReaL's default: the worker's own engine
        result = self.guard.call(
            worker,
            method,
            name,
            serialize_value(list(args)),
            serialize_value(kwargs),
            options,
        )
        return deserialize_value(result)

    async def async_call(
        self,
        worker_id: str,
        method: str,
        engine_name: str | None,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        options: CallOptions,
    ) -> Any:
        worker = await self.aworker(worker_id)
        name = worker_id if engine_name is None else engine_name
        result = await self.guard.async_call(
            worker,
            method,
            name,
            serialize_value(list(args)),
            serialize_value(kwargs),
            options,
        )
        return deserialize_value(result)

    def configure(self, workers: list[Worker], exp_config: Any) -> None:
        """What AReaL's schedulers do once workers answer: send each its experiment config, role and rank."""
        for rank, worker in enumerate(workers):
            role = worker.id.rpartition("/")[0]
            self.guard.configure(worker, serialize_value({"config": exp_config, "role": role, "rank": rank}))

    def destroy_engines(self, roles: list[str]) -> None:
        """engine.destroy() on the known workers of `roles` before they go, bounded by destroy_timeout; a worker
        that does not answer is deleted anyway."""
        workers = [worker for role in roles for worker in self.finder.known_workers(role) or []]
        failures = self.loop.run(self.guard.destroy_engines(workers, self.config.destroy_timeout))
        for worker_id, failure in failures.items():
            logger.info("destroy on %s before deletion: %s", worker_id, failure)
