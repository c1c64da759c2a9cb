"""The trainer Job `areal-workers submit` creates, as data: the controller identity and label, the settings that
tie the workers to the trainer's pod, the chart's securityContexts (PodSecurity `restricted`) and their overrides,
and bad submit files refused with what to change."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from areal_workers import KubernetesSchedulerConfig
from areal_workers.errors import InputError
from areal_workers.release.values import base_values
from areal_workers.trainer.job import (
    CONTAINER_SECURITY_CONTEXT,
    POD_SECURITY_CONTEXT,
    USER,
    load_spec,
    trainer_job,
)
from areal_workers.trainer.network import Endpoint, trainer_network_policy
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
                "restarts": 0,
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
        "AREAL_K8S_TRAINER_JOB": "metadata.labels['batch.kubernetes.io/job-name']",  # narrows the release's policies
        "AREAL_K8S_LEASE_GRACE_SECONDS": "120",
        "AREAL_K8S_TRAINER_ADDRESS": "status.podIP",  # what AReaL's controllers advertise for callbacks
        "WANDB_MODE": "offline",
        "HOME": "/tmp",  # uid 1000 has no home in most images; helm writes under HOME
        "USER": "areal",  # the workers' user: AReaL keys name_resolve records by it
    }
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1 and container["volumeMounts"][0]["name"] == "data"
    assert pod["spec"]["volumes"] == [{"name": "data", "emptyDir": {}}]


def test_a_restarting_trainer_hands_its_workers_from_attempt_to_attempt_through_its_job():
    """AReaL's recover.retries (3) by default: each attempt a new pod, only once the last is gone (it still renews
    its Lease while it terminates); the workers' owner is the Job, so an attempt's end does not delete them."""
    job = trainer_job(load_spec(None, {"image": "reg/areal:1"}), ["python", "train.py"], "rl")
    assert job["spec"]["backoffLimit"] == 3 and job["spec"]["podReplacementPolicy"] == "Failed"
    [container] = job["spec"]["template"]["spec"]["containers"]
    owner = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"] if "OWNER" in e["name"]}
    assert owner == {
        "AREAL_K8S_OWNER_JOB": "metadata.labels['batch.kubernetes.io/job-name']",
        "AREAL_K8S_OWNER_JOB_UID": "metadata.labels['batch.kubernetes.io/controller-uid']",
    }
    config = KubernetesSchedulerConfig(owner_job="trainer-train", owner_job_uid="uid-2")
    assert base_values(config, "e", "t")["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "trainer-train", "uid": "uid-2"}
    ]
    once = trainer_job(load_spec(None, {"image": "reg/areal:1", "restarts": 0}), ["python", "train.py"], "rl")
    assert once["spec"]["backoffLimit"] == 0 and "podReplacementPolicy" not in once["spec"]


@pytest.mark.parametrize("restarts", [-1, "3", True, 1.5])
def test_restarts_are_a_count(restarts):
    with pytest.raises(InputError, match="restarts must be an integer >= 0"):
        load_spec(None, {"image": "reg/areal:1", "restarts": restarts})


def test_restarts_need_the_lease_that_tells_a_dead_attempt():
    with pytest.raises(InputError, match="restarts need the trainer's Lease"):
        load_spec(None, {"image": "reg/areal:1", "lease_grace_seconds": 0})
    assert load_spec(None, {"image": "reg/areal:1", "lease_grace_seconds": 0, "restarts": 0}).restarts == 0


def test_the_trainers_pod_becomes_the_owner_of_its_release():
    config = KubernetesSchedulerConfig(owner_pod="trainer-x-7k2p", owner_pod_uid="uid-1")
    assert base_values(config, "e", "t")["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "trainer-x-7k2p", "uid": "uid-1"}
    ]
    assert "ownerReferences" not in base_values(KubernetesSchedulerConfig(), "e", "t")


def written(tmp_path: Path, data: dict) -> Path:
    spec_file = tmp_path / "trainer.yaml"
    spec_file.write_text(yaml.safe_dump({"image": "reg/areal:1", **data}))
    return spec_file


def pod_and_container(job: dict) -> tuple[dict, dict]:
    pod = job["spec"]["template"]["spec"]
    return pod, pod["containers"][0]


def test_the_job_passes_pod_security_restricted_with_the_charts_security_contexts(tmp_path: Path):
    pod, container = pod_and_container(trainer_job(load_spec(written(tmp_path, {}), {}), ["python", "t.py"], "rl"))
    workers = yaml.safe_load((REPO / "charts" / "areal-workers" / "values.yaml").read_text())["workerDefaults"]
    assert pod["securityContext"] == workers["podSecurityContext"] == POD_SECURITY_CONTEXT
    assert container["securityContext"] == workers["containerSecurityContext"] == CONTAINER_SECURITY_CONTEXT
    # What `restricted` checks of a pod's securityContexts (https://kubernetes.io/docs/concepts/security/pod-security-standards/).
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "HOME", "value": "/tmp"} in container["env"]


def test_a_submit_files_security_contexts_are_merged_over_the_defaults_as_helm_merges_values(tmp_path: Path):
    spec_file = written(
        tmp_path,
        {
            "pod_security_context": {"runAsUser": 2000, "fsGroup": None, "seccompProfile": {"type": "Localhost"}},
            "container_security_context": {"readOnlyRootFilesystem": True, "capabilities": {"add": ["NET_ADMIN"]}},
            "env": {"HOME": "/home/trainer"},
        },
    )
    pod, container = pod_and_container(trainer_job(load_spec(spec_file, {}), ["python", "t.py"], "rl"))
    assert pod["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 2000,
        "runAsGroup": 1000,
        "seccompProfile": {"type": "Localhost"},
    }
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["NET_ADMIN"]},
        "readOnlyRootFilesystem": True,
    }
    assert [e["value"] for e in container["env"] if e["name"] == "HOME"] == ["/home/trainer"]  # the file's, once
    assert POD_SECURITY_CONTEXT["runAsUser"] == 1000  # the defaults themselves are left alone


def test_null_removes_a_security_context_or_the_uid_so_the_image_decides(tmp_path: Path):
    removed = written(tmp_path, {"pod_security_context": None, "container_security_context": None})
    pod, container = pod_and_container(trainer_job(load_spec(removed, {}), ["python", "t.py"], "rl"))
    assert "securityContext" not in pod and "securityContext" not in container
    image_user = written(tmp_path, {"pod_security_context": {"runAsUser": None, "runAsGroup": None}})
    pod, container = pod_and_container(trainer_job(load_spec(image_user, {}), ["python", "t.py"], "rl"))
    assert pod["securityContext"]["runAsNonRoot"] is True and "runAsUser" not in pod["securityContext"]
    assert "HOME" not in {e["name"] for e in container["env"]}  # the image's own user keeps the image's HOME


@pytest.mark.parametrize(
    ("data", "overrides", "command", "message"),
    [
        ({}, {}, ["python", "t.py"], "needs an image"),
        ({"image": "x", "gpus": 1}, {}, ["python", "t.py"], "unknown field(s) gpus"),
        ({"image": "x"}, {}, [], "nothing to run"),
        ({"image": "x"}, {"name": "Trainer_1"}, ["python", "t.py"], "must be a DNS label"),
        ({"image": "x", "lease_grace_seconds": -1}, {}, ["python", "t.py"], "lease_grace_seconds must be >= 0"),
        (
            {"image": "x", "pod_security_context": {"runAsUsr": 2000}},
            {},
            ["python", "t.py"],
            "unknown field(s) pod_security_context.runAsUsr; pod_security_context has appArmorProfile, fsGroup",
        ),
        (
            {"image": "x", "container_security_context": {"capabilities": {"dorp": ["ALL"]}}},
            {},
            ["python", "t.py"],
            "unknown field(s) container_security_context.capabilities.dorp",
        ),
        (
            {"image": "x", "container_security_context": "restricted"},
            {},
            ["python", "t.py"],
            "container_security_context is a mapping of SecurityContext fields",
        ),
    ],
)
def test_bad_submit_input_is_a_usage_error(tmp_path: Path, data, overrides, command, message):
    spec_file = tmp_path / "trainer.yaml"
    spec_file.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as refused:
        trainer_job(load_spec(spec_file, overrides), command, "rl")
    assert message in str(refused.value)


def test_the_example_trainer_job_is_what_submit_makes_of_the_example_file():
    command = [
        "python",
        "/opt/AReaL/examples/math/gsm8k_rl.py",
        "--config",
        "/opt/AReaL/examples/math/gsm8k_grpo.yaml",
        "scheduler.type=kubernetes",
    ]
    job, policy = yaml.safe_load_all((REPO / "examples" / "trainer-job.yaml").read_text())
    assert job == trainer_job(load_spec(REPO / "examples" / "trainer.yaml", {}), command, "rl")
    assert policy == trainer_network_policy(job, [Endpoint("192.0.2.1", 443)], [])  # the header's API server


def test_the_trainer_runs_as_the_workers_user_so_name_resolve_keys_match(tmp_path: Path):
    """AReaL's name_resolve keys (areal.utils.names) start with getpass.getuser(), which reads USER; a uid without a
    passwd entry and no USER makes it fail at import. The trainer gets the chart's worker USER unless the file sets
    one (then the workers need the same: workerDefaults.env.USER)."""
    workers = yaml.safe_load((REPO / "charts" / "areal-workers" / "values.yaml").read_text())["workerDefaults"]
    assert workers["env"]["USER"] == USER
    _, container = pod_and_container(trainer_job(load_spec(written(tmp_path, {}), {}), ["python", "t.py"], "rl"))
    assert {"name": "USER", "value": USER} in container["env"]
    own = written(tmp_path, {"env": {"USER": "alice"}})
    _, container = pod_and_container(trainer_job(load_spec(own, {}), ["python", "t.py"], "rl"))
    assert [e["value"] for e in container["env"] if e["name"] == "USER"] == ["alice"]


def test_tolerations_reach_the_pod_and_misspelt_ones_are_refused(tmp_path: Path):
    gpu = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    pod, _ = pod_and_container(trainer_job(load_spec(written(tmp_path, {"tolerations": gpu}), {}), ["python"], "rl"))
    assert pod["tolerations"] == gpu
    for bad, says in (
        ({"tolerations": [{"key": "a", "efect": "NoSchedule"}]}, "unknown field(s) tolerations[].efect"),
        ({"tolerations": {"key": "a"}}, "tolerations is a list of Kubernetes Tolerations"),
    ):
        with pytest.raises(InputError) as refused:
            load_spec(written(tmp_path, bad), {})
        assert says in str(refused.value)
