"""The trainer Job `areal-workers submit` creates, as data: the controller identity and label, the settings that
tie the workers to the trainer's pod, and bad submit files refused with what to change."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from areal_workers import KubernetesSchedulerConfig
from areal_workers.cli.session import EXIT_USAGE, CliError
from areal_workers.cli.trainer_job import load_spec, trainer_job
from areal_workers.release.values import base_values
from repo_paths import REPO


def test_the_job_runs_the_command_as_the_controller_with_its_pod_as_the_workers_owner(tmp_path: Path):
    spec_file = tmp_path / "trainer.yaml"
    spec_file.write_text(
        yaml.safe_dump(
            {
                "image": "reg/areal:1",
                "gpu": 1,
                "env": {"WANDB_MODE": "offline"},
                "volumes": [{"name": "data", "emptyDir": {}}],
                "volume_mounts": [{"name": "data", "mountPath": "/data"}],
                "lease_grace_seconds": 120,
            }
        )
    )
    job = trainer_job(load_spec(spec_file, {}), ["python", "/opt/gsm8k_grpo.py", "--config", "c.yaml"], "rl")
    assert job["metadata"] == {"name": "trainer-gsm8k-grpo", "namespace": "rl", "labels": job["metadata"]["labels"]}
    pod = job["spec"]["template"]
    assert pod["metadata"]["labels"]["areal.io/controller"] == "true"  # the chart's NetworkPolicy admits it
    assert pod["spec"]["serviceAccountName"] == "areal-controller" and pod["spec"]["restartPolicy"] == "Never"
    assert job["spec"]["backoffLimit"] == 0
    [container] = pod["spec"]["containers"]
    assert container["command"] == ["python", "-m", "areal_workers.launch", "/opt/gsm8k_grpo.py", "--config", "c.yaml"]
    env = {e["name"]: e.get("value") or e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {
        "AREAL_K8S_NAMESPACE": "metadata.namespace",
        "AREAL_K8S_OWNER_POD": "metadata.name",
        "AREAL_K8S_OWNER_POD_UID": "metadata.uid",
        "AREAL_K8S_LEASE_GRACE_SECONDS": "120",
        "WANDB_MODE": "offline",
    }
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1 and container["volumeMounts"][0]["name"] == "data"
    assert pod["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]


def test_the_trainers_pod_becomes_the_owner_of_its_release():
    config = KubernetesSchedulerConfig(owner_pod="trainer-x-7k2p", owner_pod_uid="uid-1")
    assert base_values(config, "e", "t")["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "trainer-x-7k2p", "uid": "uid-1"}
    ]
    assert "ownerReferences" not in base_values(KubernetesSchedulerConfig(), "e", "t")


@pytest.mark.parametrize(
    ("data", "overrides", "command", "message"),
    [
        ({}, {}, ["python", "t.py"], "needs an image"),
        ({"image": "x", "gpus": 1}, {}, ["python", "t.py"], "unknown field(s) gpus"),
        ({"image": "x"}, {}, [], "nothing to run"),
        ({"image": "x"}, {"name": "Trainer_1"}, ["python", "t.py"], "must be a DNS label"),
        ({"image": "x", "lease_grace_seconds": -1}, {}, ["python", "t.py"], "lease_grace_seconds must be >= 0"),
    ],
)
def test_bad_submit_input_is_a_usage_error(tmp_path: Path, data, overrides, command, message):
    spec_file = tmp_path / "trainer.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    with pytest.raises(CliError) as refused:
        trainer_job(load_spec(spec_file, overrides), command, "rl")
    assert refused.value.exit_code == EXIT_USAGE and message in str(refused.value)


def test_the_example_trainer_job_is_what_submit_makes_of_the_example_file():
    example = yaml.safe_load((REPO / "examples" / "trainer-job.yaml").read_text())
    command = [
        "python",
        "/opt/AReaL/examples/math/gsm8k_rl.py",
        "--config",
        "/opt/AReaL/examples/math/gsm8k_grpo.yaml",
        "scheduler.type=kubernetes",
    ]
    assert example == trainer_job(load_spec(REPO / "examples" / "trainer.yaml", {}), command, "rl")
