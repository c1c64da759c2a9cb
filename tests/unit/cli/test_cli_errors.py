"""How the areal-workers command ends when its surroundings fail: no helm to run, a reader that closed stdout."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_PIPE, EXIT_USAGE


@pytest.fixture
def no_helm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No helm on PATH nor beside the interpreter; a kubeconfig whose cluster nothing here may reach."""
    for name in ("path", "venv/bin"):
        (tmp_path / name).mkdir(parents=True)
    monkeypatch.setenv("PATH", str(tmp_path / "path"))
    monkeypatch.setattr(sys, "executable", str(tmp_path / "venv" / "bin" / "python"))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "x",
                "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:9"}}],
                "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
                "users": [{"name": "x", "user": {}}],
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({"experiment": "e", "trial": "t", "jobs": [{"role": "actor"}]}))
    return job


@pytest.mark.parametrize(
    "argv",
    [
        ["render", "-f", "JOB"],
        ["up", "-f", "JOB"],
        ["history", "--release", "r"],
        ["rollback", "--release", "r"],
        ["down", "--release", "r", "--yes"],
    ],
)
def test_a_missing_helm_is_one_line_and_exit_2(no_helm, capsys, argv):
    assert main([str(no_helm) if arg == "JOB" else arg for arg in argv]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.startswith("error: helm not found: no executable 'helm' on PATH") and err.count("\n") == 1, err
    assert "install helm 3.x or 4.x" in err and "AREAL_K8S_HELM_EXECUTABLE" in err


def closed_stdout(code: str) -> subprocess.CompletedProcess:
    """Runs `code` with a stdout whose reader is already gone, as `areal-workers ... | head -1` leaves it."""
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            [sys.executable, "-c", code],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env={**os.environ, "KUBECONFIG": os.devnull},
        )
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "code",
    [
        "from areal_workers.cli.main import main; raise SystemExit(main(['completion', 'bash']))",
        # status printing more than a pipe holds (the cluster replaced by its output)
        "from areal_workers.cli import main\nfrom areal_workers.cli.commands import workers\n"
        "workers.status = lambda *args: print('actor/0  yes\\n' * 20000) or 0\n"
        "raise SystemExit(main.main(['status']))",
    ],
)
def test_a_closed_stdout_ends_quietly_with_141(code):
    done = closed_stdout(code)
    assert (done.returncode, done.stderr) == (EXIT_PIPE, "")


def test_a_recorded_revision_refused_below_the_command_ends_it_with_the_usage_code(monkeypatch, capsys):
    """A check of Releases (a pending release's recovery, a record forged after the command's own check) reaches
    main as UntrustedRevisionError: nothing was done, as for the command's own refusals."""
    from areal_workers.cli import main as cli_main
    from areal_workers.release.ownership import UntrustedRevisionError

    def refused(args, parser):
        raise UntrustedRevisionError("revision 3 of release aw-x in namespace rl holds ClusterRoleBinding x")

    monkeypatch.setattr(cli_main, "dispatch", refused)
    assert main(["-n", "rl", "down", "--yes"]) == EXIT_USAGE
    assert "error: revision 3 of release aw-x in namespace rl holds ClusterRoleBinding x" in capsys.readouterr().err
