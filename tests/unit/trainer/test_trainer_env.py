"""The trainer's environment from Secrets and ConfigMaps: a submit file's `env` value is a string or a
`{secretKeyRef: ...}` / `{configMapKeyRef: ...}` mapping, `--env-from-secret NAME=SECRET:KEY` and
`--env-from-configmap NAME=CONFIGMAP:KEY` add such entries on the command line, and the Job then carries a
`valueFrom`, never the value. Bad entries are refused with what to write instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_OK
from areal_workers.errors import InputError
from areal_workers.trainer.env import env_references
from areal_workers.trainer.job import load_spec, trainer_job


def written(tmp_path: Path, env: object) -> Path:
    path = tmp_path / "trainer.yaml"
    path.write_text(yaml.safe_dump({"image": "reg/areal:1", "env": env}))
    return path


def job_env(spec_file: Path, overrides: dict | None = None) -> dict[str, dict]:
    job = trainer_job(load_spec(spec_file, overrides or {}), ["python", "train.py"], "rl")
    return {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}


def test_secret_and_configmap_keys_become_value_from_and_literals_stay_literal(tmp_path):
    env = job_env(
        written(
            tmp_path,
            {
                "WANDB_MODE": "offline",
                "WANDB_API_KEY": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
                "HF_TOKEN": {"valueFrom": {"secretKeyRef": {"name": "hf", "key": "token", "optional": True}}},
                "TRACKER_URL": {"configMapKeyRef": {"name": "tracker", "key": "url"}},
            },
        )
    )
    assert env["WANDB_MODE"] == {"name": "WANDB_MODE", "value": "offline"}
    assert env["WANDB_API_KEY"] == {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
    }
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token", "optional": True}},
    }
    assert env["TRACKER_URL"]["valueFrom"] == {"configMapKeyRef": {"name": "tracker", "key": "url"}}


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"secretKeyref": {"name": "a", "key": "b"}}, "env.X: a mapping names one of secretKeyRef, configMapKeyRef"),
        (
            {"secretKeyRef": {"name": "a", "key": "b"}, "configMapKeyRef": {"name": "a", "key": "b"}},
            "env.X: a mapping names one of secretKeyRef, configMapKeyRef",
        ),
        ({"secretKeyRef": {"name": "a"}}, "env.X.secretKeyRef needs name and key"),
        ({"secretKeyRef": {"name": "a", "key": "b", "namespace": "x"}}, "unknown field(s) namespace"),
        ({"secretKeyRef": {"name": "a", "key": "b", "optional": "yes"}}, "optional is true or false"),
        ({"secretKeyRef": {"name": "a", "key": "b/c"}}, "key 'b/c' is not a key of a Secret"),
        ({"secretKeyRef": "wandb"}, "env.X.secretKeyRef needs name and key"),
        (["a", "b"], "env.X is a string or a mapping"),
        (None, "env.X has no value"),
    ],
)
def test_bad_env_entries_are_refused_with_the_form_to_write(tmp_path, value, said):
    with pytest.raises(InputError) as refused:
        load_spec(written(tmp_path, {"X": value}), {})
    assert said in str(refused.value) and str(tmp_path / "trainer.yaml") in str(refused.value)
    assert "X: {secretKeyRef: {name: SECRET, key: KEY}}" in str(refused.value)


def test_env_is_a_mapping_of_names(tmp_path):
    for env in (["WANDB_MODE=offline"], {1: "x"}):
        with pytest.raises(InputError) as refused:
            load_spec(written(tmp_path, env), {})
        assert "env is a mapping of variable names to values" in str(refused.value)


def test_command_line_references_are_parsed_and_checked():
    assert env_references(["TOKEN=hf:token", "K=a.b-c:k_1.x"], ["URL=tracker:url"]) == {
        "TOKEN": {"secretKeyRef": {"name": "hf", "key": "token"}},
        "K": {"secretKeyRef": {"name": "a.b-c", "key": "k_1.x"}},
        "URL": {"configMapKeyRef": {"name": "tracker", "key": "url"}},
    }
    for bad in ("TOKEN", "TOKEN=hf", "=hf:token", "TOKEN=:token", "TOKEN=hf:"):
        with pytest.raises(InputError) as refused:
            env_references([bad], [])
        assert f"--env-from-secret {bad}: " in str(refused.value) and "NAME=SECRET:KEY" in str(refused.value)


def test_command_line_references_override_the_files_entries_of_the_same_name(tmp_path):
    spec_file = written(tmp_path, {"TOKEN": "plain-text", "MODE": "x"})
    env = job_env(spec_file, {"env": env_references(["TOKEN=hf:token"], [])})
    assert env["TOKEN"] == {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert env["MODE"] == {"name": "MODE", "value": "x"}


def test_submit_dry_run_prints_the_reference_never_a_value(tmp_path, capsys):
    spec_file = tmp_path / "trainer.yaml"
    spec_file.write_text(yaml.safe_dump({"image": "reg/areal:1", "network_policy": {"apiserver": ["10.0.0.1:6443"]}}))
    code = main(
        [
            "-n",
            "rl",
            "submit",
            "-f",
            str(spec_file),
            "--dry-run",
            "-o",
            "json",
            "--env-from-secret",
            "WANDB_API_KEY=wandb:api-key",
            "--env-from-configmap",
            "TRACKER_URL=tracker:url",
            "--",
            "python",
            "train.py",
        ]
    )
    assert code == EXIT_OK
    job = json.loads(capsys.readouterr().out)["items"][0]
    env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WANDB_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}
    assert env["TRACKER_URL"]["valueFrom"] == {"configMapKeyRef": {"name": "tracker", "key": "url"}}
