"""chart-testing's `ct install` against the local cluster: for every charts/areal-workers/ci/*-values.yaml, ct
creates a namespace, `helm install --wait`s the chart, runs `helm test` (the chart's health hook GETs /health of
every worker by its cluster DNS name) and uninstalls it. The workers and the hook are real processes run by the
cluster's podrunner, so the test passes only if every worker really answers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from localkube.cluster import LocalCluster
from repo_paths import REPO

CHART = REPO / "charts" / "areal-workers"
CT = REPO / ".tools" / "bin" / "ct"
KUBECTL = REPO / ".tools" / "bin" / "kubectl"


def tool_path(tmp_path: Path, helm_executable: str) -> str:
    """PATH for ct, which runs `helm` and `kubectl` from PATH: the suite's helm and the pinned kubectl first."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "helm").symlink_to(helm_executable)
    (bin_dir / "kubectl").symlink_to(KUBECTL)
    return os.pathsep.join([str(bin_dir), os.environ.get("PATH", "")])


def cluster_runner_namespaces() -> set[str]:
    """Namespaces of the pods the local cluster's podrunner runs now."""
    with urllib.request.urlopen(f"http://127.0.0.1:{LocalCluster().ports.podrunner}/pods", timeout=10) as reply:
        return {pod["pod"].split("/", 1)[0] for pod in json.load(reply)}


@pytest.mark.skipif(
    bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")),
    reason="the chart's default image runs on real kubelets only: run `ct install` there yourself (docs/en/testing.md)",
)
def test_ct_install_installs_tests_and_uninstalls_every_ci_values_file(kubeconfig, helm_executable, core, tmp_path):
    values_files = sorted(CHART.glob("ci/*-values.yaml"))
    assert values_files, "ct would install the chart's defaults only, which declare no workers"
    env = {**os.environ, "PATH": tool_path(tmp_path, helm_executable), "KUBECONFIG": str(kubeconfig)}
    result = subprocess.run(
        [str(CT), "install", "--config", str(REPO / "ct.yaml"), "--charts", str(CHART.relative_to(REPO))],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    output = result.stdout + result.stderr
    (tmp_path / "ct.log").write_text(output)
    assert result.returncode == 0, f"ct install failed (full output: {tmp_path / 'ct.log'}):\n{output[-6000:]}"
    assert "All charts installed successfully" in output

    for path in values_files:
        assert f'Installing chart with values file "{path.relative_to(REPO)}"' in output
    assert output.count("Phase:          Succeeded") == len(values_files), output[-6000:]
    namespaces = re.findall(r'Creating namespace "([^"]+)"', output)
    assert len(namespaces) == len(values_files)
    for namespace in namespaces:
        assert f'Namespace "{namespace}" terminated.' in output
        assert f'Deleting release "{namespace}"...' in output
    # helm's own "release X uninstalled" line is not asserted: ct (pkg/exec RunProcess) calls cmd.Wait while its
    # goroutine may still be reading the pipe, so the last line of a successful uninstall is sometimes dropped.
    # A failed uninstall is always reported by ct itself, after the process returned.
    assert "Error deleting Helm release" not in output, output[-6000:]
    # Uninstalled means no process either: the cluster's podrunner stopped every worker of those namespaces.
    deadline = time.monotonic() + 60
    while cluster_runner_namespaces() & set(namespaces):
        assert time.monotonic() < deadline, f"podrunner still runs pods of {cluster_runner_namespaces()}"
        time.sleep(0.5)
