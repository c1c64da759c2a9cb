"""The helm command lines Releases runs for a change and for its preflight render: one `helm upgrade --install`
without client-side OpenAPI validation (docs/en/decisions.md), and both with the chart's repository and version."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.release.client import Releases


class RecordingCommand:
    """Stands in for pyhelm3's Command.run: records each command line and its stdin, answers with `output`."""

    def __init__(self, output: bytes) -> None:
        self.output = output
        self.calls: list[tuple[list[str], dict[str, Any]]] = []

    async def run(self, command: list[str], stdin: bytes | None = None) -> bytes:
        self.calls.append((command, json.loads(stdin or b"{}")))
        return self.output


def releases(tmp_path: Path, output: bytes, repo: str | None = None) -> tuple[Releases, RecordingCommand]:
    helm = tmp_path / "helm"
    helm.write_text("#!/bin/sh\nprintf v3.19.0\n")
    helm.chmod(0o755)
    config = KubernetesSchedulerConfig(namespace="rl-team", helm_executable=str(helm), history_max=7)
    made = Releases(config)
    recorder = RecordingCommand(output)
    made.command.run = recorder.run  # type: ignore[method-assign]
    chart = SimpleNamespace(ref="areal-workers", repo=repo, metadata=SimpleNamespace(version="0.2.0"))

    async def the_chart() -> Any:
        return chart

    made.chart = the_chart  # type: ignore[method-assign]
    return made, recorder


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_an_apply_is_one_upgrade_without_client_side_openapi_validation(tmp_path: Path) -> None:
    made, recorder = releases(tmp_path, b'Pulled: oci://x\nDigest: y\n{"version": 4, "config": {"trial": "t"}}')
    written = asyncio.run(made.apply("aw-exp", {"roles": {"actor": {"replicas": 2}}}, "create actor" + "x" * 300))
    assert written == (4, {"trial": "t"})  # helm 4's pull lines before the JSON are skipped
    [(command, values)] = recorder.calls
    assert command[:3] == ["upgrade", "aw-exp", "areal-workers"]
    assert "--install" in command and "--reset-values" in command
    assert "--disable-openapi-validation" in command
    assert flag(command, "--namespace") == "rl-team"
    assert flag(command, "--history-max") == "7"
    assert len(flag(command, "--description")) == 200
    assert flag(command, "--values") == "-" and values == {"roles": {"actor": {"replicas": 2}}}
    assert not {"--wait", "--atomic", "--create-namespace"} & set(command)


@pytest.mark.parametrize("operation", ["apply", "render"])
def test_a_repository_chart_is_named_with_its_repository_and_version(tmp_path: Path, operation: str) -> None:
    made, recorder = releases(tmp_path, b'{"version": 1}', repo="https://charts.example.org")
    if operation == "apply":
        asyncio.run(made.apply("aw-exp", {}, "create"))
    else:
        asyncio.run(made.render("aw-exp", {}))
    [(command, _)] = recorder.calls
    assert flag(command, "--repo") == "https://charts.example.org"
    assert flag(command, "--version") == "0.2.0"
