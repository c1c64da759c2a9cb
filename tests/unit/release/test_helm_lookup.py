"""Which helm the adapter runs (release.find_helm): a path as given; a bare name on PATH, else beside the running
interpreter (a virtualenv's bin, where `make tools` links the project's helm next to the console scripts)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.errors import SchedulerError
from areal_workers.release.client import HelmNotFoundError, Releases, find_helm


def executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nprintf v3.19.0\n")  # what `helm version --template` prints
    path.chmod(0o755)
    return path


@pytest.fixture
def venv(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A virtualenv's bin as sys.executable's directory, and a PATH without helm."""
    bin_dir = tmp_path / "venv" / "bin"
    executable(bin_dir / "python")
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    empty = tmp_path / "path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return bin_dir


def test_a_bare_name_not_on_path_is_found_beside_the_interpreter(venv):
    helm = executable(venv / "helm")
    assert find_helm("helm") == str(helm)
    assert Releases(KubernetesSchedulerConfig()).command._executable == str(helm)


def test_path_comes_first(venv, tmp_path, monkeypatch):
    executable(venv / "helm")
    on_path = executable(tmp_path / "path" / "helm")
    assert find_helm("helm") == str(on_path)


def test_a_path_is_taken_as_given_and_not_looked_up_elsewhere(venv, tmp_path):
    executable(venv / "helm")
    given = executable(tmp_path / "opt" / "helm4")
    assert find_helm(str(given)) == str(given)
    with pytest.raises(HelmNotFoundError) as missing:
        find_helm(str(tmp_path / "nowhere" / "helm"))
    assert missing.value.where == f"{tmp_path / 'nowhere' / 'helm'} is not an executable file"


def test_a_missing_helm_says_where_it_was_looked_for_and_what_to_do(venv):
    with pytest.raises(HelmNotFoundError) as missing:
        Releases(KubernetesSchedulerConfig())
    assert str(missing.value) == (
        f"helm not found: no executable 'helm' on PATH or in {venv}; install helm 3.x or 4.x "
        f"(https://helm.sh/docs/intro/install/), or name it with AREAL_K8S_HELM_EXECUTABLE "
        f"(KubernetesSchedulerConfig.helm_executable)"
    )
    assert isinstance(missing.value, SchedulerError) and isinstance(missing.value, ValueError)  # AReaL's kinds
