"""images/*/Dockerfile, the recipes a user builds with their own builder, agree with what the chart and the release
assume: AReaL's runtime image at the chart's appVersion, helm at the version the tests run, uid 1000, the wheel
`make release` builds and the constraints the local reaper image is installed with."""

from __future__ import annotations

import re

import pytest
import yaml

from distkit.images import REAPER_USER
from realnode.images import CONSTRAINTS, REAPER_LAUNCHER
from repo_paths import REPO

IMAGES = REPO / "images"
CHART = REPO / "charts" / "areal-workers"


def dockerfile(name: str) -> str:
    return (IMAGES / name / "Dockerfile").read_text()


def args(text: str) -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", text, re.M))


def versions_env() -> dict[str, str]:
    lines = (REPO / "tools" / "install" / "versions.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line and not line.startswith("#"))


@pytest.mark.parametrize("name", ["worker", "trainer"])
def test_the_areal_images_start_from_the_runtime_image_of_the_charts_app_version(name):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    repository = yaml.safe_load((CHART / "values.yaml").read_text())["image"]["repository"]
    assert args(dockerfile(name))["AREAL_IMAGE"] == f"{repository}:v{chart['appVersion']}"


@pytest.mark.parametrize("name", ["trainer", "reaper"])
def test_helm_is_the_version_the_tests_run_and_the_wheel_is_the_releases(name):
    text = dockerfile(name)
    assert args(text)["HELM_IMAGE"] == f"alpine/helm:{versions_env()['HELM3_VERSION'].removeprefix('v')}"
    assert "COPY --from=helm /usr/bin/helm /usr/local/bin/helm" in text
    assert re.search(r"pip install .*areal_workers-\*\.whl", text)


@pytest.mark.parametrize("name", ["worker", "trainer", "reaper"])
def test_every_image_runs_as_the_charts_uid(name):
    pod = yaml.safe_load((CHART / "values.yaml").read_text())["workerDefaults"]["podSecurityContext"]
    users = re.findall(r"^USER (\S+)$", dockerfile(name), re.M)
    assert users == [f"{pod['runAsUser']}:{pod['runAsGroup']}"] == [REAPER_USER]


def test_the_reaper_recipe_installs_with_the_constraints_of_the_local_build():
    text = dockerfile("reaper")
    assert f"COPY areal_workers-*.whl {CONSTRAINTS.name} /tmp/wheels/" in text
    assert f"-c /tmp/wheels/{CONSTRAINTS.name}" in text
    assert 'CMD ["areal-workers", "reap"]' in text
    assert "from areal_workers.cli.main import main" in REAPER_LAUNCHER  # the local build's areal-workers command


def test_the_recipes_pages_name_every_recipe():
    for page in (REPO / "docs" / "en" / "images.md", REPO / "docs" / "zh" / "images.md"):
        text = page.read_text()
        assert all(f"images/{name}/Dockerfile" in text for name in ("worker", "trainer", "reaper")), page
