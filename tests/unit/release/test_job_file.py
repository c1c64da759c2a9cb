"""A job file (release/job_file.py): AReaL's Jobs as YAML, parsed strictly, and the values create_workers would
write for them in order; a bad file is refused with what to change."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.errors import InputError
from areal_workers.release.job_file import job_file_values, load_job_file


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_job_file_becomes_the_values_create_workers_would_install(tmp_path):
    names, jobs = load_job_file(
        write(
            tmp_path,
            {
                "experiment": "e",
                "trial": "t",
                "jobs": [
                    {"role": "actor", "replicas": 2, "tasks": [{"cpu": 2, "gpu": 1, "mem": 8, "cmd": "python -m x"}]},
                    {
                        "role": "ref",
                        "replicas": 2,
                        "scheduling_strategy": {"type": "colocation", "target": "actor", "fork": True},
                    },
                ],
            },
        )
    )
    assert names == {"experiment": "e", "trial": "t"} and [j.role for j in jobs] == ["actor", "ref"]
    pod_mode, notes = job_file_values(jobs, KubernetesSchedulerConfig(fork_mode="pod", image="reg/img:1"), "e", "t")
    assert notes == []
    assert pod_mode["roles"]["actor"]["resources"] == {"cpu": "2", "memory": "8Gi", "gpu": 1}
    assert pod_mode["forks"] == {"ref": {"target": "actor", "mode": "pod"}} and pod_mode["image"]["tag"] == "1"
    process_mode, notes = job_file_values(jobs, KubernetesSchedulerConfig(), "e", "t")
    assert "forks" not in process_mode  # forked at run time; their ports come with a later revision
    assert notes == ["ref forks processes in actor's pods at run time; the ports they get are recorded in a later "
                     "revision, not rendered here"]  # fmt: skip


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"role": "actor", "replicas": 1, "tasks": [{"gpus": 1}]}, "unknown field(s) gpus"),
        ({"role": "actor", "replicas": 0}, "replicas must be an integer >= 1"),
        ({"replicas": 1}, "a job needs a role"),
        ({"jobs": [], "trail": "x"}, "unknown key(s) trail"),
        ({"role": "actor", "scheduling_strategy": {"type": "colocation", "target": "critic"}}, "created earlier"),
        ({"role": "Actor", "replicas": 1}, "must be lowercase"),
    ],
)
def test_bad_job_files_are_usage_errors_that_say_what_to_change(tmp_path, data, message):
    with pytest.raises(InputError) as refused:
        _, jobs = load_job_file(write(tmp_path, data))
        job_file_values(jobs, KubernetesSchedulerConfig(), "e", "t")
    assert message in str(refused.value)
