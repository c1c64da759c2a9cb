"""WorkerCalls (orchestration/worker_calls.py): a worker id resolved to the worker AReaL holds (or waited for when
its role exists but is not known yet), the engine calls sent to its guard in AReaL's serialization with the
worker's own engine by default, the experiment config by rank, and engine.destroy() that reports but never
raises. The driver, finder, guard and loop are small fakes recording what they are asked."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import pytest

from areal_workers.areal_types import Worker
from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.errors import WorkerNotFoundError
from areal_workers.guard.client import CallOptions
from areal_workers.guard.wire_format import serialize_value
from areal_workers.orchestration import worker_calls
from areal_workers.orchestration.worker_calls import WorkerCalls

RELEASE = "aw-exp-trial-1a2b3c4d"


def worker(worker_id: str) -> Worker:
    index = int(worker_id.rpartition("/")[2])
    return Worker(id=worker_id, ip=f"127.30.0.{index + 1}", worker_ports=["8000"])


class FakeFinder:
    """known_workers from a dictionary (a role missing: not known yet); check_alive records the worker."""

    def __init__(self, known: dict[str, list[Worker]]) -> None:
        self.known = known
        self.checked: list[str] = []

    def known_workers(self, role: str) -> list[Worker] | None:
        return self.known.get(role)

    def check_alive(self, checked: Worker) -> None:
        self.checked.append(checked.id)


class FakeGuard:
    """Records each request (name, worker id, the rest); `answer` is what call and async_call return."""

    def __init__(self, answer: Any = None, failures: dict[str, str] | None = None) -> None:
        self.requests: list[tuple[Any, ...]] = []
        self.answer = answer
        self.failures = failures or {}

    async def create_engine(self, target: Worker, engine: str, name: str, args: Any, kwargs: Any) -> str:
        self.requests.append(("create_engine", target.id, engine, name, args, kwargs))
        return f"created {name}"

    async def set_env(self, target: Worker, env: dict[str, str]) -> None:
        self.requests.append(("set_env", target.id, env))

    def call(self, target: Worker, method: str, name: str, args: Any, kwargs: Any, options: CallOptions) -> Any:
        self.requests.append(("call", target.id, method, name, args, kwargs, options))
        return self.answer

    async def async_call(
        self, target: Worker, method: str, name: str, args: Any, kwargs: Any, options: CallOptions
    ) -> Any:
        self.requests.append(("async_call", target.id, method, name, args, kwargs, options))
        return self.answer

    def configure(self, target: Worker, payload: Any) -> None:
        self.requests.append(("configure", target.id, payload))

    async def destroy_engines(self, workers: list[Worker], timeout: float) -> dict[str, str]:
        self.requests.append(("destroy_engines", [w.id for w in workers], timeout))
        return self.failures


class Waits:
    """The scheduler's get_workers(role, timeout): records each wait and answers from `workers`."""

    def __init__(self, workers: dict[str, list[Worker]] | None = None) -> None:
        self.workers = workers or {}
        self.waited: list[tuple[str, float]] = []

    def __call__(self, role: str, timeout: float) -> list[Worker]:
        self.waited.append((role, timeout))
        return self.workers.get(role, [])


def calls_for(
    known: dict[str, list[Worker]],
    roles: set[str],
    guard: FakeGuard | None = None,
    waits: Waits | None = None,
    config: KubernetesSchedulerConfig | None = None,
) -> WorkerCalls:
    """WorkerCalls over fakes: `roles` are those the release has, `known` the workers AReaL already holds."""
    driver: Any = SimpleNamespace(model=SimpleNamespace(exists=lambda role: role in roles))
    loop: Any = SimpleNamespace(run=asyncio.run)
    return WorkerCalls(
        driver,
        FakeFinder(known),  # type: ignore[arg-type]
        guard or FakeGuard(),  # type: ignore[arg-type]
        loop,
        config or KubernetesSchedulerConfig(namespace="rl", release_name=RELEASE),
        waits or Waits(),
    )


RETRIES = CallOptions(http_timeout=12.0, max_retries=2, retry_delay=0.5)
TRACED = CallOptions({"trace": "t"}, 12.0, 2, 0.5)


def test_a_known_worker_is_read_by_its_index_without_a_wait():
    actors = [worker("actor/0"), worker("actor/1")]
    waits = Waits()
    calls = calls_for({"actor": actors}, {"actor"}, waits=waits)
    assert calls.worker("actor/1") is actors[1]
    assert waits.waited == []


def test_a_worker_of_a_role_not_known_yet_is_waited_for_with_the_ready_timeout():
    critics = [worker("critic/0"), worker("critic/1")]
    waits = Waits({"critic": critics})
    config = KubernetesSchedulerConfig(namespace="rl", release_name=RELEASE, ready_timeout=42.0)
    calls = calls_for({}, {"critic"}, waits=waits, config=config)
    assert calls.worker("critic/1") is critics[1]
    assert waits.waited == [("critic", 42.0)]


@pytest.mark.parametrize(
    "worker_id",
    [
        "actor",  # no index
        "actor/x",  # not a number
        "/0",  # no role
        "actor/2",  # past the role's workers
        "ref/0",  # a role the release does not have
    ],
)
def test_an_id_that_names_no_worker_is_not_found_and_a_missing_role_is_not_waited_for(worker_id):
    waits = Waits()
    calls = calls_for({"actor": [worker("actor/0"), worker("actor/1")]}, {"actor"}, waits=waits)
    with pytest.raises(WorkerNotFoundError):
        calls.worker(worker_id)
    assert waits.waited == []


def test_a_wait_that_returns_no_workers_is_not_found():
    calls = calls_for({}, {"actor"}, waits=Waits({"actor": []}))
    with pytest.raises(WorkerNotFoundError):
        calls.worker("actor/0")


def test_aworker_reads_a_known_worker_on_the_loop_and_waits_for_others_in_a_thread(monkeypatch):
    actors = [worker("actor/0")]
    critics = [worker("critic/0")]
    waits = Waits({"critic": critics})
    calls = calls_for({"actor": actors}, {"actor", "critic"}, waits=waits)
    hops: list[str] = []
    real_to_thread = asyncio.to_thread

    async def to_thread(function: Any, *args: Any) -> Any:
        hops.append(args[0])
        return await real_to_thread(function, *args)

    monkeypatch.setattr(worker_calls.asyncio, "to_thread", to_thread)
    assert asyncio.run(calls.aworker("actor/0")) is actors[0]
    assert hops == []
    assert asyncio.run(calls.aworker("critic/0")) is critics[0]
    assert hops == ["critic/0"] and waits.waited == [("critic", 600.0)]
    # An index past the known workers goes through worker(), which says it is not found.
    with pytest.raises(WorkerNotFoundError):
        asyncio.run(calls.aworker("actor/1"))


def test_create_engine_checks_the_worker_is_alive_and_names_the_engine_after_it_by_default():
    guard = FakeGuard()
    calls = calls_for({"actor": [worker("actor/0")]}, {"actor"}, guard=guard)
    created = asyncio.run(calls.create_engine("actor/0", "areal.Engine", None, (1, "a"), {"k": True}))
    assert created == "created actor/0"
    assert calls.finder.checked == ["actor/0"]  # type: ignore[attr-defined]
    assert guard.requests == [("create_engine", "actor/0", "areal.Engine", "actor/0", [1, "a"], {"k": True})]
    asyncio.run(calls.create_engine("actor/0", "areal.Engine", "ref", (), {}))
    assert guard.requests[-1][3] == "ref"


def test_call_serializes_the_arguments_and_deserializes_the_result():
    answered = worker("actor/1")
    guard = FakeGuard(answer=serialize_value(answered))  # a dataclass on the wire: a typed dict
    calls = calls_for({"actor": [worker("actor/0")]}, {"actor"}, guard=guard)
    argument = worker("actor/0")
    result = calls.call("actor/0", "step", None, (argument,), {"n": 2}, TRACED)
    assert result == answered and isinstance(result, Worker)
    assert guard.requests == [("call", "actor/0", "step", "actor/0", serialize_value([argument]), {"n": 2}, TRACED)]
    assert guard.requests[0][4][0]["type"] == "dataclass"  # the argument went as AReaL's typed dict
    calls.call("actor/0", "step", "ref", (), {}, RETRIES)
    assert guard.requests[-1][3] == "ref"


def test_async_call_sends_what_call_sends_and_deserializes_the_result():
    answered = worker("actor/0")
    guard = FakeGuard(answer=serialize_value({"worker": answered}))
    calls = calls_for({"actor": [worker("actor/0")]}, {"actor"}, guard=guard)
    result = asyncio.run(calls.async_call("actor/0", "step", None, (3,), {}, RETRIES))
    assert result == {"worker": answered}
    assert guard.requests == [("async_call", "actor/0", "step", "actor/0", [3], {}, RETRIES)]


def test_set_env_goes_to_the_named_worker():
    guard = FakeGuard()
    calls = calls_for({"actor": [worker("actor/0"), worker("actor/1")]}, {"actor"}, guard=guard)
    asyncio.run(calls.set_env("actor/1", {"A": "1"}))
    assert guard.requests == [("set_env", "actor/1", {"A": "1"})]


def test_configure_sends_each_worker_the_config_its_role_and_its_rank_in_order():
    guard = FakeGuard()
    calls = calls_for({}, set(), guard=guard)
    workers = [worker("actor/1"), worker("actor/0"), worker("rollout/gen/0")]
    calls.configure(workers, {"lr": 0.1})
    assert guard.requests == [
        ("configure", "actor/1", {"config": {"lr": 0.1}, "role": "actor", "rank": 0}),
        ("configure", "actor/0", {"config": {"lr": 0.1}, "role": "actor", "rank": 1}),
        # The role is all before the last "/", as AReaL's schedulers take it.
        ("configure", "rollout/gen/0", {"config": {"lr": 0.1}, "role": "rollout/gen", "rank": 2}),
    ]


def test_destroy_reaches_the_known_workers_of_the_roles_within_the_timeout_and_logs_failures(caplog):
    guard = FakeGuard(failures={"actor/1": "timed out"})
    config = KubernetesSchedulerConfig(namespace="rl", release_name=RELEASE, destroy_timeout=7.0)
    known = {"actor": [worker("actor/0"), worker("actor/1")], "critic": [worker("critic/0")]}
    calls = calls_for(known, {"actor", "critic", "ref"}, guard=guard, config=config)
    with caplog.at_level(logging.INFO, logger=worker_calls.__name__):
        calls.destroy_engines(["actor", "ref"])  # ref: no workers known, nothing to destroy
    assert guard.requests == [("destroy_engines", ["actor/0", "actor/1"], 7.0)]
    assert "destroy on actor/1 before deletion: timed out" in caplog.text
