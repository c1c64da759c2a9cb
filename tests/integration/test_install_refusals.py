"""The installers refuse what their pins do not match, for real: tools/install/tools.sh run on a copy of
tools/install/ with one pin changed, in a cache of the test's own. No cluster; go's module cache and pip's HTTP cache
make each run take seconds after `make tools`."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from repo_paths import REPO


def installer(tmp_path: Path, **pins: str) -> Path:
    """A repository root holding a copy of tools/install/ whose versions.env has `pins` replaced."""
    root = tmp_path / "repo"
    shutil.copytree(REPO / "tools" / "install", root / "tools" / "install")
    env_file = root / "tools" / "install" / "versions.env"
    lines = env_file.read_text().splitlines()
    for key, value in pins.items():
        assert any(line.startswith(f"{key}=") for line in lines), key
        lines = [f"{key}={value}" if line.startswith(f"{key}=") else line for line in lines]
    env_file.write_text("\n".join(lines) + "\n")
    return root


def run(root: Path, tmp_path: Path, *tools: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(root / "tools" / "install" / "tools.sh"), *tools],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "AREAL_WORKERS_CACHE": str(tmp_path / "cache")},
    )


def test_a_tool_wheel_whose_sha256_differs_from_the_pin_is_refused(tmp_path):
    root = installer(tmp_path, HELM4_WHEEL_SHA256="0" * 64)
    result = run(root, tmp_path, "helm4")
    assert result.returncode != 0
    assert "the downloaded wheel does not have the sha256 tools/install/versions.env pins" in result.stderr
    assert not (root / ".tools" / "bin" / "helm4").exists()


def test_a_go_module_whose_hash_differs_from_the_pinned_go_sum_is_refused(tmp_path):
    root = installer(tmp_path, HELM_UNITTEST_SUM="h1:" + "A" * 43 + "=")
    result = run(root, tmp_path, "helm_unittest")
    assert result.returncode != 0 and "building helm-unittest failed" in result.stderr, result.stderr
    log = next((tmp_path / "cache" / "tools" / "build").glob("helm-unittest-*/get.log")).read_text()
    assert "checksum mismatch" in log and "SECURITY ERROR" in log


def test_a_cached_binary_that_reports_another_version_is_refused(tmp_path):
    root = installer(tmp_path)
    versions = dict(
        line.split("=", 1) for line in (root / "tools/install/versions.env").read_text().splitlines() if "=" in line
    )
    entry = tmp_path / "cache" / "tools" / f"helm4-{versions['HELM4_VERSION']}"
    entry.mkdir(parents=True)
    (entry / "helm4").write_text("#!/bin/sh\necho v9.9.9\n")
    (entry / "helm4").chmod(0o755)
    result = run(root, tmp_path, "helm4")
    assert result.returncode != 0
    assert f"helm4 reports 'v9.9.9', but its cache key says {versions['HELM4_VERSION']}" in result.stderr
