"""`areal-workers render` on the chart with helm and no cluster: every --show checks the values against the chart's
schema, values files alone render the roles they hold (or say they hold none), and a helm beside the interpreter
(a virtualenv's bin, where `make tools` links it) is found without PATH."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from areal_workers.cli.doctor import chart
from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_OK, EXIT_USAGE
from areal_workers.config import KubernetesSchedulerConfig
from chartlib import HELM, REPO

JOB = {"experiment": "gsm8k", "trial": "t1", "jobs": [{"role": "actor", "replicas": 2}]}


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    """areal-workers in this process with the tests' helm on PATH and no cluster; returns (exit code, out, err)."""
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "helm").symlink_to(HELM)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("KUBECONFIG", os.devnull)

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def write(tmp_path: Path, name: str, data: dict) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("show", ["values", "all", "manifests"])
def test_every_show_refuses_values_the_schema_rejects(cli, tmp_path, show):
    job = write(tmp_path, "job.yaml", JOB)
    bad = write(tmp_path, "bad.yaml", {"workerDefaults": {"terminationGracePeriodSeconds": -1}})
    code, out, err = cli("render", "-f", job, "--values", bad, "--show", show)
    assert code == EXIT_USAGE and "terminationGracePeriodSeconds" in err and out == ""


def test_show_values_prints_only_the_values(cli, tmp_path):
    code, out, _ = cli("render", "-f", write(tmp_path, "job.yaml", JOB), "--show", "values")
    assert code == EXIT_OK and "kind:" not in out and yaml.safe_load(out)["roles"]["actor"]["replicas"] == 2


def test_values_files_alone_render_their_roles_under_their_trial(cli):
    code, out, err = cli("render", "--values", str(REPO / "examples" / "values-example.yaml"), "-o", "json")
    assert code == EXIT_OK, err
    rendered = json.loads(out)
    assert rendered["release"].startswith("aw-quickstart-trial0-")
    assert sorted(
        m["metadata"]["name"].rsplit("-", 1)[-1] for m in rendered["manifests"] if m["kind"] == "StatefulSet"
    ) == ["actor", "rollout"]


def test_values_files_without_roles_say_so(cli, tmp_path):
    empty = write(tmp_path, "platform.yaml", {"image": {"repository": "registry.example.com/areal"}})
    code, out, err = cli("render", "--values", empty)
    assert code == EXIT_USAGE and out == ""
    assert f"{empty}: no roles" in err and "-f" in err
    code, _, err = cli("render")
    assert code == EXIT_USAGE and "nothing to render" in err


def test_an_unreadable_values_file_is_a_usage_error_naming_it(cli, tmp_path):
    job = write(tmp_path, "job.yaml", JOB)
    for name, text in (("missing.yaml", None), ("list.yaml", "- a\n"), ("broken.yaml", "a: [\n")):
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        code, _, err = cli("render", "-f", job, "--values", str(path))
        assert code == EXIT_USAGE and name in err and "Traceback" not in err, err


def test_render_and_doctor_find_a_helm_beside_the_interpreter_off_path(cli, tmp_path, monkeypatch):
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "helm").symlink_to(HELM)
    monkeypatch.setattr(sys, "executable", str(venv / "python"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    code, out, err = cli("render", "-f", write(tmp_path, "job.yaml", JOB), "--show", "manifests")
    assert code == EXIT_OK and "kind: StatefulSet" in out, err
    check, _ = chart.render_chart(KubernetesSchedulerConfig(), 0, 1)
    assert check.status == "pass", check
