"""One version for the package, the chart and the changelog: `_version.py` is the source, the rest must agree."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

import yaml

from areal_workers import __version__
from areal_workers.cli.main import version_line
from repo_paths import REPO

CHART_YAML = REPO / "charts" / "areal-workers" / "Chart.yaml"
RELEASED_HEADING = re.compile(r"^## \[(\d+\.\d+\.\d+[^\]]*)\] - \d{4}-\d{2}-\d{2}$", re.MULTILINE)


def test_pyproject_takes_its_version_from_the_package():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "areal_workers._version.__version__"}


def test_the_chart_has_the_package_version():
    assert yaml.safe_load(CHART_YAML.read_text())["version"] == __version__


def test_the_newest_changelog_entry_is_this_version():
    text = (REPO / "CHANGELOG.md").read_text()
    assert "## [Unreleased]" in text.split(f"## [{__version__}]")[0]
    assert RELEASED_HEADING.findall(text)[0] == __version__


def test_the_command_prints_the_package_and_chart_versions():
    process = subprocess.run(
        [sys.executable, "-m", "areal_workers.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert process.returncode == 0, process.stderr
    assert process.stdout.strip() == version_line()
    assert process.stdout.startswith(f"areal-workers {__version__} (chart areal-workers {__version__}, for AReaL ")
