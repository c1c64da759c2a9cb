"""The worker container's environment and start-up wrapper: AReaL's identity, its base environment
(BASE_ENVIRONS of areal/infra/utils/launcher.py) and enable_offload (areal/utils/offload.py)."""

import json
import os
import subprocess
import sys

import pytest

from chartlib import POD_INDEX, container, env_of, kubelet_expand, one, pod_env, role, sts

DOWNWARD = {
    "metadata.name": "rel-areal-workers-actor-3",
    "metadata.namespace": "ns",
    "status.podIP": "10.1.2.3",
    POD_INDEX: "3",
}
IDENTITY = ["AREAL_EXPERIMENT_NAME", "AREAL_TRIAL_NAME", "AREAL_ROLE", "AREAL_WORKER_ID"]
BASE = [
    "AREAL_CACHE_DIR",
    "TOKENIZERS_PARALLELISM",
    "PYTORCH_KERNEL_CACHE_PATH",
    "TRITON_CACHE_DIR",
    "VLLM_CACHE_ROOT",
    "CUDA_DEVICE_MAX_CONNECTIONS",
]
TMS = ["TMS_INIT_ENABLE", "TMS_INIT_ENABLE_CPU_BACKUP"]
PRELOAD_NAME = "torch_memory_saver_hook_mode_preload.abi3.so"


def names(statefulset: dict) -> list[str]:
    return [e["name"] for e in container(statefulset)["env"]]


def test_identity_variables_follow_the_worker_index(render):
    docs = render({"experiment": "gsm8k$(HOME)", "trial": "t1", "roles": {"actor_main": role(4)}})
    s = sts(docs, "actor_main")
    assert names(s)[:8] == ["POD_NAME", "POD_NAMESPACE", "POD_IP", "AREAL_WORKER_INDEX", *IDENTITY]
    assert env_of(s)["AREAL_WORKER_ID"] == "actor_main/$(AREAL_WORKER_INDEX)"
    env = pod_env(s, DOWNWARD)
    assert {k: env[k] for k in IDENTITY} == {
        "AREAL_EXPERIMENT_NAME": "gsm8k$(HOME)",  # "$" escaped: the kubelet must not expand a name
        "AREAL_TRIAL_NAME": "t1",
        "AREAL_ROLE": "actor_main",
        "AREAL_WORKER_ID": "actor_main/3",
    }


def test_identity_of_a_pod_mode_fork_is_its_own(render):
    docs = render({"roles": {"actor": role(2)}, "forks": {"helper": {"target": "actor", "mode": "pod"}}})
    env = pod_env(sts(docs, "helper"), DOWNWARD)
    assert (env["AREAL_ROLE"], env["AREAL_WORKER_ID"]) == ("helper", "helper/3")


def test_numeric_experiment_and_trial_print_as_written(render):
    env = pod_env(sts(render({"experiment": 1000000, "trial": 7, "roles": {"a": role()}}), "a"))
    assert (env["AREAL_EXPERIMENT_NAME"], env["AREAL_TRIAL_NAME"]) == ("1000000", "7")


def test_base_environment_matches_areals_launcher(render):
    s = sts(render({"roles": {"a": role()}}), "a")
    env = pod_env(s, DOWNWARD)
    # AReaL with USER=areal and no AREAL_CACHE_DIR: LOCAL_CACHE_DIR = /tmp/areal-areal, caches in .cache/areal/.
    assert {k: env[k] for k in BASE} == {
        "AREAL_CACHE_DIR": "/tmp/areal-areal",
        "TOKENIZERS_PARALLELISM": "true",
        "PYTORCH_KERNEL_CACHE_PATH": "/tmp/areal-areal/.cache/areal/torch/kernels/",
        "TRITON_CACHE_DIR": "/tmp/areal-areal/.cache/areal/triton/",
        "VLLM_CACHE_ROOT": "/tmp/areal-areal/.cache/areal/vllm/",
        "CUDA_DEVICE_MAX_CONNECTIONS": "1",
    }
    # Every $(VAR) a base entry uses is defined earlier in the list (the kubelet expands nothing else).
    assert not any("$(" in v for v in env.values())
    order = names(s)
    assert order.index("USER") < order.index("AREAL_CACHE_DIR") < order.index("PYTORCH_KERNEL_CACHE_PATH")
    assert not set(TMS) & set(order)


def test_role_env_overrides_the_base_environment(render):
    docs = render(
        {
            "workerDefaults": {"env": {"AREAL_CACHE_DIR": "/cache"}},
            "roles": {
                "a": role(env={"TOKENIZERS_PARALLELISM": "false", "USER": "rl", "CUDA_DEVICE_MAX_CONNECTIONS": 8}),
                "b": role(env={"TRITON_CACHE_DIR": {"valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}}),
            },
        }
    )
    a = sts(docs, "a")
    order = names(a)
    assert len(order) == len(set(order)), "an overridden variable must not appear twice"
    env = pod_env(a, DOWNWARD)
    assert env["TOKENIZERS_PARALLELISM"] == "false" and env["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    assert env["AREAL_CACHE_DIR"] == "/cache"
    assert env["PYTORCH_KERNEL_CACHE_PATH"] == "/cache/.cache/rl/torch/kernels/"
    assert env["VLLM_CACHE_ROOT"] == "/cache/.cache/rl/vllm/"
    b = sts(docs, "b")
    assert env_of(b)["TRITON_CACHE_DIR"] == {"configMapKeyRef": {"name": "c", "key": "k"}}
    assert names(b).count("TRITON_CACHE_DIR") == 1
    assert pod_env(b)["PYTORCH_KERNEL_CACHE_PATH"] == "/cache/.cache/areal/torch/kernels/"


def test_base_environment_without_user(render):
    env = pod_env(sts(render({"workerDefaults": {"env": {"USER": None}}, "roles": {"a": role()}}), "a"))
    assert "USER" not in env
    assert env["AREAL_CACHE_DIR"] == "/tmp/areal"
    assert env["PYTORCH_KERNEL_CACHE_PATH"] == "/tmp/areal/.cache/torch/kernels/"


# --- offload -------------------------------------------------------------------------------------------


def test_offload_is_off_by_default(render):
    docs = render({"roles": {"a": role()}})
    c = container(sts(docs, "a"))
    assert c["command"] == ["python", "-m", "areal.infra.rpc.rpc_server"]
    assert not {"LD_PRELOAD", *TMS} & set(names(sts(docs, "a")))
    assert json.loads(one(docs, "ConfigMap")["data"]["topology.json"])["roles"]["a"]["offload"] is False


def test_offload_wraps_the_worker_and_sets_the_tms_switches(render):
    docs = render({"roles": {"a": role(offload={"enabled": True}, setupCommands=["pip install x"])}})
    s = sts(docs, "a")
    c = container(s)
    assert c["command"][:2] == ["bash", "-c"] and c["command"][3:] == [
        "--",
        "python",
        "-m",
        "areal.infra.rpc.rpc_server",
    ]
    script = c["command"][2]
    assert script.startswith("pip install x && { tms_python='python'\n")
    assert script.endswith(' && exec "$@"')
    assert script.index("pip install x") < script.index("find_spec") < script.index("export LD_PRELOAD")
    env = pod_env(s)
    assert (env["TMS_INIT_ENABLE"], env["TMS_INIT_ENABLE_CPU_BACKUP"]) == ("1", "1")
    assert "LD_PRELOAD" not in env  # found at start time, by the image's python
    assert c["args"][:2] == ["--host", "$(POD_IP)"]
    assert json.loads(one(docs, "ConfigMap")["data"]["topology.json"])["roles"]["a"]["offload"] is True


def test_offload_switches_yield_to_the_role_env(render):
    env = pod_env(
        sts(render({"roles": {"a": role(offload={"enabled": True}, env={"TMS_INIT_ENABLE_CPU_BACKUP": "0"})}}), "a")
    )
    assert (env["TMS_INIT_ENABLE"], env["TMS_INIT_ENABLE_CPU_BACKUP"]) == ("1", "0")


def test_pod_mode_forks_do_not_preload(render):
    values = {
        "workerDefaults": {"offload": {"enabled": True}},
        "roles": {"actor": role(2)},
        "forks": {
            "helper": {"target": "actor", "mode": "pod"},
            "gpu_helper": {"target": "actor", "mode": "pod", "overrides": {"offload": {"enabled": True}}},
        },
    }
    docs = render(values)
    helper = sts(docs, "helper")
    assert container(helper)["command"][0] == "python"
    assert not set(TMS) & set(names(helper))
    assert container(sts(docs, "actor"))["command"][0] == "bash"
    assert container(sts(docs, "gpu_helper"))["command"][0] == "bash"  # explicit overrides still win
    forks = json.loads(one(docs, "ConfigMap")["data"]["topology.json"])["forks"]
    assert (forks["helper"]["offload"], forks["gpu_helper"]["offload"]) == (False, True)


def _run_wrapper(
    statefulset: dict, tmp_path, pythonpath: str | None = None, extra_env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run the container's command as the kubelet would (with $(VAR) expanded), the worker program replaced."""
    env = {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", **pod_env(statefulset, DOWNWARD), **(extra_env or {})}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    command = [kubelet_expand(part, env) for part in container(statefulset)["command"]]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture(name="image")
def image_fixture(tmp_path):
    """A fake image: bin/python (the test's interpreter, no site-packages), site/ with torch_memory_saver."""
    (tmp_path / "bin").mkdir()
    python = tmp_path / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    python.chmod(0o755)
    site = tmp_path / "site"
    (site / "torch_memory_saver").mkdir(parents=True)
    (site / "torch_memory_saver" / "__init__.py").write_text("raise ImportError('imports torch')\n")
    (site / PRELOAD_NAME).write_bytes(b"")
    return tmp_path


def _offload_role(**settings) -> dict:
    # The worker program prints what it got; `printenv` is not python, so offload.python names the interpreter.
    return role(
        offload={"enabled": True, "python": "python"}, command=["printenv", "LD_PRELOAD", "TMS_INIT_ENABLE"], **settings
    )


def test_offload_wrapper_preloads_the_library_it_finds(render, image):
    s = sts(render({"roles": {"a": _offload_role(setupCommands=['test -n "$$AREAL_ROLE"'])}}), "a")
    proc = _run_wrapper(s, image, pythonpath=str(image / "site"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == [str(image / "site" / PRELOAD_NAME), "1"]


def test_offload_wrapper_keeps_the_roles_ld_preload_after_it(render, image):
    s = sts(render({"roles": {"a": _offload_role(env={"LD_PRELOAD": "/opt/libjemalloc.so"})}}), "a")
    proc = _run_wrapper(s, image, pythonpath=str(image / "site"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == f"{image / 'site' / PRELOAD_NAME}:/opt/libjemalloc.so"


def test_offload_wrapper_uses_the_commands_python_by_default(render, image):
    values = {
        "roles": {
            "a": role(offload={"enabled": True}, command=["python", "-c", "import os; print(os.environ['LD_PRELOAD'])"])
        }
    }
    proc = _run_wrapper(sts(render(values), "a"), image, pythonpath=str(image / "site"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == str(image / "site" / PRELOAD_NAME)


def test_offload_wrapper_fails_clearly_without_torch_memory_saver(render, image):
    proc = _run_wrapper(sts(render({"roles": {"a": _offload_role()}}), "a"), image)
    assert proc.returncode == 1 and proc.stdout == ""
    assert (
        "areal-workers: offload.enabled is true but torch_memory_saver is not installed for python; "
        "install torch_memory_saver in the image or set offload.enabled=false (in roles.a or workerDefaults)"
    ) in proc.stderr


def test_offload_wrapper_fails_clearly_without_the_library(render, image):
    (image / "site" / PRELOAD_NAME).unlink()
    proc = _run_wrapper(sts(render({"roles": {"a": _offload_role()}}), "a"), image, pythonpath=str(image / "site"))
    assert proc.returncode == 1 and proc.stdout == ""
    assert f"torch_memory_saver's preload library {image / 'site' / PRELOAD_NAME} does not exist" in proc.stderr


@pytest.mark.parametrize("name", ["POD_NAME", "POD_NAMESPACE", "POD_IP", "AREAL_WORKER_INDEX", *IDENTITY])
def test_every_variable_set_before_the_roles_env_is_reserved(name, render, render_error):
    assert names(sts(render({"roles": {"a": role()}}), "a"))[:8] == [
        "POD_NAME",
        "POD_NAMESPACE",
        "POD_IP",
        "AREAL_WORKER_INDEX",
        *IDENTITY,
    ]
    err = render_error({"roles": {"a": role(env={name: "x"})}})
    assert f"env.{name}, set in roles.a or workerDefaults, is set by the chart from " in err, err


def test_the_adapters_reserved_names_are_the_chart_owned_variables(render):
    """areal_workers.release.values.RESERVED_ENV (refused in SchedulingSpec.env_vars before anything is written) is
    exactly what the chart sets from the pod and the role, before the role's own env."""
    from areal_workers.release.values import RESERVED_ENV

    s = sts(render({"roles": {"actor": role(1)}}), "actor")
    assert set(names(s)[: len(RESERVED_ENV)]) == RESERVED_ENV
