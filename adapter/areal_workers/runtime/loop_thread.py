"""A private asyncio loop in a daemon thread.

AReaL calls create_workers/get_workers/... synchronously, sometimes from a thread that already runs an event
loop, and create_engine/... with await. pyhelm3 is asyncio. Running pyhelm3 on our own loop serves both:
sync callers block on a future (no nested loops), async callers await it without blocking their loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

SHUTDOWN_SECONDS = 10.0


class LoopThread:
    def __init__(self, name: str = "areal-workers") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()
        # AReaL's trainers never close their scheduler (LocalScheduler cleans up in __del__): at the latest when the
        # interpreter exits, the loop's tasks are cancelled and run to their end, so the HTTP sessions they close are
        # closed, instead of reported as an unclosed session and a pending task destroyed.
        self._shutdown = weakref.finalize(self, _shut_down, self.loop, self._thread)

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Runs on the private loop and blocks this thread for the result (never call from that loop)."""
        return self.submit(coroutine).result()

    def submit(self, coroutine: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Starts `coroutine` on the private loop; its future is this thread's to wait for (never from that loop)."""
        if self._on_own_loop():
            coroutine.close()
            raise RuntimeError("LoopThread.run called from its own loop: that would deadlock")
        if self.loop.is_closed():
            coroutine.close()
            raise RuntimeError("the scheduler was closed; create a new one to adopt the release")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def close(self) -> None:
        """Cancels what still runs on the loop, lets it finish, then stops and closes the loop. Idempotent."""
        self._shutdown()

    def _on_own_loop(self) -> bool:
        try:
            return asyncio.get_running_loop() is self.loop
        except RuntimeError:
            return False


def _shut_down(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    if loop.is_closed():
        return
    if thread.is_alive():
        ended = asyncio.run_coroutine_threadsafe(_cancel_the_others(), loop)
        try:
            ended.result(timeout=SHUTDOWN_SECONDS)
        except TimeoutError:  # a task that ignores its cancellation: the loop stops under it
            ended.cancel()
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=SHUTDOWN_SECONDS)
    loop.close()


async def _cancel_the_others() -> None:
    current = asyncio.current_task()
    others = [task for task in asyncio.all_tasks() if task is not current]
    for task in others:
        task.cancel()
    await asyncio.gather(*others, return_exceptions=True)
