"""`make release`'s artifacts, built from the work tree and checked before anything is pushed.

- the wheel and the sdist (`python -m build` in a copy of the project, so the build leaves nothing in the checkout;
  `twine check --strict`): the chart and rbac/ inside, no test infrastructure, the version of `_version.py`;
- the packaged chart (`helm package`): `helm lint --strict` of the archive and `kubeconform -strict` of its render of
  every example values file;
- the reaper image (distkit/images.py), built from that wheel, as a docker-archive tar.

Each check returns the problems it found, [] when there are none; `check` raises them together.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path, PurePosixPath

import yaml

from distkit import images
from distkit.kubeconform import kubeconform
from localkube.settings import ClusterError
from repo_paths import REPO, TOOLS_BIN

CHART = REPO / "charts" / "areal-workers"
CHANGELOG = REPO / "CHANGELOG.md"
EXAMPLE_VALUES = sorted((REPO / "examples").glob("values-*.yaml"))
# What a source copy holds: what pyproject.toml packages, and the files its metadata names.
SOURCE_PARTS = ("pyproject.toml", "README.md", "CHANGELOG.md", "adapter", "charts", "rbac")
# Modules of the stand-in worker server and the test engines (tools/localworker; earlier, areal_workers_testing in
# tests/support): never in an artifact, under any directory.
TEST_ONLY_MODULES = frozenset(
    {"localworker", "areal_workers_testing", "reference_guard", "testing_engines", "areal_engines"}
)
# Directories of the chart that .helmignore keeps out of the chart a user installs.
CHART_DEV_DIRS = ("ci", "tests")


class ReleaseError(ClusterError):
    """An artifact failed a check, or a tool that builds one failed: the message lists every problem."""


def release_version() -> str:
    from areal_workers import __version__

    return __version__


def run(
    argv: list[str], what: str, *, env: dict[str, str] | None = None, stdin: str | None = None
) -> subprocess.CompletedProcess:
    """`argv`'s completed process; ReleaseError with its output when it fails."""
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=900, env=env)
    if result.returncode != 0:
        raise ReleaseError(
            f"{what} failed (exit {result.returncode}): {' '.join(argv)}\n{result.stdout}{result.stderr}"
        )
    return result


def version_problems(version: str, chart_yaml: dict, changelog: str) -> list[str]:
    problems = []
    if chart_yaml.get("version") != version:
        problems.append(
            f"charts/areal-workers/Chart.yaml has version {chart_yaml.get('version')}, the package {version}: "
            "set the chart's version to the package's (adapter/areal_workers/_version.py)"
        )
    if not re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog, re.MULTILINE):
        problems.append(f"CHANGELOG.md has no '## [{version}] - YYYY-MM-DD' entry: describe the release there")
    return problems


def chart_files() -> set[str]:
    """The chart's files as a user installs them (relative paths), without the directories .helmignore drops."""
    return {
        path.relative_to(CHART).as_posix()
        for path in CHART.rglob("*")
        if path.is_file() and path.relative_to(CHART).parts[0] not in CHART_DEV_DIRS
    }


def _test_only(name: str) -> bool:
    parts = PurePosixPath(name).parts
    return bool(TEST_ONLY_MODULES & {PurePosixPath(part).stem for part in parts}) or parts[0] in ("tests", "tools")


def wheel_problems(names: list[str], version: str) -> list[str]:
    problems = []
    missing = sorted(
        f"areal_workers/chart/{file}" for file in chart_files() if f"areal_workers/chart/{file}" not in names
    )
    if missing:
        problems.append(f"the wheel lacks chart files: {', '.join(missing)}")
    if "areal_workers/rbac/role.yaml" not in names:
        problems.append("the wheel lacks areal_workers/rbac/role.yaml (the doctor's permission check reads it)")
    if leaked := sorted(name for name in names if _test_only(name)):
        problems.append(f"the wheel ships test infrastructure: {', '.join(leaked)}")
    if f"areal_workers-{version}.dist-info/METADATA" not in names:
        problems.append(f"the wheel's metadata is not of version {version}")
    return problems


def sdist_problems(names: list[str], version: str) -> list[str]:
    root = f"areal_workers-{version}"
    problems = []
    if stray := sorted(name for name in names if name != root and not name.startswith(f"{root}/")):
        problems.append(f"the sdist has files outside {root}/: {', '.join(stray)}")
    inside = [name.removeprefix(f"{root}/") for name in names if name != root]
    chart = "adapter/areal_workers/chart"  # the package's link to charts/areal-workers, as files
    missing = sorted(f"{chart}/{file}" for file in chart_files() if f"{chart}/{file}" not in inside)
    if missing:
        problems.append(f"the sdist lacks chart files: {', '.join(missing)}")
    if leaked := sorted(name for name in inside if _test_only(name)):
        problems.append(f"the sdist ships test infrastructure: {', '.join(leaked)}")
    return problems


def source_copy(dest: Path) -> Path:
    """The project's packaged parts copied to `dest` (symlinks kept: the package's chart and rbac/ are links)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")
    dest.mkdir(parents=True, exist_ok=True)
    for name in SOURCE_PARTS:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, dest / name, symlinks=True, ignore=ignore)
        else:
            shutil.copy2(source, dest / name)
    return dest


def build_python(out: Path) -> tuple[Path, Path]:
    """The wheel and the sdist of the work tree, in `out`; the wheel is built from the sdist, as pip builds it."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        source = source_copy(Path(tmp) / "src")
        # No isolation: [build-system].requires is in the virtualenv at the pinned versions (dev-constraints.txt).
        run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)], "python -m build")
    version = release_version()
    return out / f"areal_workers-{version}-py3-none-any.whl", out / f"areal_workers-{version}.tar.gz"


def package_chart(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    run([str(TOOLS_BIN / "helm"), "package", str(CHART), "--destination", str(out)], "helm package")
    return out / f"areal-workers-{release_version()}.tgz"


def chart_problems(archive: Path) -> list[str]:
    helm = str(TOOLS_BIN / "helm")
    problems = []
    shown = yaml.safe_load(run([helm, "show", "chart", str(archive)], "helm show chart").stdout)
    if shown.get("version") != release_version():
        problems.append(f"{archive.name} has version {shown.get('version')}, not {release_version()}")
    with tarfile.open(archive) as tar:
        packaged = {name.removeprefix("areal-workers/") for name in tar.getnames() if not name.endswith("/")}
    if dev := sorted(name for name in packaged if name.split("/")[0] in CHART_DEV_DIRS):
        problems.append(f"{archive.name} ships the chart's test files: {', '.join(dev)} (.helmignore)")
    for values in EXAMPLE_VALUES:
        lint = subprocess.run(
            [helm, "lint", "--strict", str(archive), "-f", str(values)], capture_output=True, text=True, timeout=300
        )
        if lint.returncode != 0:
            problems.append(f"helm lint --strict {archive.name} -f {values.name}:\n{lint.stdout}{lint.stderr}")
            continue
        manifests = run([helm, "template", "release", str(archive), "-f", str(values)], "helm template").stdout
        with tempfile.TemporaryDirectory() as schemas:
            result = kubeconform(manifests, Path(schemas), "-output", "text")
        if result.returncode != 0:
            problems.append(f"kubeconform -strict of {archive.name} -f {values.name}:\n{result.stdout}{result.stderr}")
    return problems


def twine_problems(*artifacts: Path) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *map(str, artifacts)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    return [] if result.returncode == 0 else [f"twine check --strict:\n{result.stdout}{result.stderr}"]


def build(out: Path) -> list[Path]:
    """Every artifact of the release in `out`, checked; raises ReleaseError with every problem found."""
    version = release_version()
    problems = version_problems(version, yaml.safe_load((CHART / "Chart.yaml").read_text()), CHANGELOG.read_text())
    if problems:
        raise ReleaseError("the versions disagree:\n- " + "\n- ".join(problems))
    wheel, sdist = build_python(out)
    chart = package_chart(out)
    with zipfile.ZipFile(wheel) as archive:
        problems += wheel_problems(archive.namelist(), version)
    with tarfile.open(sdist) as archive:
        problems += sdist_problems(archive.getnames(), version)
    problems += twine_problems(wheel, sdist)
    problems += chart_problems(chart)
    reaper = images.build_reaper(wheel, out, version)
    problems += images.check_reaper(reaper, version)
    if problems:
        raise ReleaseError(f"release {version} is not ready:\n- " + "\n- ".join(problems))
    return [wheel, sdist, chart, reaper]
