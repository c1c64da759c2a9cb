"""What the adapter writes for AReaL's newer semantics, rendered by the chart (areal-project/AReaL #1584 on main: the
user's env_vars are applied last; v2.0.0's inference service runs `python -m areal.v2.inference_service.guard`)."""

from __future__ import annotations

from areal_workers.areal_types import SchedulingSpec
from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.release.values import THREAD_VARIABLES, role_values
from chartlib import container, pod_env, render, sts

IMAGE = "ghcr.io/inclusionai/areal-runtime:v1.0.4"
# Every default the scheduler and the chart give a worker, each set by the user to another value.
USER_ENV = {
    "OMP_NUM_THREADS": "2",
    "TOKENIZERS_PARALLELISM": "false",
    "CUDA_DEVICE_MAX_CONNECTIONS": "8",
    "AREAL_CACHE_DIR": "/scratch/areal",
    "TRITON_CACHE_DIR": "/scratch/triton/",
    "TMS_INIT_ENABLE_CPU_BACKUP": "0",
    "USER": "rl",
    "HOME": "/home/rl",
}
# make_base_parser of areal/infra/rpc/guard/app.py (v2.0.0): the flags the v2 guard accepts.
V2_GUARD_FLAGS = {
    "--host",
    "--port",
    "--experiment-name",
    "--trial-name",
    "--role",
    "--worker-index",
    "--name-resolve-type",
    "--nfs-record-root",
    "--etcd3-addr",
    "--fileroot",
}


def rendered(spec: SchedulingSpec, offload: bool = False) -> dict:
    role = role_values(spec, 2, KubernetesSchedulerConfig(python_executable="python3"))
    if offload:
        role["offload"] = {"enabled": True}
    values = {
        "experiment": "exp",
        "trial": "t0",
        "roles": {"inf": role},
        "cluster": {"fileroot": "/storage", "nameResolve": {"type": "nfs", "nfsRecordRoot": "/storage/nr"}},
    }
    return sts(render(values), "inf")


def test_the_users_env_vars_win_over_every_default_of_the_scheduler_and_the_chart():
    statefulset = rendered(SchedulingSpec(cpu=16, mem=4, image=IMAGE, env_vars=USER_ENV), offload=True)
    names = [entry["name"] for entry in container(statefulset)["env"]]
    assert len(names) == len(set(names)), "a variable the user set must appear once"
    env = pod_env(statefulset, {"metadata.labels['apps.kubernetes.io/pod-index']": "0"})
    assert {name: env[name] for name in USER_ENV} == USER_ENV
    assert env["MKL_NUM_THREADS"] == "16"  # the defaults the user did not set stay
    assert env["TMS_INIT_ENABLE"] == "1"
    assert env["PYTORCH_KERNEL_CACHE_PATH"] == "/scratch/areal/.cache/rl/torch/kernels/"
    assert set(THREAD_VARIABLES) <= set(names)


def test_the_v2_inference_guard_runs_as_given_with_flags_its_parser_accepts():
    spec = SchedulingSpec(cpu=4, gpu=1, mem=8, image=IMAGE, cmd="python -m areal.v2.inference_service.guard")
    worker = container(rendered(spec))
    assert worker["command"] == ["python3", "-m", "areal.v2.inference_service.guard"]
    args = worker["args"]
    flags = {arg for arg in args if arg.startswith("--")}
    assert flags <= V2_GUARD_FLAGS, f"flags the v2 guard does not know: {flags - V2_GUARD_FLAGS}"
    assert {"--experiment-name", "--trial-name", "--role"} <= flags  # required by its parser
    assert args[args.index("--role") + 1] == "inf"
