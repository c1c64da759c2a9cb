"""The scheduler's private loop (runtime/loop_thread.py): closing it, or the interpreter's exit when nobody closes it
(AReaL's trainers never close their scheduler), cancels what still runs there and lets it finish, so the guard's
HTTP session of that loop is closed, not reported as unclosed with its closer "destroyed but pending"."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap

import pytest

from areal_workers.runtime.loop_thread import LoopThread

pytestmark = pytest.mark.unit


def test_close_cancels_a_pending_task_and_lets_its_clean_up_run():
    thread = LoopThread("test-loop")
    cleaned: list[str] = []

    async def waits_forever() -> None:
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            await asyncio.sleep(0)  # clean-up that awaits, as closing an aiohttp session does
            cleaned.append("done")

    thread.loop.call_soon_threadsafe(lambda: thread.loop.create_task(waits_forever()))
    assert thread.run(asyncio.sleep(0, result=1)) == 1  # the task has started
    thread.close()
    assert cleaned == ["done"] and thread.loop.is_closed()
    thread.close()  # idempotent
    with pytest.raises(RuntimeError, match="was closed"):
        thread.run(asyncio.sleep(0))


EXITS_WITHOUT_CLOSING = textwrap.dedent(
    """
    import asyncio, gc
    from areal_workers.guard.transport import GuardTransport
    from areal_workers.runtime.loop_thread import LoopThread

    transport, thread = GuardTransport(), LoopThread("scheduler-loop")

    async def open_session():
        return transport._session().closed

    assert thread.run(open_session()) is False
    print("session open; exiting without close()", flush=True)
    """
)


def test_an_interpreter_that_exits_without_closing_reports_nothing_unclosed():
    ended = subprocess.run([sys.executable, "-c", EXITS_WITHOUT_CLOSING], capture_output=True, text=True, timeout=60)
    assert ended.returncode == 0 and "exiting without close()" in ended.stdout, ended.stderr
    assert "Unclosed" not in ended.stderr and "destroyed but it is pending" not in ended.stderr, ended.stderr
