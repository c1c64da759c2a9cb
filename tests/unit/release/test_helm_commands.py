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
from areal_workers.release import ownership
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


class HelmRecord:
    """Stands in for pyhelm3's Command.run: `helm status` answers the record of one revision holding `manifest`;
    every command's verb is recorded."""

    def __init__(self, manifest: str, status: str = "deployed") -> None:
        self.verbs: list[str] = []
        self.record = {
            "name": "aw-exp",
            "namespace": "rl-team",
            "version": 3,
            "info": {"status": status, "last_deployed": "2026-12-07T10:00:00Z"},
            "manifest": manifest,
            "hooks": [],
        }

    async def run(self, command: list[str], stdin: bytes | None = None) -> bytes:
        self.verbs.append(command[0])
        return json.dumps(self.record).encode() if command[0] == "status" else b""


FOREIGN = "---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: admin\n"


def releases_answering(tmp_path: Path, helm: HelmRecord) -> Releases:
    made, _ = releases(tmp_path, b"")
    made.command.run = helm.run  # type: ignore[method-assign]
    return made


def test_an_uninstall_reads_the_release_once_before_it_uninstalls(tmp_path: Path) -> None:
    helm = HelmRecord("")
    assert asyncio.run(releases_answering(tmp_path, helm).uninstall("aw-exp")) is True
    assert helm.verbs == ["status", "uninstall"]


def test_an_uninstall_of_a_revision_holding_what_the_chart_never_renders_is_refused_before_helm_acts(
    tmp_path: Path,
) -> None:
    helm = HelmRecord(FOREIGN)
    with pytest.raises(ownership.UntrustedRevisionError, match="ClusterRoleBinding"):
        asyncio.run(releases_answering(tmp_path, helm).uninstall("aw-exp"))
    assert helm.verbs == ["status"]


def test_recover_reads_a_release_that_is_not_pending_once_and_changes_nothing(tmp_path: Path) -> None:
    helm = HelmRecord(FOREIGN)  # not pending: nothing to recover, so nothing to trust
    current = asyncio.run(releases_answering(tmp_path, helm).recover("aw-exp"))
    assert current is not None and current.revision == 3
    assert helm.verbs == ["status"]


def test_a_chart_directory_is_read_from_its_chart_yaml_without_helm(tmp_path: Path) -> None:
    made, recorder = releases(tmp_path, b"")
    del made.chart  # the instance's stand-in: back to Releases.chart
    chart = asyncio.run(made.chart())
    assert recorder.calls == []  # no `helm show chart`
    assert chart.metadata.name == "areal-workers" and Path(str(chart.ref)).is_absolute()


@pytest.mark.parametrize("version, post_renders", [(b"v3.19.0", True), (b"v4.0.1", False)])
def test_helm_3_takes_the_render_gate_and_its_version_is_asked_once(
    tmp_path: Path, version: bytes, post_renders: bool
) -> None:
    made, recorder = releases(tmp_path, version)
    made.executable = str(tmp_path / f"helm-{version.decode()}")  # a key of its own in the process-wide answers
    assert asyncio.run(made.post_renders()) is post_renders
    assert asyncio.run(made.post_renders()) is post_renders
    assert [command for command, _ in recorder.calls] == [["version", "--template", "{{ .Version }}"]]
