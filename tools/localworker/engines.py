"""Tiny engines for the reference guard's POST /create_engine, used by the tests.

Create one with ``{"engine": "localworker.engines.Counter", "engine_name": "counter",
"init_kwargs": {"start": 0, "destroy_marker": "/tmp/x"}}``, then drive it through POST /call.
Standard library only: tools/localworker/areal_engines.py mixes `CounterProbes` into an AReaL TrainEngine, in
AReaL's worker environment, which has neither this repository's dependencies nor areal_workers.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

DESTROYED_MARKER_TEXT = "destroyed"


class CounterProbes:
    """A counter plus a few probes into the worker process that hosts it."""

    def __init__(self, start: int = 0, destroy_marker: str | None = None) -> None:
        self._count = start
        # Written by destroy(), so a test can see that the server's shutdown reached this engine.
        self._destroy_marker = Path(destroy_marker) if destroy_marker else None

    def increment(self, n: int = 1) -> int:
        self._count += n
        return self._count

    def value(self) -> int:
        return self._count

    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    def pid(self) -> int:
        return os.getpid()

    def fail(self, message: str = "Counter.fail was called") -> None:
        raise RuntimeError(message)

    def sleep(self, seconds: float) -> float:
        """Sleeps, then returns the seconds actually slept (for time-out and serialization tests)."""
        started = time.monotonic()
        time.sleep(seconds)
        return time.monotonic() - started

    def destroy(self) -> None:
        if self._destroy_marker is not None:
            self._destroy_marker.write_text(DESTROYED_MARKER_TEXT)


class Counter(CounterProbes):
    """The reference guard's engine: any class is one there."""


class Broken:
    """An engine whose constructor always raises, for the guard's 500 path."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("Broken engine refuses to start")
