import json
import os
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path, PurePosixPath

import pytest

from distkit.artifacts import source_copy
from repo_paths import REPO

# The stand-in worker server and the test engines (tools/localworker, earlier tests/support/areal_workers_testing;
# reference_guard and testing_engines were modules of areal_workers before they moved there).
TEST_ONLY_MODULES = {"localworker", "areal_workers_testing", "reference_guard", "testing_engines", "areal_engines"}
CHART_FILES = [
    "Chart.yaml",
    "values.yaml",
    "values.schema.json",
    ".helmignore",
    "templates/_helpers.tpl",
    "templates/statefulset.yaml",
    "templates/tests/test-health.yaml",
    "templates/NOTES.txt",
]


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}


def _build_requirements_installed() -> bool:
    """True when this interpreter already satisfies [build-system].requires (then no isolated build is needed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        from packaging.requirements import Requirement
    except ImportError:  # pip vendors it
        from pip._vendor.packaging.requirements import Requirement

    requires = tomllib.loads((REPO / "pyproject.toml").read_text())["build-system"]["requires"]
    for text in requires:
        requirement = Requirement(text)
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            return False
        if installed not in requirement.specifier:
            return False
    return True


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """A wheel built from a copy of the project (so the build leaves nothing in the work tree)."""
    root = tmp_path_factory.mktemp("packaging")
    source = source_copy(root / "src")
    assert (source / "adapter" / "areal_workers" / "chart").is_symlink()
    assert (source / "adapter" / "areal_workers" / "rbac").is_symlink()
    out = root / "dist"
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)]
    if _build_requirements_installed():
        command.insert(command.index("--no-deps"), "--no-build-isolation")
    process = subprocess.run(command, env=_env(), capture_output=True, text=True, timeout=300, cwd=str(root))
    assert process.returncode == 0, f"{command}\n{process.stdout}\n{process.stderr}"
    wheels = list(out.glob("areal_workers-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


def test_wheel_contains_the_chart(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [f"areal_workers/chart/{name}" for name in CHART_FILES if f"areal_workers/chart/{name}" not in names]
    assert not missing, missing


def test_wheel_contains_every_chart_file_with_the_same_content(wheel):
    chart = REPO / "charts" / "areal-workers"
    # ci/ holds chart-testing's install values and tests/ the helm-unittest suites: listed in .helmignore, not part
    # of the chart a user installs.
    expected = {
        path.relative_to(chart).as_posix()
        for path in chart.rglob("*")
        if path.is_file() and path.relative_to(chart).parts[0] not in ("ci", "tests")
    }
    with zipfile.ZipFile(wheel) as archive:
        packaged = {
            name.removeprefix("areal_workers/chart/")
            for name in archive.namelist()
            if name.startswith("areal_workers/chart/")
        }
        assert packaged == expected
        for name in CHART_FILES:
            assert archive.read(f"areal_workers/chart/{name}") == (chart / name).read_bytes(), name


def test_wheel_contains_the_controller_rbac_manifests(wheel):
    """rbac/*.yaml and rbac/cluster/*.yaml as areal_workers/rbac/ (the doctor's permission check reads the Role
    there), nothing else of rbac/."""
    with zipfile.ZipFile(wheel) as archive:
        packaged = {
            name.removeprefix("areal_workers/rbac/"): archive.read(name)
            for name in archive.namelist()
            if name.startswith("areal_workers/rbac/")
        }
    rbac = REPO / "rbac"
    expected = {path.relative_to(rbac).as_posix(): path.read_bytes() for path in sorted(rbac.glob("*.yaml"))}
    expected |= {path.relative_to(rbac).as_posix(): path.read_bytes() for path in sorted(rbac.glob("cluster/*.yaml"))}
    assert "role.yaml" in expected and "cluster/admission-policy.yaml" in expected
    assert packaged == expected


def test_wheel_contains_the_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    package = REPO / "adapter" / "areal_workers"
    modules = [module.relative_to(package).as_posix() for module in package.rglob("*.py")]
    assert "orchestration/driver.py" in modules  # the subpackages too
    missing = [module for module in modules if f"areal_workers/{module}" not in names]
    assert not missing, missing
    assert "areal_workers/py.typed" in names
    assert not any(name.startswith(("tests/", "charts/", "adapter/")) for name in names)


def test_wheel_ships_no_test_infrastructure(wheel):
    """Only areal_workers and the wheel's metadata: no module of the stand-in guard or the test engines, and no
    file of tests/ under any name."""
    with zipfile.ZipFile(wheel) as archive:
        contents = {name: archive.read(name) for name in archive.namelist() if not name.endswith("/")}
    top_level = {PurePosixPath(name).parts[0] for name in contents}
    assert {part for part in top_level if not part.endswith(".dist-info")} == {"areal_workers"}, sorted(top_level)
    named = [
        name
        for name in contents
        if TEST_ONLY_MODULES & {PurePosixPath(part).stem for part in PurePosixPath(name).parts}
    ]
    assert not named, named
    test_files = {
        path.read_bytes(): path.relative_to(REPO)
        for path in (REPO / "tests").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    copied = [f"{name}: {test_files[data]}" for name, data in contents.items() if data.strip() and data in test_files]
    assert not copied, copied


def test_installed_wheel_uses_its_bundled_chart_and_role(wheel, tmp_path):
    """Installed into a fresh venv (without dependencies; they come from this venv, after the wheel on sys.path),
    areal_workers.config.BUNDLED_CHART is the chart inside that venv's site-packages, and the doctor reads the
    controller Role from there too."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120, env=_env())
    python = venv / "bin" / "python"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
            env=_env(),
        ).stdout.strip()
    )
    # This venv's dependencies (kubernetes, pyhelm3, ...) go after the fresh site-packages. A .pth line only
    # appends a path: the editable install's own .pth in that directory is not processed.
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = subprocess.run(
        [
            str(python),
            "-c",
            (
                "import json, areal_workers, areal_workers.config as c, areal_workers.cli.doctor as d\n"
                "print(json.dumps({'package': areal_workers.__file__, 'chart': str(c.BUNDLED_CHART),"
                " 'default': c.KubernetesSchedulerConfig().chart, 'role': str(d.ROLE_FILE),"
                " 'accesses': len(d.role_accesses(d.ROLE_FILE.read_text())[1])}))"
            ),
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert probe.returncode == 0, probe.stderr
    result = json.loads(probe.stdout.strip().splitlines()[-1])
    site = site.resolve()
    package = Path(result["package"]).resolve()
    chart = Path(result["chart"])
    assert package.is_relative_to(site), (package, site)
    assert chart.resolve().is_relative_to(site), (chart, site)
    assert chart.is_dir() and not chart.is_symlink()
    assert (chart / "Chart.yaml").is_file()
    assert (chart / "templates" / "statefulset.yaml").is_file()
    assert result["default"] == str(chart)
    assert (chart / "Chart.yaml").read_bytes() == (REPO / "charts" / "areal-workers" / "Chart.yaml").read_bytes()
    role = Path(result["role"])
    assert role.resolve().is_relative_to(site), (role, site)
    assert role.read_bytes() == (REPO / "rbac" / "role.yaml").read_bytes()
    assert result["accesses"] > 0
