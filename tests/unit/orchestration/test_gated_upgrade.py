"""gated_upgrade: the checks judge the render the upgrade applies and the requeue comes between them and the apply;
a refusal raises the checks' own error and applies nothing. The post-renderer is RenderGate's real script, run as
helm 3 runs it (the manifests on its stdin, what it prints applied); helm itself is not needed here."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from areal_workers.errors import WorkerCreationError
from areal_workers.orchestration.gated_upgrade import ChangeRequest, upgrade
from areal_workers.release.client import HelmError
from areal_workers.release.render_gate import RenderGate
from areal_workers.runtime.loop_thread import LoopThread

MANIFESTS = "---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: r-actor\n---\nkind: ConfigMap\n" + (
    "metadata:\n  name: r-topology\n"
)
CHANGE = ChangeRequest("r", {"roles": {"actor": {"replicas": 1}}}, "create actor", "actor")


class PostRenderingReleases:
    """Releases whose apply runs the gate's post-renderer on MANIFESTS as helm 3 does; `helm_major` 4: no gate."""

    def __init__(self, helm_major: int = 3) -> None:
        self.helm_major = helm_major
        self.log: list[str] = []
        self.applied: str | None = None

    async def post_renders(self) -> bool:
        return self.helm_major == 3

    async def render(self, name: str, values: dict[str, Any]) -> list[dict[str, Any]]:
        self.log.append("template")
        return list(yaml.safe_load_all(MANIFESTS))

    async def apply(
        self, name: str, values: dict[str, Any], description: str, gate: RenderGate | None = None
    ) -> tuple[int, dict[str, Any]]:
        self.log.append("upgrade")
        if gate is None:
            self.applied = MANIFESTS
            return 1, values
        flags = gate.helm_flags()
        assert flags[:2] == ["--post-renderer", "/bin/sh"]
        script = await asyncio.create_subprocess_exec(
            "/bin/sh",
            *flags[3::2],
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await script.communicate(MANIFESTS.encode())
        if script.returncode:
            raise HelmError(1, b"", b"Error: error while running post render on files: " + err)
        self.applied = out.decode()
        return 1, values


@pytest.fixture
def loop() -> Iterator[LoopThread]:
    thread = LoopThread("test-gated-upgrade")
    yield thread
    thread.close()


def test_with_helm_3_the_checks_judge_the_applied_render_then_the_requeue_runs_before_it_is_applied(loop):
    releases = PostRenderingReleases()
    judged: list[list[str]] = []

    def checks(manifests: list[dict[str, Any]]) -> None:
        judged.append([m["kind"] for m in manifests])
        releases.log.append("checks")

    written = upgrade(loop, releases, CHANGE, checks, lambda values: releases.log.append("requeue"))
    assert written == (1, CHANGE.values)
    assert judged == [["StatefulSet", "ConfigMap"]]
    assert releases.log == ["upgrade", "checks", "requeue"]  # no helm template: one helm process
    assert releases.applied == MANIFESTS  # applied unchanged


def test_a_refusal_raises_the_checks_error_and_nothing_is_applied_or_requeued(loop):
    releases = PostRenderingReleases()
    refusal = WorkerCreationError("actor", "No node can hold a worker", "0/2 nodes have nvidia.com/gpu: 100 free")

    def checks(manifests: list[dict[str, Any]]) -> None:
        raise refusal

    with pytest.raises(WorkerCreationError) as raised:
        upgrade(loop, releases, CHANGE, checks, lambda values: releases.log.append("requeue"))
    assert raised.value is refusal
    assert releases.applied is None and "requeue" not in releases.log


def test_with_helm_4_a_template_renders_for_the_checks_before_the_upgrade(loop):
    releases = PostRenderingReleases(helm_major=4)
    checks_saw: list[int] = []
    upgrade(
        loop,
        releases,
        CHANGE,
        lambda manifests: checks_saw.append(len(manifests)),
        lambda values: releases.log.append("requeue"),
    )
    assert checks_saw == [2]
    assert releases.log == ["template", "requeue", "upgrade"]


def test_a_change_without_checks_is_the_upgrade_alone(loop):
    releases = PostRenderingReleases()
    upgrade(loop, releases, CHANGE, None, lambda values: releases.log.append("requeue"))
    assert releases.log == ["requeue", "upgrade"]
