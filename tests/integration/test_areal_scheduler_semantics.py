"""AReaL's own scheduler tests, ported to the Kubernetes scheduler on a real cluster.

AReaL (inclusionAI/AReaL, v1.0.4 and main) tests its schedulers in tests/test_local_scheduler.py (mostly with mocked
processes and HTTP), tests/test_slurm_scheduler.py and tests/test_ray_scheduler.py. The behaviours those tests pin
down that a trainer sees through the Scheduler API, and that a Kubernetes scheduler shares, are checked here
end to end: real pods, real guards, real HTTP. Each test's docstring names the AReaL tests it ports. What
test_scheduler.py, test_areal_conformance.py and test_areal_worker.py already assert is not repeated.

Every test runs in both worker lanes (our stand-in guard, and AReaL's real rpc_server with
AREAL_WORKERS_WORKER=areal) and asserts only what AReaL's server answers too.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from areal_workers import (
    EngineCallError,
    EngineCreationError,
    EngineImportError,
    Job,
    RPCConnectionError,
    WorkerCreationError,
    WorkerNotFoundError,
)
from clusterlib import counter_engine, flag_values, guard_health, job, process_argv, spec, wait_for_text

pytestmark = pytest.mark.areal_worker  # AReaL's own semantics: against the stand-in they would check only the stand-in
COUNTER = counter_engine()  # a Counter engine the lane's worker server accepts
BROKEN = COUNTER.rpartition(".")[0] + ".Broken"  # its constructor raises (the server answers 500)
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)  # AReaL's THREAD_ENV_VARS (areal/infra/utils/launcher.py)
WAIT = 180.0  # for anything a worker does in seconds: generous, AReaL's real server starts slowly


# --- helpers -------------------------------------------------------------------------------------------------


def revisions(scheduler) -> list[int]:
    return [r["revision"] for r in scheduler.history()]


def create_engine(scheduler, worker_id: str, engine: str = COUNTER, engine_name: str | None = None, *args, **kwargs):
    return asyncio.run(scheduler.create_engine(worker_id, engine, engine_name, *args, **kwargs))


def answers(ip: str, port: str) -> bool:
    """Whether a guard answers GET /health at ip:port."""
    try:
        with urllib.request.urlopen(f"http://{ip}:{port}/health", timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def guard_post(worker, path: str, payload: dict) -> int:
    """POST to a worker's guard directly (as if something else than the scheduler acted); returns the status."""
    request = urllib.request.Request(
        f"http://{worker.ip}:{worker.worker_ports[0]}{path}",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


# --- creating workers ------------------------------------------------------------------------------------------


def test_a_job_without_tasks_gets_the_default_worker_spec(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestWorkerCreation::test_create_workers_with_default_spec: a Job with no
    SchedulingSpec gets LocalScheduler's default one (1 CPU, no GPU, 2 ports, AReaL's rpc_server), so its workers
    start, answer and host engines."""
    scheduler = make_scheduler()
    assert scheduler.create_workers(Job(role="rollout", replicas=2)) == ["rollout/0", "rollout/1"]
    workers = scheduler.get_workers("rollout", timeout=WAIT)
    assert [w.id for w in workers] == ["rollout/0", "rollout/1"]
    for index, worker in enumerate(workers):
        assert len(worker.worker_ports) == 2
        create_engine(scheduler, worker.id, COUNTER, None, index)
        assert scheduler.call_engine(worker.id, "increment", None, 10) == index + 10
        assert scheduler.call_engine(worker.id, "env", None, "OMP_NUM_THREADS") == "1"  # the default cpu=1


def test_every_worker_gets_port_count_ports_as_strings_and_forks_get_as_many(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestWorkerCreation::test_create_workers_with_single_spec_for_all (one spec
    for all replicas; each worker gets port_count ports), tests/test_slurm_scheduler.py::test_create_and_get_workers
    (ports are digit strings, the IP is set), and LocalScheduler._fork_single_worker: a fork gets as many ports as
    its target's workers, none of them its target's."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2, [spec(port_count=3)]))
    targets = scheduler.get_workers("actor", timeout=WAIT)
    for worker in targets:
        assert worker.ip != ""
        assert len(worker.worker_ports) == 3 and len(set(worker.worker_ports)) == 3
        assert all(isinstance(port, str) and port.isdigit() for port in worker.worker_ports)
        assert guard_health(worker)["status"] == "healthy"  # the guard is worker_ports[0]

    scheduler.fork_workers("ref", "actor")
    forks = scheduler.get_workers("ref", timeout=WAIT)
    for target, fork in zip(targets, forks):
        assert fork.ip == target.ip
        assert len(fork.worker_ports) == 3 and len(set(fork.worker_ports)) == 3
        assert all(isinstance(port, str) and port.isdigit() for port in fork.worker_ports)
        assert set(fork.worker_ports).isdisjoint(target.worker_ports)
        assert guard_health(fork)["status"] == "healthy"


def test_spec_env_vars_and_thread_counts_reach_every_worker(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestWorkerCreation::test_create_workers_with_environment_variables
    (SchedulingSpec.env_vars reach the worker) and ::test_create_workers_with_per_worker_specs (one spec per replica
    is accepted; ours must be equal: one pod template), plus AReaL's get_thread_env_vars: OMP_NUM_THREADS and the
    other thread counts are the spec's cpu unless env_vars set them."""
    scheduler = make_scheduler()
    env_vars = {"CUSTOM_VAR": "custom_value", "ANOTHER_VAR": "123", "MKL_NUM_THREADS": "3"}
    scheduler.create_workers(
        job("envtest", 2, [spec(cpu=2, env_vars=dict(env_vars)), spec(cpu=2, env_vars=dict(env_vars))])
    )
    for worker in scheduler.get_workers("envtest", timeout=WAIT):
        create_engine(scheduler, worker.id)

        def env(name: str, worker_id: str = worker.id) -> str | None:
            return scheduler.call_engine(worker_id, "env", None, name)

        assert (env("CUSTOM_VAR"), env("ANOTHER_VAR")) == ("custom_value", "123")
        assert {name: env(name) for name in THREAD_VARIABLES} == {
            "OMP_NUM_THREADS": "2",
            "MKL_NUM_THREADS": "3",
            "OPENBLAS_NUM_THREADS": "2",
            "VECLIB_MAXIMUM_THREADS": "2",
            "NUMEXPR_NUM_THREADS": "2",
        }


def test_a_custom_command_runs_with_the_port_and_areals_flags_appended(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestWorkerCreation::test_create_workers_with_custom_command: the worker
    runs SchedulingSpec.cmd as given, followed by `--port <worker_ports[0]>` and AReaL's worker flags."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("custom", 1, [spec(cmd="python -u -m areal.infra.rpc.rpc_server")]))
    (worker,) = scheduler.get_workers("custom", timeout=WAIT)
    create_engine(scheduler, worker.id)
    argv = process_argv(scheduler.call_engine(worker.id, "pid"))  # the worker server's own process
    assert Path(argv[0]).name.startswith("python") and argv[1:3] == ["-u", "-m"]
    flags = flag_values(argv[4:])
    assert (
        flags["--port"],
        flags["--experiment-name"],
        flags["--trial-name"],
        flags["--role"],
        flags["--worker-index"],
    ) == (worker.worker_ports[0], "exp", "trial0", "custom", "0")
    assert {"--name-resolve-type", "--nfs-record-root", "--etcd3-addr", "--fileroot"} <= flags.keys()


def test_get_workers_returns_only_once_every_worker_answers(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestGetWorkers::test_get_workers_gradual_readiness: when one worker
    becomes ready later than the others, get_workers waits for it and then returns them all."""
    scheduler = make_scheduler()
    late = spec(additional_bash_cmds=['if [ "$AREAL_WORKER_INDEX" = 1 ]; then sleep 10; fi'])
    started = time.monotonic()
    scheduler.create_workers(job("gradual", 2, [late]))
    workers = scheduler.get_workers("gradual", timeout=WAIT)
    assert time.monotonic() - started >= 9.5  # it waited for the late worker
    assert [w.id for w in workers] == ["gradual/0", "gradual/1"]
    assert [guard_health(w)["status"] for w in workers] == ["healthy", "healthy"]


# --- colocation and forks --------------------------------------------------------------------------------------


def test_forks_are_separate_processes_beside_their_targets_with_their_environment(make_scheduler, worker_lane):
    """AReaL tests/test_local_scheduler.py::TestForkColocationBehavior::test_create_forked_workers_via_scheduler,
    ::test_fork_endpoint_spawns_new_process and ::test_forked_worker_inherits_environment; tests/test_ray_scheduler.py
    ::TestForkColocation::test_fork_get_workers_returns_forked_workers; tests/test_slurm_scheduler.py
    ::test_get_workers_for_colocated_role_delegates_to_target (fork=True: own ids and ports, the target's IP); and
    LocalScheduler.fork_workers(command=...), the module the forks run instead of the default one."""
    scheduler = make_scheduler(fork_module="no_such_module_for_forks")  # only `command` can make forks work
    scheduler.create_workers(job("actor", 2, [spec(cpu=2, env_vars={"CUSTOM_VAR": "from-the-spec"})]))
    targets = scheduler.get_workers("actor", timeout=WAIT)
    assert scheduler.fork_workers("ref", "actor", command=worker_lane.fork_module) == ["ref/0", "ref/1"]
    forks = scheduler.get_workers("ref", timeout=WAIT)
    assert [f.id for f in forks] == ["ref/0", "ref/1"]
    for index, (target, fork) in enumerate(zip(targets, forks)):
        assert fork.ip == target.ip and fork.worker_ports != target.worker_ports
        # The same engine name on both: each process has its own engines.
        create_engine(scheduler, target.id, COUNTER, "probe", 1)
        create_engine(scheduler, fork.id, COUNTER, "probe", 100)
        assert scheduler.call_engine(fork.id, "increment", "probe", index) == 100 + index
        assert scheduler.call_engine(target.id, "value", "probe") == 1
        assert scheduler.call_engine(fork.id, "pid", "probe") != scheduler.call_engine(target.id, "pid", "probe")
        # The fork inherits its parent's environment: the spec's env_vars and thread counts.
        assert scheduler.call_engine(fork.id, "env", "probe", "CUSTOM_VAR") == "from-the-spec"
        assert scheduler.call_engine(fork.id, "env", "probe", "OMP_NUM_THREADS") == "2"


def test_colocation_and_fork_requests_are_checked_before_anything_starts(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestWorkerCreation::test_create_workers_colocate_strategy_missing_target
    (target=""), ::TestForkColocationBehavior::test_fork_replica_mismatch_raises_error and
    ::TestColocationBehavior::test_colocation_replica_mismatch_raises_error (fork=True, the default: no fork starts),
    and ::TestWorkerCreation::test_create_workers_duplicate_role_error for a forked role (LocalScheduler keeps forks
    among its workers: "Worker group already exists", the first forks untouched)."""
    scheduler = make_scheduler()
    with pytest.raises(WorkerCreationError) as no_target:
        scheduler.create_workers(job("ref", 1, type="colocation", target=""))
    assert "requires target" in str(no_target.value)
    assert scheduler.history() == []

    scheduler.create_workers(job("actor", 2))
    targets = scheduler.get_workers("actor", timeout=WAIT)
    with pytest.raises(WorkerCreationError) as mismatch:
        scheduler.create_workers(job("ref", 1, type="colocation", target="actor"))
    assert "replica count" in str(mismatch.value).lower()
    assert [guard_health(t)["forked_children"] for t in targets] == [0, 0]
    with pytest.raises(WorkerNotFoundError):
        scheduler.get_workers("ref", timeout=5)

    fork_job = job("ref", 2, type="colocation", target="actor", fork=True)
    assert scheduler.create_workers(fork_job) == ["ref/0", "ref/1"]
    forks = scheduler.get_workers("ref", timeout=WAIT)
    before = revisions(scheduler)
    with pytest.raises(WorkerCreationError) as duplicate:
        scheduler.create_workers(fork_job)
    assert "already exists" in str(duplicate.value) and duplicate.value.worker_key == "ref"
    assert [guard_health(t)["forked_children"] for t in targets] == [1, 1]
    assert scheduler.get_workers("ref", timeout=WAIT) == forks
    assert all(guard_health(fork)["status"] == "healthy" for fork in forks)
    assert revisions(scheduler) == before


# --- deleting workers ------------------------------------------------------------------------------------------


def test_deleting_one_role_leaves_the_others_running(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestDeleteWorkers::test_delete_workers_specific_role (the other role
    stays) and ::test_delete_workers_nonexistent_role (no error, nothing changes), and
    tests/test_slurm_scheduler.py::test_create_and_get_workers (a deleted role is not found afterwards)."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("role1", 1))
    scheduler.create_workers(job("role2", 1))
    scheduler.get_workers("role1", timeout=WAIT)
    (kept,) = scheduler.get_workers("role2", timeout=WAIT)
    create_engine(scheduler, "role2/0", COUNTER, None, 5)
    assert scheduler.call_engine("role2/0", "increment") == 6
    before = revisions(scheduler)

    scheduler.delete_workers("nonexistent")
    assert revisions(scheduler) == before

    scheduler.delete_workers("role1")
    with pytest.raises(WorkerNotFoundError):
        scheduler.get_workers("role1", timeout=5)
    with pytest.raises(WorkerNotFoundError):
        scheduler.call_engine("role1/0", "value")
    assert scheduler.get_workers("role2", timeout=WAIT) == [kept]
    assert scheduler.call_engine("role2/0", "value") == 6  # same process, engine state intact


def test_deleting_everything_removes_forked_and_colocated_roles_too(make_scheduler, tmp_path):
    """AReaL tests/test_local_scheduler.py::TestDeleteWorkers::test_delete_workers_all_roles,
    tests/test_slurm_scheduler.py::test_delete_all_workers and tests/test_ray_scheduler.py
    ::TestWorkerCreationAndDeletion::test_create_delete_workers, with LocalScheduler.delete_workers(None) taking the
    colocated and forked roles first: every engine is destroyed (SlurmScheduler's destroy call), no fork process
    is left, and no role is found afterwards."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("actor", timeout=WAIT)
    scheduler.create_workers(job("ref", 2, type="colocation", target="actor", fork=True))
    forks = scheduler.get_workers("ref", timeout=WAIT)
    scheduler.create_workers(job("critic", 2, type="colocation", target="actor", fork=False))
    markers = {}
    for worker_id in ("actor/0", "actor/1", "ref/0", "ref/1"):
        markers[worker_id] = tmp_path / f"destroyed-{worker_id.replace('/', '-')}"
        create_engine(scheduler, worker_id, COUNTER, None, 0, str(markers[worker_id]))

    scheduler.delete_workers()
    assert {worker_id: wait_for_text(marker) for worker_id, marker in markers.items()} == dict.fromkeys(
        markers, "destroyed"
    )
    assert not any(answers(fork.ip, fork.worker_ports[0]) for fork in forks)
    for role in ("actor", "ref", "critic"):
        with pytest.raises(WorkerNotFoundError):
            scheduler.get_workers(role, timeout=5)


# --- engines ---------------------------------------------------------------------------------------------------


def test_unknown_workers_are_not_found_by_any_engine_call(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestSetEnv::test_set_env_worker_not_found,
    ::TestEngineCreation::test_create_engine_worker_not_found,
    ::TestEngineMethodCalls::test_call_engine_worker_not_found and ::test_async_call_engine_worker_not_found,
    tests/test_slurm_scheduler.py::test_rpc_on_nonexistent_worker:
    WorkerNotFoundError naming the worker id, for an unknown role, an index beyond the replicas, and an id that is
    not "role/index" (LocalScheduler finds none of them among its workers)."""
    scheduler = make_scheduler()

    def check(worker_ids: list[str]) -> None:
        for worker_id in worker_ids:
            calls = {
                "set_worker_env": lambda: asyncio.run(scheduler.set_worker_env(worker_id, {"RANK": "0"})),
                "create_engine": lambda: create_engine(scheduler, worker_id),
                "call_engine": lambda: scheduler.call_engine(worker_id, "value"),
                "async_call_engine": lambda: asyncio.run(scheduler.async_call_engine(worker_id, "value")),
            }
            for name, call in calls.items():
                with pytest.raises(WorkerNotFoundError) as missing:
                    call()
                assert missing.value.worker_id == worker_id, (name, worker_id)

    check(["nonexistent/0"])  # a scheduler that has no workers yet
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor", timeout=WAIT)
    check(["nonexistent/0", "actor/1", "actor"])
    create_engine(scheduler, "actor/0")  # the worker that exists is found
    assert scheduler.call_engine("actor/0", "value") == 0


def test_create_engine_maps_the_servers_answers_like_areal(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestEngineCreation: ::test_create_engine_success (the server's "result",
    None for both servers), ::test_create_engine_invalid_engine_type and tests/test_slurm_scheduler.py
    ::test_create_engine_not_string (EngineCreationError "must be a string"), ::test_create_engine_import_error
    (EngineImportError naming the path), ::test_create_engine_initialization_error (EngineCreationError with
    status_code 500), and LocalScheduler.create_engine's other HTTP 400 (a duplicate engine name):
    EngineCreationError with status_code 400, not an import error."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor", timeout=WAIT)

    assert create_engine(scheduler, "actor/0", COUNTER, None, 3) is None
    with pytest.raises(EngineCreationError) as not_a_string:
        create_engine(scheduler, "actor/0", 123, "numeric")
    assert "must be a string" in str(not_a_string.value)
    with pytest.raises(EngineImportError) as not_importable:
        create_engine(scheduler, "actor/0", "nonexistent.module.Engine", "missing")
    assert not_importable.value.import_path == "nonexistent.module.Engine"
    assert "nonexistent.module.Engine" in str(not_importable.value)
    with pytest.raises(EngineCreationError) as broken:
        create_engine(scheduler, "actor/0", BROKEN, "broken")
    assert broken.value.status_code == 500 and "refuses to start" in str(broken.value)
    with pytest.raises(EngineCreationError) as duplicate:
        create_engine(scheduler, "actor/0", COUNTER, "actor/0")
    assert not isinstance(duplicate.value, EngineImportError)
    assert duplicate.value.status_code == 400 and "already exists" in str(duplicate.value)
    assert scheduler.call_engine("actor/0", "value") == 3  # the first engine is untouched


def test_engine_calls_answered_400_or_500_fail_at_once_without_retries(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestEngineMethodCalls::test_call_engine_method_error (400: no such
    method) and LocalScheduler.call_engine / async_call_engine: 400 and 500 raise EngineCallError on the first
    attempt, whatever max_retries and retry_delay say."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor", timeout=WAIT)
    create_engine(scheduler, "actor/0")
    retrying = {"max_retries": 5, "retry_delay": 30.0}
    calls = {
        ("sync", 400): lambda: scheduler.call_engine("actor/0", "no_such_method", **retrying),
        ("async", 400): lambda: asyncio.run(scheduler.async_call_engine("actor/0", "no_such_method", **retrying)),
        ("async", 500): lambda: asyncio.run(scheduler.async_call_engine("actor/0", "fail", None, "boom", **retrying)),
    }
    for (mode, status), call in calls.items():
        started = time.monotonic()
        with pytest.raises(EngineCallError) as failed:
            call()
        assert time.monotonic() - started < 20.0, (mode, status)  # a retry would have waited 30 s first
        assert failed.value.attempt == 1, (mode, status)
        assert ("no_such_method" if status == 400 else "boom") in str(failed.value), (mode, status)


def test_other_answers_are_retried_with_exponential_backoff(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestEngineMethodCalls::test_call_engine_max_retries_exhausted,
    ::test_call_engine_exponential_backoff, ::test_call_engine_retry_on_503 and
    ::test_async_call_engine_retry_with_backoff. AReaL's servers answer 404 for an unknown engine name, a status
    LocalScheduler retries like 503 (delay retry_delay * 2**(attempt-1)) and then gives up with EngineCallError
    (attempt = max_retries); an engine created meanwhile answers a later attempt."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor", timeout=WAIT)

    started = time.monotonic()
    with pytest.raises(EngineCallError) as exhausted:
        scheduler.call_engine("actor/0", "value", "nobody", max_retries=4, retry_delay=0.5)
    elapsed = time.monotonic() - started
    assert 0.5 + 1.0 + 2.0 - 0.1 <= elapsed < 60.0  # exponential: linear delays would sum to 1.5 s
    assert exhausted.value.attempt == 4 and "HTTP 404" in str(exhausted.value)

    async def async_exhausted() -> tuple[EngineCallError, float]:
        began = time.monotonic()
        try:
            await scheduler.async_call_engine("actor/0", "value", "nobody", max_retries=3, retry_delay=0.5)
        except EngineCallError as error:
            return error, time.monotonic() - began
        raise AssertionError("async_call_engine of an unknown engine returned")

    error, elapsed = asyncio.run(async_exhausted())
    assert 0.5 + 1.0 - 0.1 <= elapsed < 60.0
    assert error.attempt == 3 and "HTTP 404" in str(error)

    # A call that is retried succeeds once the engine exists: sync (another thread creates the engine) ...
    outcome: dict[str, object] = {}

    def call_late_engine() -> None:
        began = time.monotonic()
        outcome["value"] = scheduler.call_engine("actor/0", "value", "late", max_retries=6, retry_delay=1.0)
        outcome["elapsed"] = time.monotonic() - began

    caller = threading.Thread(target=call_late_engine)
    caller.start()
    time.sleep(0.5)
    create_engine(scheduler, "actor/0", COUNTER, "late", 41)
    caller.join(timeout=120)
    assert outcome.get("value") == 41 and outcome["elapsed"] >= 1.0  # answered by a retry

    # ... and async (the engine is created on the same event loop while the call backs off).
    async def async_late_engine() -> tuple[int, float]:
        async def create_later() -> None:
            await asyncio.sleep(0.5)
            await scheduler.create_engine("actor/0", COUNTER, "later", 42)

        began = time.monotonic()
        value, _ = await asyncio.gather(
            scheduler.async_call_engine("actor/0", "value", "later", max_retries=6, retry_delay=1.0), create_later()
        )
        return value, time.monotonic() - began

    value, elapsed = asyncio.run(async_late_engine())
    assert value == 42 and elapsed >= 1.0


def test_a_fork_that_stopped_answering_is_a_connection_error_and_is_retried(make_scheduler):
    """AReaL tests/test_local_scheduler.py::TestEngineCreation::test_create_engine_connection_error_worker_alive: when
    the worker cannot be reached but is not known dead (a forked worker has no process of its own to check),
    create_engine raises RPCConnectionError with its id, host and port; LocalScheduler.call_engine /
    async_call_engine retry connection errors with backoff, then raise EngineCallError. Its sibling forks work on."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    targets = scheduler.get_workers("actor", timeout=WAIT)
    scheduler.fork_workers("ref", "actor")
    forks = scheduler.get_workers("ref", timeout=WAIT)
    create_engine(scheduler, "ref/1", COUNTER, None, 5)

    # The fork ref/0 goes away behind the scheduler's back; its parent's pod lives on.
    assert guard_post(targets[0], "/kill_forked_worker", {"role": "ref", "worker_index": 0}) == 200
    assert not answers(forks[0].ip, forks[0].worker_ports[0])

    with pytest.raises(RPCConnectionError) as refused:
        create_engine(scheduler, "ref/0")
    assert (refused.value.worker_id, refused.value.host, refused.value.port) == (
        "ref/0",
        forks[0].ip,
        int(forks[0].worker_ports[0]),
    )

    started = time.monotonic()
    with pytest.raises(EngineCallError) as exhausted:
        scheduler.call_engine("ref/0", "value", max_retries=3, retry_delay=0.5)
    assert time.monotonic() - started >= 0.5 + 1.0 - 0.1
    assert exhausted.value.attempt == 3 and "Connection error" in str(exhausted.value)
    with pytest.raises(EngineCallError) as async_exhausted:
        asyncio.run(scheduler.async_call_engine("ref/0", "value", max_retries=2, retry_delay=0.5))
    assert async_exhausted.value.attempt == 2 and "Connection error" in str(async_exhausted.value)

    assert scheduler.call_engine("ref/1", "increment") == 6
    assert guard_health(targets[1])["forked_children"] == 1
