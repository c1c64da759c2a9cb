"""`make tools` installs the Debian packages the README's commands need (tools.sh's system_packages step), so that a
newcomer's `make test` or `make demo` does not stop at a missing redis-server: run on a PATH that has none of them,
with an apt-get stand-in that records what it is asked and "installs" a stub of each package's command. redis-server
serves only Argo CD, so it is asked for only when Argo CD is among the tools (`make test`, not `make demo`). An `id`
stand-in gives the user id tools.sh sees, so the tests run as any user, root or not."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from repo_paths import REPO

COMMANDS = ("dirname", "mkdir", "tail", "cat", "chmod", "sha256sum", "cut", "ln", "cp", "basename")
# (what tools.sh and the stand-ins run)
FAKE_ID = """#!/bin/bash
[ "$*" = -u ] || { echo "id stand-in: unexpected arguments: $*" >&2; exit 2; }
echo "$FAKE_UID"
"""
FAKE_APT = """#!/bin/bash
echo "$*" >>"$APT_LOG"
[ "$1" = install ] || exit 0
for package in "$@"; do
  case $package in -*|install) ;; *) printf '#!/bin/bash\\n' >"$STUB_DIR/$package"; chmod +x "$STUB_DIR/$package";; esac
  [ "$package" != containernetworking-plugins ] || {
    mkdir -p "$AREAL_WORKERS_CNI_DIR" && cp "$STUB_DIR/$package" "$AREAL_WORKERS_CNI_DIR/bridge"; }
done
"""


def sandbox(tmp_path: Path, with_apt: bool = True, uid: int = 0) -> tuple[Path, dict[str, str]]:
    root = tmp_path / "repo"
    shutil.copytree(REPO / "tools" / "install", root / "tools" / "install")
    path = tmp_path / "bin"
    path.mkdir()
    for command in COMMANDS:
        (path / command).symlink_to(shutil.which(command))
    (path / "id").write_text(FAKE_ID)
    (path / "id").chmod(0o755)
    if with_apt:
        (path / "apt-get").write_text(FAKE_APT)
        (path / "apt-get").chmod(0o755)
    env = {
        "PATH": str(path),
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "AREAL_WORKERS_CACHE": str(tmp_path / "cache"),
        "APT_LOG": str(tmp_path / "apt.log"),
        "STUB_DIR": str(path),
        "AREAL_WORKERS_CNI_DIR": str(tmp_path / "cni"),  # the plugins are files there, not commands on PATH
        "FAKE_UID": str(uid),
    }
    return root, env


def cached_argocd(root: Path, env: dict[str, str]) -> None:
    """Argo CD as a cache hit (a stub binary and the files tools.sh copies beside it): selecting it builds nothing."""
    versions = (root / "tools" / "install" / "versions.env").read_text()
    version = next(line.split("=", 1)[1] for line in versions.splitlines() if line.startswith("ARGOCD_VERSION="))
    main = (root / "tools" / "install" / "argocd_main.go.txt").read_bytes()
    cached = Path(env["AREAL_WORKERS_CACHE"]) / "tools" / f"argocd-{version}-{hashlib.sha256(main).hexdigest()[:8]}"
    cached.mkdir(parents=True)
    for name in ("argocd", "application-crd.yaml", "appproject-crd.yaml", "git-verify-wrapper.sh", "gpg-wrapper.sh"):
        (cached / name).write_text("#!/bin/bash\n")
        (cached / name).chmod(0o755)


def system_packages(root: Path, env: dict[str, str], *also: str) -> subprocess.CompletedProcess:
    script = root / "tools" / "install" / "tools.sh"
    return subprocess.run(
        [shutil.which("bash"), str(script), "system_packages", *also],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_missing_packages_are_installed_and_a_second_run_installs_nothing(tmp_path):
    root, env = sandbox(tmp_path)
    cached_argocd(root, env)
    first = system_packages(root, env, "argocd")
    assert first.returncode == 0, first.stderr
    calls = Path(env["APT_LOG"]).read_text().splitlines()
    assert calls[0] == "update -qq"
    assert calls[1].startswith("install -y -qq --no-install-recommends openssl unzip redis-server ")
    requested = set(calls[1].split())
    assert {"containerd", "runc", "debootstrap", "iptables"} <= requested  # the real node's
    second = system_packages(root, env, "argocd")
    assert second.returncode == 0 and "installed" in second.stdout, second.stderr
    assert len(Path(env["APT_LOG"]).read_text().splitlines()) == 2  # nothing asked of apt-get again


def test_without_apt_get_the_missing_packages_are_named(tmp_path):
    root, env = sandbox(tmp_path, with_apt=False)
    result = system_packages(root, env)
    assert result.returncode == 1
    assert "openssl unzip missing and this is not a root Debian shell" in result.stderr, result.stderr


def test_a_user_who_is_not_root_is_told_what_to_install_and_apt_get_is_not_run(tmp_path):
    root, env = sandbox(tmp_path, uid=1000)
    result = system_packages(root, env)
    assert result.returncode == 1
    assert "openssl unzip missing and this is not a root Debian shell" in result.stderr, result.stderr
    assert not Path(env["APT_LOG"]).exists()


def test_the_demos_tools_do_not_ask_for_argo_cds_redis(tmp_path):
    root, env = sandbox(tmp_path)
    assert system_packages(root, env).returncode == 0
    [_, install] = Path(env["APT_LOG"]).read_text().splitlines()
    assert install.startswith("install -y -qq --no-install-recommends openssl unzip containerd ")
    assert "redis-server" not in install
