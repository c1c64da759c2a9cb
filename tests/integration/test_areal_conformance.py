"""The scheduler behaves as AReaL's own schedulers do, where a trainer would notice the difference.

Each test names the AReaL behaviour it checks (areal 1.0.4: areal/infra/scheduler/local.py and slurm.py) or the
place where we deliberately go further. They run in both worker lanes: against our stand-in guard and against
AReaL's real rpc_server (AREAL_WORKERS_WORKER=areal).
"""

from __future__ import annotations

import asyncio
import getpass
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from areal_workers import (
    KubernetesScheduler,
    KubernetesSchedulerConfig,
    SchedulerError,
    WorkerCreationError,
    WorkerTimeoutError,
)
from clusterlib import counter_engine, job, spec

pytestmark = pytest.mark.areal_worker  # AReaL's own semantics: against the stand-in they would check only the stand-in
COUNTER = counter_engine()
WORKER_FLAGS = ("--name-resolve-type", "--nfs-record-root", "--etcd3-addr", "--fileroot")


@dataclass
class NameResolve:
    type: str
    nfs_record_root: str
    etcd3_addr: str = "localhost:2379"


@dataclass
class Cluster:
    fileroot: str
    name_resolve: NameResolve
    n_gpus_per_node: int = 8


@dataclass
class ExperimentConfig:
    experiment_name: str
    trial_name: str
    cluster: Cluster


def revisions(scheduler: KubernetesScheduler) -> list[int]:
    return [r["revision"] for r in scheduler.history()]


def worker_processes(trial: str, role: str) -> list[list[str]]:
    """argv of the local processes `python -m MODULE` that serve `role` of `trial`: process-mode forks, which the
    worker server runs. (A worker pod's own process is a child of podrunner's fork server on KWOK nodes: its /proc
    cmdline is the fork server's, its arguments are the pod's. So is a fork's, whose command line is that of the
    process that stands in for it, `python -I -S fork_client.py -m MODULE ARGS`: tools/podrunner/fork_client.py.)"""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().decode(errors="replace").split("\0")[:-1]
        except OSError:
            continue
        if (
            len(argv) > 2
            and Path(argv[0]).name.startswith("python")
            and "-m" in argv[1:5]
            and _flag(argv, "--trial-name") == trial
            and _flag(argv, "--role") == role
        ):
            found.append(argv)
    return found


def _flag(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv[:-1] else None


# --- engines ---------------------------------------------------------------------------------------------


def test_call_engine_without_engine_name_uses_the_workers_own_engine(make_scheduler):
    """LocalScheduler.call_engine / async_call_engine: engine_name defaults to the worker id, as in create_engine
    (AReaL's guard rejects `"engine_name": null` with HTTP 400)."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    asyncio.run(scheduler.create_engine("actor/0", COUNTER, None, 7))
    assert scheduler.call_engine("actor/0", "increment", None, 1) == 8
    assert scheduler.call_engine("actor/0", "value") == 8
    assert asyncio.run(scheduler.async_call_engine("actor/0", "value")) == 8


def test_engine_calls_on_known_workers_do_not_wait_for_another_roles_wait(make_scheduler):
    """A get_workers that waits for slow workers holds no lock an engine call needs (LocalScheduler has no lock
    around its engine calls at all)."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    asyncio.run(scheduler.create_engine("actor/0", COUNTER, None, 1))
    scheduler.create_workers(job("slow", 1, [spec(additional_bash_cmds=["sleep 30"])]))
    waiting = threading.Thread(target=scheduler.get_workers, args=("slow", 120.0), daemon=True)
    waiting.start()
    time.sleep(1.0)  # let the wait begin
    assert scheduler.call_engine("actor/0", "value") == 1
    assert asyncio.run(scheduler.async_call_engine("actor/0", "value")) == 1
    assert waiting.is_alive(), "the engine calls returned only after the other role's wait ended"
    waiting.join(timeout=150)


def test_workers_are_asked_to_destroy_their_engines_before_deletion(make_scheduler, tmp_path):
    """SlurmScheduler._destroy_engines_on_workers: POST /call destroy to every worker (bounded), then delete."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("actor")
    markers = [tmp_path / f"destroyed-{index}" for index in range(2)]
    for index, marker in enumerate(markers):
        asyncio.run(scheduler.create_engine(f"actor/{index}", COUNTER, None, destroy_marker=str(marker)))
    scheduler.delete_workers("actor")
    assert [marker.read_text() for marker in markers] == ["destroyed", "destroyed"]


# --- waiting ---------------------------------------------------------------------------------------------


def test_a_time_out_changes_nothing_and_a_longer_wait_finds_the_workers(make_scheduler, tmp_path):
    """LocalScheduler.get_workers raises WorkerTimeoutError and keeps the role: a retry with a longer timeout
    returns the workers. Only a fatal diagnosis (WorkerFailedError) rolls a change back."""
    scheduler = make_scheduler()
    gate = tmp_path / "start-the-worker"  # the worker starts once the first wait has timed out, however slow CI is
    scheduler.create_workers(job("slow", 1, [spec(additional_bash_cmds=[f"until [ -e {gate} ]; do sleep 0.2; done"])]))
    with pytest.raises(WorkerTimeoutError) as timed_out:
        scheduler.get_workers("slow", timeout=1)
    assert "0/1 workers ready" in str(timed_out.value.diagnosis)
    gate.touch()
    workers = scheduler.get_workers("slow", timeout=120)
    assert [w.id for w in workers] == ["slow/0"]
    assert revisions(scheduler) == [1]


# --- forks -------------------------------------------------------------------------------------------------


def test_forks_get_exactly_the_worker_flags_the_chart_gave_their_parents(make_scheduler, core, tmp_path):
    """LocalScheduler._fork_single_worker passes the parent's name-resolve and fileroot flags. Here they come from
    a values file, which the chart renders into the pods' args and its topology ConfigMap: the forks read them
    there, so a fork registers in the same name_resolve root as its parent."""
    shared = tmp_path / "shared"
    values = {
        "cluster": {
            "fileroot": str(shared / "root"),
            "nameResolve": {"type": "nfs", "nfsRecordRoot": str(shared / "records")},
        }
    }
    scheduler = make_scheduler(trial="flags", extra_values=values)
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    scheduler.fork_workers("ref", "actor")
    scheduler.get_workers("ref")
    (fork,) = worker_processes("flags", "ref")
    (pod,) = core.list_namespaced_pod(scheduler.namespace, label_selector="areal.io/role=actor").items
    parent = [*(pod.spec.containers[0].command or []), *pod.spec.containers[0].args]
    assert [_flag(fork, name) for name in WORKER_FLAGS] == [_flag(parent, name) for name in WORKER_FLAGS]
    assert (_flag(fork, "--fileroot"), _flag(fork, "--nfs-record-root")) == (
        str(shared / "root"),
        str(shared / "records"),
    )


def test_a_fork_that_dies_at_once_is_reported_with_its_exit_code_and_output(make_scheduler):
    """AReaL's fork polls the child's /health for up to its time-out and reports "connect call failed". We report
    the child's exit and its own last lines as soon as they reach the parent pod's log."""
    scheduler = make_scheduler(fork_module="no_such_module_in_the_image", fork_ready_timeout=600.0)
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    with pytest.raises(WorkerCreationError) as failed:
        scheduler.fork_workers("ref", "actor")
    text = str(failed.value)
    assert "Failed to fork 1 out of 1 workers" in text
    assert "exited with code 1 before answering /health" in text
    assert "No module named no_such_module_in_the_image" in text
    assert "not healthy within" not in text
    assert revisions(scheduler) == [1]


# --- construction ------------------------------------------------------------------------------------------


def test_the_experiment_config_wins_over_explicit_names(kubeconfig, helm_executable, namespace, tmp_path):
    """LocalScheduler/SlurmScheduler.__init__: exp_config's experiment_name and trial_name overwrite the explicit
    ones, and both are exposed as attributes."""
    experiment = ExperimentConfig("from-config", "t-config", Cluster(str(tmp_path), NameResolve("nfs", str(tmp_path))))
    config = KubernetesSchedulerConfig(namespace=namespace, kubeconfig=str(kubeconfig), helm_executable=helm_executable)
    scheduler = KubernetesScheduler(experiment, config=config, experiment_name="explicit", trial_name="explicit")
    try:
        assert (scheduler.experiment_name, scheduler.trial_name) == ("from-config", "t-config")
        assert "from-config" in scheduler.release
    finally:
        scheduler.close()


def test_missing_names_and_unknown_strategies_are_value_errors_too(
    make_scheduler, kubeconfig, helm_executable, namespace
):
    """Where AReaL raises ValueError, the error is also a ValueError (and still a scheduler error)."""
    config = KubernetesSchedulerConfig(namespace=namespace, kubeconfig=str(kubeconfig), helm_executable=helm_executable)
    with pytest.raises(ValueError, match="experiment_name and trial_name must be provided") as unnamed:
        KubernetesScheduler(None, config=config)
    assert isinstance(unnamed.value, SchedulerError)
    scheduler = make_scheduler()
    with pytest.raises(ValueError) as unknown:
        scheduler.create_workers(job("actor", 1, type="gang"))
    assert isinstance(unknown.value, WorkerCreationError) and "'gang'" in str(unknown.value)
    assert scheduler.history() == []


def test_a_first_create_clears_the_trials_stale_name_resolve_records(make_scheduler, tmp_path):
    """LocalScheduler/SlurmScheduler.__init__ clear name_resolve's subtree <user>/<experiment>/<trial>; here at the
    first install of the trial's release (a controller that adopts a running release must keep its records)."""
    records = tmp_path / "records"
    stale = [records / user / "exp" / "stale" / "old-worker" for user in {getpass.getuser(), "areal"}]
    other_trial = records / getpass.getuser() / "exp" / "other-trial" / "worker"
    for path in [*stale, other_trial]:
        path.mkdir(parents=True)
        (path / "ENTRY").write_text("127.0.0.1:1")
    values = {"cluster": {"nameResolve": {"type": "nfs", "nfsRecordRoot": str(records)}}}
    scheduler = make_scheduler(trial="stale", extra_values=values)
    scheduler.create_workers(job("actor", 1))
    assert not any(path.exists() for path in stale)
    assert (other_trial / "ENTRY").exists()
    scheduler.get_workers("actor")
    scheduler.close()  # a restarted controller adopts the release (a live one would be refused)
    adopting = make_scheduler(trial="stale", extra_values=values)
    (records / getpass.getuser() / "exp" / "stale" / "kept").mkdir(parents=True)
    adopting.create_workers(job("rollout", 1))
    assert (records / getpass.getuser() / "exp" / "stale" / "kept").exists()


# --- bad input is refused before anything is written ------------------------------------------------------


def test_a_worker_no_node_can_hold_is_refused_before_anything_is_written(make_scheduler):
    scheduler = make_scheduler()
    with pytest.raises(WorkerCreationError) as refused:
        scheduler.create_workers(job("actor", 1, [spec(gpu=100)]))
    text = str(refused.value)
    assert "nvidia.com/gpu" in text and "100" in text and "8" in text
    assert scheduler.history() == []


def test_capacity_check_warn_lets_an_autoscaling_cluster_take_the_change(make_scheduler, caplog):
    scheduler = make_scheduler(capacity_check="warn")
    with caplog.at_level("WARNING", logger="areal_workers.scheduler"):
        scheduler.create_workers(job("actor", 1, [spec(gpu=100)]))
    assert revisions(scheduler) == [1]
    assert any("nvidia.com/gpu" in record.getMessage() for record in caplog.records)


def test_an_invalid_image_reference_is_refused_before_anything_is_written(make_scheduler):
    scheduler = make_scheduler()
    with pytest.raises(WorkerCreationError) as refused:
        scheduler.create_workers(job("actor", 1, [spec(image="UPPER/Case:1")]))
    assert "lowercase" in str(refused.value)
    assert scheduler.history() == []


def test_workers_and_forks_know_their_identity_and_get_areals_base_environment(make_scheduler):
    """AReaL's launcher gives every worker BASE_ENVIRONS (areal/infra/utils/launcher.py); the chart adds the worker's
    identity, and a fork gets its own (a guard's children would otherwise inherit the parent's)."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("actor")
    scheduler.fork_workers("ref", "actor")
    scheduler.get_workers("ref")
    asyncio.run(scheduler.create_engine("actor/1", COUNTER, None))
    asyncio.run(scheduler.create_engine("ref/1", COUNTER, None))

    def env(worker_id: str, name: str) -> str | None:
        return scheduler.call_engine(worker_id, "env", None, name)

    assert [env("actor/1", n) for n in ("AREAL_ROLE", "AREAL_WORKER_INDEX", "AREAL_WORKER_ID")] == [
        "actor",
        "1",
        "actor/1",
    ]
    assert [env("ref/1", n) for n in ("AREAL_ROLE", "AREAL_WORKER_INDEX", "AREAL_WORKER_ID")] == ["ref", "1", "ref/1"]
    assert (env("actor/1", "AREAL_EXPERIMENT_NAME"), env("actor/1", "AREAL_TRIAL_NAME")) == ("exp", "trial0")
    assert (env("actor/1", "TOKENIZERS_PARALLELISM"), env("actor/1", "CUDA_DEVICE_MAX_CONNECTIONS")) == ("true", "1")
    assert env("actor/1", "PYTORCH_KERNEL_CACHE_PATH") == "/tmp/areal-areal/.cache/areal/torch/kernels/"
    # Where a fork sits, as AReaL main's colocation reads it (#1500; the Ray scheduler's contract, #1575): slot 0 of
    # its pod, which is node 1 of 2. The pods themselves set none of it.
    slurm = ("SLURM_LOCALID", "SLURM_NODEID", "SLURM_NNODES")
    assert [env("ref/1", n) for n in slurm] == ["0", "1", "2"]
    assert [env("actor/1", n) for n in slurm] == [None, None, None]


def test_create_workers_with_an_experiment_config_configures_every_worker(make_scheduler):
    """LocalScheduler.create_workers with exp_config waits for the workers and POSTs /configure {config, role,
    rank} to each; AReaL's worker rebuilds the config from its typed dict and seeds with config.seed. Without
    `areal` on the controller the adapter writes the same wire format (a config as plain JSON is a 500)."""
    from wire_types import ExperimentConfig

    scheduler = make_scheduler(exp_config=ExperimentConfig("exp", "configured"))
    assert scheduler.create_workers(job("actor", 2)) == ["actor/0", "actor/1"]  # configured, or it raised
    assert [w.id for w in scheduler.get_workers("actor")] == ["actor/0", "actor/1"]


def test_ports_are_what_the_chart_rendered_for_creator_and_adopter_alike(make_scheduler):
    """A values file moves the guard port: the scheduler that created the role and one that adopted the release
    both report the ports the chart gave the pods (read from the topology ConfigMap, not re-derived)."""
    values = {"workerDefaults": {"guardPort": 9100}}
    creator = make_scheduler(trial="ports", extra_values=values)
    creator.create_workers(job("actor", 1, [spec(port_count=3)]))
    created = creator.get_workers("actor")
    creator.close()  # a restarted controller adopts the release (a live one would be refused)
    adopter = make_scheduler(trial="ports", extra_values=values)
    adopted = adopter.get_workers("actor")
    assert created[0].worker_ports == adopted[0].worker_ports == ["9100", "9101", "9102"]
    asyncio.run(adopter.create_engine("actor/0", COUNTER, None, 3))
    assert adopter.call_engine("actor/0", "value") == 3  # the guard really listens there
