"""`make release`'s checks as data (tools/distkit/artifacts.py) and the local registry's settings
(tools/localkube/addons/registry.py, the real node's containerd trust). The artifacts themselves are built and
pushed in tests/integration/test_registry_chart.py."""

from __future__ import annotations

from pathlib import Path

from distkit.artifacts import chart_files, sdist_problems, version_problems, wheel_problems
from localkube.addons.registry import address, configuration
from localkube.settings import Ports
from realnode.config import NodePaths, containerd_config, registry_hosts

VERSION = "1.2.3"
CHANGELOG = "# Changelog\n\n## [Unreleased]\n\n## [1.2.3] - 2026-12-03\n\n### Added\n- x\n"


def good_wheel() -> list[str]:
    return [
        *(f"areal_workers/chart/{name}" for name in chart_files()),
        "areal_workers/__init__.py",
        "areal_workers/rbac/role.yaml",
        f"areal_workers-{VERSION}.dist-info/METADATA",
    ]


def test_agreeing_versions_have_no_problem():
    assert version_problems(VERSION, {"version": VERSION}, CHANGELOG) == []


def test_a_chart_of_another_version_and_an_undescribed_release_are_named():
    problems = version_problems(VERSION, {"version": "0.1.0"}, CHANGELOG.replace("1.2.3", "1.2.2"))
    assert len(problems) == 2
    assert "Chart.yaml has version 0.1.0, the package 1.2.3" in problems[0]
    assert "CHANGELOG.md has no '## [1.2.3] - YYYY-MM-DD' entry" in problems[1]


def test_a_complete_wheel_passes():
    assert "Chart.yaml" in chart_files() and not any(name.startswith("tests/") for name in chart_files())
    assert wheel_problems(good_wheel(), VERSION) == []


def test_a_wheel_with_test_infrastructure_or_without_chart_files_is_refused():
    names = [n for n in good_wheel() if n != "areal_workers/chart/Chart.yaml"]
    names += ["localworker/reference_guard.py", "tests/test_x.py"]
    problems = wheel_problems(names, "9.9.9")
    assert any("lacks chart files: areal_workers/chart/Chart.yaml" in p for p in problems)
    assert any("localworker/reference_guard.py" in p and "tests/test_x.py" in p for p in problems)
    assert any("not of version 9.9.9" in p for p in problems)


def test_an_sdist_must_hold_the_chart_under_its_root():
    root = f"areal_workers-{VERSION}"
    names = [root, f"{root}/pyproject.toml", *(f"{root}/adapter/areal_workers/chart/{f}" for f in chart_files())]
    assert sdist_problems(names, VERSION) == []
    problems = sdist_problems([*names[:2], "stray.txt", f"{root}/tools/x.py"], VERSION)
    assert any("outside areal_workers-1.2.3/: stray.txt" in p for p in problems)
    assert any("lacks chart files" in p for p in problems)
    assert any("test infrastructure: tools/x.py" in p for p in problems)


def test_the_registry_listens_on_loopback_with_tls_and_a_password(tmp_path: Path):
    ports = Ports(base=30000)
    config = configuration(tmp_path, tmp_path / "pki", ports)
    assert config["http"]["addr"] == address(ports) == "127.0.0.1:30050"
    assert config["http"]["tls"] == {
        "certificate": str(tmp_path / "pki/registry.crt"),
        "key": str(tmp_path / "pki/registry.key"),
    }
    assert config["auth"]["htpasswd"]["path"] == str(tmp_path / "registry" / "htpasswd")
    assert config["storage"]["filesystem"]["rootdirectory"].startswith(str(tmp_path))


def test_the_real_nodes_containerd_trusts_the_registry_through_the_clusters_ca(tmp_path: Path):
    paths = NodePaths(tmp_path, 30000)
    assert f'config_path = "{paths.registry_hosts}"' in containerd_config(paths, "docker.io/local/pause:dev")
    hosts = registry_hosts("127.0.0.1:30050", tmp_path / "ca.crt")
    assert 'server = "https://127.0.0.1:30050"' in hosts
    assert '[host."https://127.0.0.1:30050"]' in hosts
    assert hosts.count(f'ca = "{tmp_path / "ca.crt"}"') == 2  # the server's own too: tried after a "not found"
    assert "skip_verify" not in hosts
