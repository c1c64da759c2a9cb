"""The scheduler on AReaL's real worker server: `python -m areal.infra.rpc.rpc_server` of areal 1.0.4 on CPU
(`make areal-worker`), run by podrunner for every worker pod and started by the real server's /fork for every
process-mode fork. Only the conformance lane runs these (AREAL_WORKERS_WORKER=areal, `make test-areal`).

test_scheduler.py runs on this server too, except its `reference_guard_only` tests, which read fields only our
stand-in's /health has (role, index, host, configuration). The same facts are checked here the way AReaL's server
shows them: its exact /health, its command line as seen from an engine inside it, its name-resolve record and
fork logs under the chart's --nfs-record-root and --fileroot. The engines are tools/localworker/areal_engines.py.
"""

from __future__ import annotations

import asyncio

import pytest

from areal_workers import EngineCallError, EngineCreationError, EngineImportError
from clusterlib import flag_values, guard_health, job, wait_for_text

pytestmark = pytest.mark.areal_worker

ENGINE = "localworker.areal_engines.Counter"
BROKEN = "localworker.areal_engines.Broken"
IDLE_HEALTH = {"status": "healthy", "forked_children": 0, "engine_count": 0, "engines": []}


def create_engines(scheduler, engines: list[tuple]) -> None:
    """create_engine(worker_id, engine, engine_name, *args) for each tuple, in order."""

    async def create():
        for worker_id, engine, name, *args in engines:
            await scheduler.create_engine(worker_id, engine, name, *args)

    asyncio.run(create())


def test_workers_run_arealss_server_with_the_charts_command_line(make_scheduler, tmp_path):
    scheduler = make_scheduler()
    assert scheduler.create_workers(job("actor", 2)) == ["actor/0", "actor/1"]
    workers = scheduler.get_workers("actor")
    assert [w.id for w in workers] == ["actor/0", "actor/1"]
    assert all(guard_health(worker) == IDLE_HEALTH for worker in workers)

    create_engines(scheduler, [(w.id, ENGINE, w.id) for w in workers])
    for index, worker in enumerate(workers):
        assert guard_health(worker)["engines"] == [worker.id]
        argv = flag_values(scheduler.call_engine(worker.id, "argv", worker.id))
        assert (argv["--host"], argv["--port"]) == (worker.ip, worker.worker_ports[0])
        assert (argv["--experiment-name"], argv["--trial-name"], argv["--role"], argv["--worker-index"]) == (
            "exp",
            "trial0",
            "actor",
            str(index),
        )
        assert scheduler.call_engine(worker.id, "get_env", worker.id, "AREAL_WORKER_ID") == worker.id
        # podrunner forked it from its fork server (tools/podrunner/fork_server.py), not a fall-back exec.
        parent = scheduler.call_engine(worker.id, "parent_command", worker.id)
        assert parent[1].endswith("fork_server.py") and parent[-1] == "areal.infra.rpc.rpc_server", parent
    # The server registers itself in name_resolve under the chart's --nfs-record-root.
    records = {p.read_text().strip() for p in (tmp_path / "areal" / "name_resolve").rglob("*") if p.is_file()}
    assert {f"{w.ip}:{w.worker_ports[0]}" for w in workers} <= records


def test_engine_calls_and_their_errors_as_the_real_server_answers_them(make_scheduler):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    worker = scheduler.get_workers("actor")[0]

    async def create() -> dict[str, BaseException]:
        await scheduler.create_engine("actor/0", ENGINE, None, 7)  # engine_name defaults to the worker id
        await scheduler.set_worker_env("actor/0", {"RANK": "0", "WORLD_SIZE": "1"})
        errors = {}
        for name, engine in [
            ("actor/0", ENGINE),
            ("missing", "no_such_module.Engine"),
            ("plain", "collections.OrderedDict"),
            ("broken", BROKEN),
        ]:
            try:
                await scheduler.create_engine("actor/0", engine, name)
            except Exception as error:  # noqa: BLE001 - each failure is checked below
                errors[name] = error
        return errors

    errors = asyncio.run(create())
    assert isinstance(errors["actor/0"], EngineCreationError) and "already exists" in str(errors["actor/0"])
    assert isinstance(errors["missing"], EngineImportError)
    assert isinstance(errors["plain"], EngineCreationError) and "subclass of TrainEngine" in str(errors["plain"])
    assert isinstance(errors["broken"], EngineCreationError) and "refuses to start" in str(errors["broken"])
    assert guard_health(worker)["engines"] == ["actor/0"]

    assert scheduler.call_engine("actor/0", "value") == 7
    assert scheduler.call_engine("actor/0", "add", "actor/0", 2, b=3) == 5
    payload = {"list": [1, 2.5, None, True, "x"], "nested": {"empty": {}}}
    assert scheduler.call_engine("actor/0", "echo", "actor/0", payload) == payload
    assert scheduler.call_engine("actor/0", "env", "actor/0", "WORLD_SIZE") == "1"
    with pytest.raises(EngineCallError) as raised:  # 500 from the server: not retried
        scheduler.call_engine("actor/0", "fail", "actor/0", "boom")
    assert "boom" in str(raised.value) and raised.value.attempt == 1
    with pytest.raises(EngineCallError) as no_method:  # 400 from the server: not retried
        scheduler.call_engine("actor/0", "no_such_method", "actor/0")
    assert "does not have method" in str(no_method.value) and no_method.value.attempt == 1
    with pytest.raises(EngineCallError) as no_engine:  # 404 from the server
        scheduler.call_engine("actor/0", "ping", "nobody", max_retries=1)
    assert no_engine.value.attempt == 1


def test_process_forks_are_children_of_the_real_server(make_scheduler, tmp_path):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    targets = scheduler.get_workers("actor")
    assert scheduler.create_workers(job("ref", 2, type="colocation", target="actor", fork=True)) == ["ref/0", "ref/1"]
    forks = scheduler.get_workers("ref")
    for target, fork in zip(targets, forks):
        assert fork.ip == target.ip and fork.worker_ports[0] not in target.worker_ports
        assert guard_health(fork) == IDLE_HEALTH
        assert guard_health(target)["forked_children"] == 1

    create_engines(scheduler, [("ref/1", ENGINE, "ref", 100)])
    assert scheduler.call_engine("ref/1", "value", "ref") == 100
    argv = flag_values(scheduler.call_engine("ref/1", "argv", "ref"))
    assert (argv["--host"], argv["--port"], argv["--role"], argv["--worker-index"]) == (
        forks[1].ip,
        forks[1].worker_ports[0],
        "ref",
        "1",
    )
    # AReaL's /fork streams a child's output to <fileroot>/logs/<user>/<experiment>/<trial>/<role>.log (the
    # user as the worker's environment names it).
    assert len(list((tmp_path / "areal" / "logs").glob("*/exp/trial0/ref.log"))) == 1

    scheduler.delete_workers("ref")
    assert [guard_health(target)["forked_children"] for target in targets] == [0, 0]


def test_deleted_workers_destroy_their_engines(make_scheduler, tmp_path):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    own, other = tmp_path / "own-destroyed", tmp_path / "other-destroyed"
    create_engines(
        scheduler, [("actor/0", ENGINE, "actor/0", 0, str(own)), ("actor/0", ENGINE, "other", 0, str(other))]
    )
    scheduler.delete_workers("actor")
    assert own.read_text() == "destroyed"  # the scheduler's destroy call to the worker's own engine
    assert wait_for_text(other) == "destroyed"  # the server's SIGTERM hook, for every engine it holds
