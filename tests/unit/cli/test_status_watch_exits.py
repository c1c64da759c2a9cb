"""How `status --watch` ends (cli/commands/workers.py `_watch`): Ctrl-C exits 130 as `logs -f` does, and the end of
--watch-seconds exits as a `status` of the last frame would (0 when every worker is ready, 1 otherwise)."""

from __future__ import annotations

import json
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from test_workers_command import FakeSession, pod

from areal_workers.cli.commands import workers
from areal_workers.cli.session import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBLEM
from areal_workers.pods.watch import WaitTimedOut

Frames = list[dict[str, client.V1Pod]]
ALL_READY = [pod("actor", 0), pod("actor", 1), pod("critic", 0)]
ONE_NOT_READY = [pod("actor", 0), pod("actor", 1, ready=False), pod("critic", 0)]


@pytest.fixture(autouse=True)
def no_lease(monkeypatch):
    monkeypatch.setattr(workers.TrialReader, "trainer", lambda self, release: "")


def watching(frames: list[list[client.V1Pod]], end: BaseException) -> FakeSession:
    """A session whose pod watch shows `frames` one after the other, then ends with `end` (WaitTimedOut at the
    deadline, KeyboardInterrupt for Ctrl-C), as PodWatch.wait does."""
    session = FakeSession(frames[0])

    def wait(selector: str, redraw: Callable[[dict[str, client.V1Pod]], bool], deadline: float, **_: Any) -> None:
        for frame in frames:
            redraw({p.metadata.name: p for p in frame})
        raise end

    listing = session.pods().list
    session.pods = lambda: SimpleNamespace(list=listing, wait=wait)  # type: ignore[method-assign]
    return session


@pytest.mark.parametrize("fmt", ["json", "yaml", "table"])
@pytest.mark.parametrize("frames", [[ALL_READY], [ONE_NOT_READY]], ids=["ready", "not-ready"])
def test_ctrl_c_ends_a_watch_with_130_whatever_it_showed(fmt, frames, capsys):
    assert workers.status(watching(frames, KeyboardInterrupt()), fmt, True, None) == EXIT_INTERRUPTED
    assert capsys.readouterr().out  # the frames before Ctrl-C were shown


@pytest.mark.parametrize(
    ("frames", "code"),
    [
        ([ALL_READY], EXIT_OK),
        ([ONE_NOT_READY], EXIT_PROBLEM),
        ([ONE_NOT_READY, ALL_READY], EXIT_OK),  # the last frame counts, not the first
        ([ALL_READY, ONE_NOT_READY], EXIT_PROBLEM),
    ],
    ids=["ready", "not-ready", "became-ready", "became-not-ready"],
)
def test_the_end_of_watch_seconds_exits_as_status_would_for_the_last_frame(frames, code, capsys):
    assert workers.status(watching(frames, WaitTimedOut({})), "json", True, 30.0) == code
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(shown) == len(frames)
    assert shown[-1]["trials"][0]["all_ready"] is (code == EXIT_OK)
    assert workers.status(FakeSession(frames[-1]), "json", False, None) == code  # a plain status agrees
