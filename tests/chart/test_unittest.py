"""The helm-unittest suites of charts/areal-workers/tests, run as `helm unittest` through the local plugin that
tools/install/tools.sh writes to .tools/helm-plugins (no network), and kept out of the packaged chart."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from chartlib import CHART, HELM, REPO

PLUGINS = REPO / ".tools" / "helm-plugins"
SUITES = sorted((CHART / "tests").glob("*_test.yaml"))


def helm_unittest(chart: Path) -> subprocess.CompletedProcess:
    if not (PLUGINS / "unittest" / "plugin.yaml").is_file():
        pytest.fail(
            f"the helm unittest plugin is missing from {PLUGINS}: run `make tools` "
            "(or `tools/install/tools.sh helm_unittest`)"
        )
    env = {**os.environ, "HELM_PLUGINS": str(PLUGINS), "KUBECONFIG": os.devnull}
    return subprocess.run(
        [HELM, "unittest", "--color=false", str(chart)], capture_output=True, text=True, env=env, timeout=300
    )


def test_the_chart_suites_pass():
    assert len(SUITES) >= 4, SUITES
    result = helm_unittest(CHART)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert f"Test Suites: {len(SUITES)} passed, {len(SUITES)} total" in output, output
    passed = re.search(r"Tests:\s+(\d+) passed, (\d+) total", output)
    assert passed and passed[1] == passed[2] and int(passed[1]) >= 10, output


def test_the_suites_fail_on_a_broken_template(tmp_path):
    """Guards the test above: a chart whose long names are cut one character short fails its suite."""
    chart = tmp_path / "areal-workers"
    shutil.copytree(CHART, chart)
    helpers = chart / "templates" / "_helpers.tpl"
    text = helpers.read_text()
    assert "trunc (sub $limit 9 | int) $full" in text
    helpers.write_text(text.replace("trunc (sub $limit 9 | int) $full", "trunc (sub $limit 10 | int) $full"))
    result = helm_unittest(chart)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "cuts a name over 52 characters" in output, output


def test_helm_package_leaves_the_suites_out_and_keeps_the_test_hook(tmp_path):
    subprocess.run(
        [HELM, "package", str(CHART), "-d", str(tmp_path)],
        check=True,
        capture_output=True,
        env={**os.environ, "KUBECONFIG": os.devnull},
        timeout=120,
    )
    (package,) = tmp_path.glob("*.tgz")
    with tarfile.open(package) as archive:
        names = archive.getnames()
    assert "areal-workers/templates/tests/test-health.yaml" in names
    assert not [name for name in names if name.startswith("areal-workers/tests/")], names
