"""What the installers pin: every package of AReaL's environment by version and sha256 (pip --require-hashes), the
helm/kubectl wheels by sha256, helm-unittest by its go.sum lines, the development virtualenv by exact versions.
tests/integration/test_install_refusals.py shows a wrong pin refused for real."""

from __future__ import annotations

import re
import tomllib

from install.pin_hashes import PIN, normalized, requirement_lines
from repo_paths import REPO

INSTALL = REPO / "tools" / "install"
SHA256 = re.compile(r"--hash=sha256:[0-9a-f]{64}$")


def versions_env() -> dict[str, str]:
    pairs = (line.split("=", 1) for line in (INSTALL / "versions.env").read_text().splitlines() if "=" in line)
    return {key: value for key, value in pairs if not key.startswith("#")}


def test_every_package_of_areals_environment_is_pinned_with_one_sha256():
    text = (INSTALL / "areal-worker-requirements.txt").read_text()
    entries = [line for line in re.sub(r"\\\n\s*", " ", text).splitlines() if line and not line.startswith("#")]
    assert len(entries) > 100
    unpinned = [entry for entry in entries if not (PIN.match(entry) and len(SHA256.findall(entry.split()[-1])) == 1)]
    assert unpinned == [], unpinned
    assert "--require-hashes" in (INSTALL / "areal-worker.sh").read_text()


def test_requirement_lines_join_continuations_and_drop_hashes():
    text = "# c\nareal==1.0.4 \\\n    --hash=sha256:" + "a" * 64 + "\nrich==13.0\n"
    assert requirement_lines(text) == ["# c", "areal==1.0.4", "rich==13.0"]
    assert normalized("Aws_CDK.lambda-layer") == "aws-cdk-lambda-layer"


def test_the_tool_wheels_and_helm_unittest_are_pinned_by_hash():
    pins = versions_env()
    wheels = [key for key in pins if key.endswith("_WHEEL")]
    assert wheels and all(re.fullmatch(r"[0-9a-f]{64}", pins.get(f"{key}_SHA256", "")) for key in wheels), pins
    assert all(pins[key].startswith("h1:") for key in ("HELM_UNITTEST_SUM", "HELM_UNITTEST_GOMOD_SUM"))
    script = (INSTALL / "tools.sh").read_text()
    assert "--require-hashes" in script and "GO_SUMS=" in script


def test_the_development_virtualenv_pins_every_dependency_exactly():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = list(project["dependencies"])
    for extra in ("dev", "demo", "bench"):
        declared += project["optional-dependencies"][extra]
    names = {normalized(re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]) for requirement in declared}
    constraints = (INSTALL / "dev-constraints.txt").read_text().splitlines()
    pinned = {normalized(match.group(1)) for line in constraints if (match := PIN.match(line))}
    assert names - pinned == set(), names - pinned
    assert {"pip", "setuptools", "wheel"} <= pinned
    assert "-c tools/install/dev-constraints.txt" in (REPO / "Makefile").read_text()
