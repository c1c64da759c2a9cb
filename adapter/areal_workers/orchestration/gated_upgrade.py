"""One revision's upgrade with the checks that must pass on its render first (the preflight: node fit, Kueue queues,
stale name_resolve records) and the Kueue requeue that must come right before it. With helm 3 that is one
`helm upgrade`, whose post-renderer holds the render until the checks pass (release/render_gate.py); with helm 4 a
`helm template` renders for the checks first. A refusal leaves no revision and no object changed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..release.client import MANIFEST_LOADER, HelmError, Releases, Snapshot
from ..release.render_gate import APPLY, RenderGate
from ..runtime.loop_thread import LoopThread

Checks = Callable[[list[dict[str, Any]]], None]  # raise to refuse the render


@dataclass(frozen=True)
class ChangeRequest:
    release: str
    values: dict[str, Any]
    description: str
    key: str  # the workload AReaL's error names


def upgrade(
    loop: LoopThread,
    releases: Releases,
    change: ChangeRequest,
    checks: Checks | None,
    requeue: Callable[[dict[str, Any]], object],
) -> Snapshot:
    """`checks` (None: none) on the revision's render, then `requeue(values)`, then the upgrade: the revision helm
    wrote. HelmError when helm fails; what `checks` raised when they refuse."""
    if checks is not None:
        if loop.run(releases.post_renders()):
            return _gated(loop, releases, change, checks, requeue)
        checks(loop.run(releases.render(change.release, change.values)))
    requeue(change.values)
    return loop.run(releases.apply(change.release, change.values, change.description))


def _gated(
    loop: LoopThread, releases: Releases, change: ChangeRequest, checks: Checks, requeue: Callable[..., object]
) -> Snapshot:
    with RenderGate() as gate:
        running = loop.submit(releases.apply(change.release, change.values, change.description, gate))
        manifests = gate.wait_rendered(running.done, MANIFEST_LOADER)
        if manifests is not None:
            try:
                checks(manifests)
                requeue(change.values)
            except BaseException as refusal:
                gate.answer(f"refused by areal-workers before anything was applied: {refusal}")
                with contextlib.suppress(HelmError):  # it fails on the refusal: the refusal is the error
                    running.result()
                raise
            gate.answer(APPLY)
        return running.result()
