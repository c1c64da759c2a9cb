"""The chart passes the ecosystem's linters and validators: ct lint and kubeconform -strict."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from chartlib import CHART, FULL_VALUES, REPO, template_text
from distkit.kubeconform import kubeconform

TOOLS = REPO / ".tools"
EXAMPLES = sorted((REPO / "examples").glob("values-*.yaml"))


def test_ct_lint_with_the_repository_configuration():
    env = {
        **os.environ,
        "PATH": f"{TOOLS / 'bin'}:{Path(os.sys.executable).parent}:{os.environ['PATH']}",
        "KUBECONFIG": os.devnull,
    }
    result = subprocess.run(
        [
            str(TOOLS / "bin" / "ct"),
            "lint",
            "--config",
            str(REPO / "ct.yaml"),
            "--charts",
            str(CHART),
            "--lint-conf",
            str(TOOLS / "etc" / "ct" / "lintconf.yaml"),
            "--chart-yaml-schema",
            str(TOOLS / "etc" / "ct" / "chart_schema.yaml"),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All charts linted successfully" in result.stdout + result.stderr


@pytest.mark.parametrize("values_file", [*EXAMPLES, None], ids=lambda path: path.name if path else "every-feature")
def test_kubeconform_strict_against_the_pinned_kubernetes(values_file, tmp_path):
    manifests = template_text(yaml.safe_load(values_file.read_text()) if values_file else FULL_VALUES).stdout
    result = kubeconform(manifests, tmp_path, "-output", "text")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Invalid: 0, Errors: 0, Skipped: 0" in result.stdout, result.stdout


def test_kubeconform_setup_rejects_an_unknown_field(tmp_path):
    """Guards the test above: the generated schemas are strict, so a typo in a template would fail."""
    documents = list(filter(None, yaml.safe_load_all(template_text(yaml.safe_load(EXAMPLES[0].read_text())).stdout)))
    statefulset = next(d for d in documents if d["kind"] == "StatefulSet")
    statefulset["spec"]["template"]["spec"]["containers"][0]["imagePulPolicy"] = "Always"
    manifests = yaml.safe_dump(statefulset)
    result = kubeconform(manifests, tmp_path)
    assert result.returncode == 1
    assert "imagePulPolicy" in result.stdout
