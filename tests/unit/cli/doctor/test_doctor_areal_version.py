"""`doctor` names the AReaL installed beside it and warns on a version no lane of ours runs."""

from __future__ import annotations

import re

import pytest

from areal_workers.cli.doctor import TESTED_AREAL, check_areal_version
from areal_workers.cli.doctor.areal_version import installed_areal
from repo_paths import REPO


def test_the_tested_versions_are_the_ones_the_lanes_install():
    pinned = re.search(r"^AREAL_VERSION=(\S+)$", (REPO / "tools/install/versions.env").read_text(), re.MULTILINE)
    assert pinned is not None and pinned.group(1) in TESTED_AREAL


def test_a_tested_version_passes_naming_it():
    check = check_areal_version(lambda: "1.0.4")
    assert (check.status, check.fix) == ("pass", "")
    assert "AReaL 1.0.4" in check.detail


@pytest.mark.parametrize("version", ["2.0.0", "1.0.5", "0.5.3", "2.1.0.dev0"])
def test_an_untested_version_warns_saying_which_are_tested(version):
    check = check_areal_version(lambda: version)
    assert check.status == "warn"
    assert f"AReaL {version} is not a version areal-workers is tested with (1.0.4)" == check.detail
    assert "areal-integration.md#which-areal" in check.fix


def test_without_areal_the_check_is_skipped_with_where_to_run_it():
    check = check_areal_version(lambda: None)
    assert check.status == "skip"
    assert "not installed in this Python" in check.detail and "where the trainer runs" in check.fix


def test_a_source_checkout_without_metadata_warns():
    check = check_areal_version(lambda: "")
    assert check.status == "warn" and "version is unknown" in check.detail


def test_the_installed_version_comes_from_the_package_metadata(monkeypatch):
    from importlib import metadata

    def version(name: str) -> str:
        assert name == "areal"
        return "2.0.0"

    monkeypatch.setattr(metadata, "version", version)
    assert installed_areal() == "2.0.0"


def test_no_distribution_and_no_module_is_none(monkeypatch):
    import importlib.util
    from importlib import metadata

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert installed_areal() is None
