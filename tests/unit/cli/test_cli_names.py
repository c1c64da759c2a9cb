"""Which trial `areal-workers render` and `up` act on when a job file and the command line both name one: the
names must agree (exit 2 naming both values otherwise), and a flag fills in what the file leaves out."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from areal_workers.cli.commands import up
from areal_workers.cli.commands.render import trial_names
from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_USAGE, CliError

JOB = {"experiment": "gsm8k", "trial": "run-7", "jobs": [{"role": "actor", "replicas": 1}]}


@pytest.fixture
def job_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    unreachable = tmp_path / "kubeconfig"  # nothing here may reach a cluster
    unreachable.write_text(
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
    monkeypatch.setenv("KUBECONFIG", str(unreachable))
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(JOB))
    return path


@pytest.mark.parametrize("command", ["render", "up"])
@pytest.mark.parametrize(("flag", "value", "files"), [("--trial", "run-8", "run-7"), ("--experiment", "math", "gsm8k")])
def test_a_flag_naming_another_trial_than_the_job_file_is_refused_with_both_values(
    job_file, capsys, command, flag, value, files
):
    assert main([command, "-f", str(job_file), flag, value]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"{flag} {value} conflicts with {flag[2:]} {files} in {job_file}" in err and f"drop {flag}" in err


def test_flags_fill_in_the_names_a_job_file_leaves_out_and_may_repeat_the_ones_it_gives():
    assert trial_names({"experiment": "e"}, None, "t", "job.yaml") == {"experiment": "e", "trial": "t"}
    assert trial_names({"experiment": "e", "trial": "t"}, "e", "t", "job.yaml") == {"experiment": "e", "trial": "t"}
    assert trial_names({}, "e", None, "job.yaml") == {"experiment": "e"}
    with pytest.raises(CliError) as refused:
        trial_names({"trial": "run-7"}, None, "run-8", "job.yaml")
    assert refused.value.exit_code == EXIT_USAGE and "run-7" in str(refused.value) and "run-8" in str(refused.value)


def test_up_creates_the_release_release_names(job_file, tmp_path, monkeypatch):
    helm = tmp_path / "bin" / "helm"  # up checks for helm before it starts the scheduler
    helm.parent.mkdir()
    helm.write_text("#!/bin/sh\nprintf v3.19.0\n")
    helm.chmod(0o755)
    monkeypatch.setenv("PATH", str(helm.parent))
    seen = {}

    class Stop(Exception):
        pass

    def scheduler(config, experiment_name, trial_name):
        seen.update(release=config.release_name, experiment=experiment_name, trial=trial_name)
        raise Stop

    monkeypatch.setattr(up, "KubernetesScheduler", scheduler)
    with pytest.raises(Stop):
        main(["up", "-f", str(job_file), "--release", "aw-mine", "--trial", "run-7"])
    assert seen == {"release": "aw-mine", "experiment": "gsm8k", "trial": "run-7"}


@pytest.mark.parametrize("release", ["1abc", "a.b"])
def test_a_release_name_no_release_of_the_chart_can_have_is_refused_before_the_cluster_is_asked(
    release, capsys, monkeypatch
):
    def no_cluster(*args, **kwargs):
        raise AssertionError("the cluster was contacted")

    monkeypatch.setattr("areal_workers.cli.session.backend.kube_client", no_cluster)
    assert main(["down", "--release", release, "--yes"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"--release: release name {release!r} must be a DNS-1035 label" in err


RULE = (
    "must be lowercase letters, digits, '-' or '_', start with a letter and end with a letter or digit (e.g. 'actor')"
)


@pytest.mark.parametrize("command", ["render", "up"])
def test_a_role_name_the_chart_refuses_is_named_with_the_rule_before_helm_runs(job_file, tmp_path, capsys, command):
    """`Actor` reached helm, whose schema error said only "at '': invalid propertyName" and a raw pattern."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"roles": {"Actor": {"replicas": 1}}}))
    assert main([command, "-f", str(job_file), "--values", str(values)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert f"values file {values}: roles.Actor: role 'Actor' {RULE}" in err and "propertyName" not in err

    job_file.write_text(yaml.safe_dump({**JOB, "jobs": [{"role": "Actor", "replicas": 1}]}))
    assert main([command, "-f", str(job_file)]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == f"error: {job_file}: jobs[0]: role 'Actor' {RULE}"


def test_up_capacity_check_is_a_flag_over_the_variable_the_advice_names(monkeypatch, capsys):
    """The refusal "No node can hold a worker" names capacity_check; up had no way to set it but the variable."""
    from areal_workers.cli import main as cli_main

    monkeypatch.setenv("AREAL_K8S_CAPACITY_CHECK", "off")
    parse = cli_main.build_parser().parse_args
    assert cli_main._session(parse(["up", "-f", "job.yaml", "--capacity-check", "warn"])).config.capacity_check == (
        "warn"
    )
    assert cli_main._session(parse(["up", "-f", "job.yaml"])).config.capacity_check == "off"
    with pytest.raises(SystemExit) as refused:
        parse(["up", "-f", "job.yaml", "--capacity-check", "strict"])
    assert refused.value.code == EXIT_USAGE and "choose from 'reject', 'warn', 'off'" in capsys.readouterr().err
