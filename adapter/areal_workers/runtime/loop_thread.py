"""A private asyncio loop in a daemon thread.

AReaL calls create_workers/get_workers/... synchronously, sometimes from a thread that already runs an event
loop, and create_engine/... with await. pyhelm3 is asyncio. Running pyhelm3 on our own loop serves both:
sync callers block on a future (no nested loops), async callers await it without blocking their loop.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class LoopThread:
    def __init__(self, name: str = "areal-workers") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Runs on the private loop and blocks this thread for the result (never call from that loop)."""
        if self._on_own_loop():
            coroutine.close()
            raise RuntimeError("LoopThread.run called from its own loop: that would deadlock")
        if self.loop.is_closed():
            coroutine.close()
            raise RuntimeError("the scheduler was closed; create a new one to adopt the release")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    async def run_async(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Runs on the private loop; the caller's loop keeps running while it waits."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self.loop))

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10)
        self.loop.close()

    def _on_own_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False
