"""SchedulingSpec semantics AReaL's schedulers gained after 1.0.4 (areal-project/AReaL, read at v2.0.0 and main):

- #1584 (main, after v2.0.0): SchedulingSpec.reservation (sbatch --reservation) and .exclusive (sbatch --exclusive);
  the user's env_vars are applied after the scheduler's own defaults (thread counts, AReaL's forwarding).
- v2.0.0's inference service creates its guards with cmd="python -m areal.v2.inference_service.guard", whose parser
  takes --host, --port, --experiment-name, --trial-name, --role, --worker-index, --name-resolve-type,
  --nfs-record-root, --etcd3-addr and --fileroot.

The dataclasses here have the shape of AReaL's own (fields and defaults), nothing of its code."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass

import pytest

from areal_workers.areal_types import Job, SchedulingSpec
from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.errors import WorkerCreationError
from areal_workers.guard.forks import ForkPlan
from areal_workers.release import request_checks
from areal_workers.release.values import RESERVED_ENV, THREAD_VARIABLES, role_values, worker_command

IMAGE = "ghcr.io/inclusionai/areal-runtime:v1.0.4"
V2_GUARD = "python -m areal.v2.inference_service.guard"


@dataclass
class SpecAfter204(SchedulingSpec):
    """SchedulingSpec as AReaL's main declares it since #1584: two more fields with these defaults."""

    reservation: str | None = None
    exclusive: bool = False


def checked(spec: SchedulingSpec, role: str = "rollout") -> SchedulingSpec:
    return request_checks.spec(Job(role=role, replicas=2, tasks=[spec]))


def refusal(spec: SchedulingSpec) -> WorkerCreationError:
    with pytest.raises(WorkerCreationError) as info:
        checked(spec)
    return info.value


# --- reservation and exclusive ------------------------------------------------------------------


def test_a_newer_spec_at_its_defaults_is_accepted_and_gives_the_same_values_as_1_0_4s():
    newer = SpecAfter204(cpu=2, mem=4, image=IMAGE, cmd=V2_GUARD)
    older = SchedulingSpec(cpu=2, mem=4, image=IMAGE, cmd=V2_GUARD)
    config = KubernetesSchedulerConfig()
    assert checked(newer) is newer
    assert role_values(newer, 2, config) == role_values(older, 2, config)


def test_a_1_0_4_spec_without_the_fields_is_accepted():
    spec = SchedulingSpec(cpu=2, mem=4, image=IMAGE)
    if hasattr(spec, "reservation") or hasattr(spec, "exclusive"):
        pytest.skip("this AReaL's SchedulingSpec has the fields")
    assert checked(spec) is spec


def test_reservation_is_refused_as_the_other_slurm_only_fields_are():
    error = refusal(SpecAfter204(cpu=2, mem=4, image=IMAGE, reservation="rl-week-32"))
    assert error.worker_key == "rollout"
    assert error.reason == "SchedulingSpec.reservation is Slurm-only"
    assert "'rl-week-32'" in error.details and "kueue_queue" in error.details


@pytest.mark.parametrize("empty", [None, ""])
def test_an_empty_reservation_is_accepted(empty):
    checked(SpecAfter204(cpu=2, mem=4, image=IMAGE, reservation=empty))


def test_exclusive_is_refused_naming_the_kubernetes_ways():
    error = refusal(SpecAfter204(cpu=2, mem=4, image=IMAGE, exclusive=True))
    assert error.reason == "SchedulingSpec.exclusive is not supported on Kubernetes"
    assert "exclusiveTopology" in error.details and "taints" in error.details
    assert "leave exclusive False" in error.details


# --- env_vars win over the scheduler's defaults -------------------------------------------------


@pytest.mark.parametrize("name", THREAD_VARIABLES)
def test_the_users_thread_count_wins_over_the_schedulers(name):
    values = role_values(
        SchedulingSpec(cpu=16, mem=4, image=IMAGE, env_vars={name: "3"}), 1, KubernetesSchedulerConfig()
    )
    assert values["env"][name] == "3"
    assert all(values["env"][other] == "16" for other in THREAD_VARIABLES if other != name)


def test_a_forks_own_variables_are_only_names_a_user_cannot_set():
    """A fork inherits its guard's environment (the target's, with the user's env_vars already winning there); what
    the scheduler adds to /fork's env overrides only the worker identity, which env_vars may not set."""
    plan = ForkPlan("ref", "areal.infra.rpc.rpc_server", "python", "e", "t", (), 2, 60.0)
    assert set(plan.env(3)) <= RESERVED_ENV
    assert plan.env(3)["AREAL_WORKER_ID"] == "ref/3"


# --- the v2 inference service's guard -------------------------------------------------------------


@pytest.mark.parametrize("cmd", [V2_GUARD, "/opt/conda/bin/python -m areal.v2.inference_service.guard"])
def test_the_v2_guard_command_is_honoured_as_given(cmd):
    spec = checked(SpecAfter204(cpu=2, gpu=1, mem=4, image=IMAGE, cmd=cmd))
    assert worker_command(spec, "/usr/bin/python3") == ["/usr/bin/python3", "-m", "areal.v2.inference_service.guard"]
    assert role_values(spec, 4, KubernetesSchedulerConfig(python_executable="python"))["command"] == [
        "python",
        "-m",
        "areal.v2.inference_service.guard",
    ]


def test_process_forks_of_a_v2_guard_role_run_what_fork_workers_names():
    plan = ForkPlan("router", "areal.v2.inference_service.router", "python", "e", "t", ("--fileroot", "/f"), 1, 60.0)
    argv = plan.worker_argv(0, "10.0.0.5", 9000)
    assert argv[:3] == ["python", "-m", "areal.v2.inference_service.router"]
    assert argv[argv.index("--role") + 1] == "router" and argv[-2:] == ["--fileroot", "/f"]


# --- colocation: where a fork sits, in the variables AReaL's colocation reads ------------------------

SLURM = ("SLURM_LOCALID", "SLURM_NODEID", "SLURM_NNODES")


def fork_sees(inherited: dict[str, str], pods: int = 4, index: int = 2) -> tuple[list[str], str]:
    """SLURM_LOCALID, SLURM_NODEID and SLURM_NNODES as fork `index` of `pods` sees them under the wrapper, and the
    wrapper's exit marker line."""
    plan = ForkPlan("rollout", "areal.infra.rpc.rpc_server", "python", "e", "t", (), 2, 60.0, pods=pods)
    wrapper = plan.argv(index, "10.0.0.5", 9000)[:4]  # bash -c SCRIPT $0, then the worker's argv: here a probe
    probe = [sys.executable, "-c", f"import os; print(*(os.environ.get(n) for n in {SLURM!r}))"]
    env = {key: value for key, value in os.environ.items() if key not in SLURM} | inherited
    done = subprocess.run([*wrapper, *probe], env=env, capture_output=True, text=True, timeout=60, check=True)
    seen, marker = done.stdout.splitlines()
    return seen.split(), marker


def test_a_fork_is_slot_0_of_its_pod_and_its_pod_is_its_node_for_areals_colocation():
    """AReaL main (#1500): colocated SGLang starts at GPU SLURM_LOCALID x gpus_per_server (else at a base_gpu_id the
    controller counts over a whole node); the AWEX plugin's transfer rank is SLURM_NODEID x (world / SLURM_NNODES)
    + its GPU, which pairs fork 2 of 4 one-GPU pods with rank 2."""
    seen, marker = fork_sees({})
    assert seen == ["0", "2", "4"]
    assert marker.endswith("exited with code 0")


def test_what_the_guards_environment_sets_wins():
    assert fork_sees({"SLURM_LOCALID": "3", "SLURM_NNODES": "8"})[0] == ["3", "2", "8"]


def test_without_the_number_of_pods_only_the_slot_is_given():
    assert fork_sees({}, pods=0)[0] == ["0", "None", "None"]
