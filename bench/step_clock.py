"""Where a scheduler call's time goes: each helm process by its subcommand, and the Kubernetes API requests made
on the calling thread (the lease renewal and watches of other threads are not the call's), the rest being the
adapter's own Python."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from areal_workers.scheduler import KubernetesScheduler


@dataclass
class Steps:
    """Seconds (and counts) spent per step while the clock ran."""

    helm: Counter[str] = field(default_factory=Counter)  # seconds per helm subcommand ("upgrade", "template", ...)
    helm_runs: Counter[str] = field(default_factory=Counter)
    api_seconds: float = 0.0
    api_requests: int = 0

    def helm_seconds(self, subcommand: str | None = None) -> float:
        return sum(s for name, s in self.helm.items() if subcommand in (None, name))


@contextmanager
def clock(scheduler: KubernetesScheduler) -> Iterator[Steps]:
    """Times `scheduler`'s helm processes and the API requests of this thread until the block ends."""
    steps = Steps()
    command = scheduler.driver.releases.command
    run: Callable[..., Awaitable[bytes]] = command.run
    call_api = client.ApiClient.call_api
    caller = threading.get_ident()

    async def timed_run(arguments: list[str], *rest: Any, **options: Any) -> bytes:
        started = time.perf_counter()
        try:
            return await run(arguments, *rest, **options)
        finally:
            steps.helm[str(arguments[0])] += time.perf_counter() - started
            steps.helm_runs[str(arguments[0])] += 1

    def timed_call_api(self: client.ApiClient, *arguments: Any, **options: Any) -> Any:
        if threading.get_ident() != caller:
            return call_api(self, *arguments, **options)
        started = time.perf_counter()
        try:
            return call_api(self, *arguments, **options)
        finally:
            steps.api_seconds += time.perf_counter() - started
            steps.api_requests += 1

    command.run = timed_run  # type: ignore[method-assign]
    client.ApiClient.call_api = timed_call_api  # type: ignore[method-assign]
    try:
        yield steps
    finally:
        client.ApiClient.call_api = call_api  # type: ignore[method-assign]
        del command.run
