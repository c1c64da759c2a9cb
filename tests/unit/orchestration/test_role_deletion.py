"""How a role, a fork, a colocation or the whole release goes: engines destroyed and process forks killed before
their pods, rank 0 last with reverse_order, a role's pods waited gone (fakes record the order)."""

from __future__ import annotations

import pytest

from areal_workers import naming
from areal_workers.orchestration.deletion import Deletion
from areal_workers.release.model import ReleaseModel

MODEL = ReleaseModel(
    values={"roles": {"actor": {"replicas": 2}, "critic": {"replicas": 2}}},
    topology={
        "roles": {"actor": {"replicas": 2}, "critic": {"replicas": 2}},
        "forks": {"ref": {"target": "actor", "mode": "process"}, "judge": {"target": "actor", "mode": "pod"}},
        "colocations": {"reward": "critic"},
    },
    revision=5,
)


class Recorder:
    def __init__(self) -> None:
        self.steps: list[tuple] = []


class FakeCleanup:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def wait_gone(self, selector: str) -> None:
        self.recorder.steps.append(("wait_gone", selector))


class FakeDriver:
    name = "rel"

    def __init__(self, recorder: Recorder) -> None:
        self.recorder, self.model, self.cleanup = recorder, MODEL, FakeCleanup(recorder)

    def apply(self, values, description, role):
        self.recorder.steps.append(("apply", description, role, sorted(values.get("roles") or {})))

    def scale_down_to_rank_zero(self, role):
        self.recorder.steps.append(("scale_down", role))

    def settle(self):
        self.recorder.steps.append(("settle",))

    def uninstall(self):
        self.recorder.steps.append(("uninstall",))


class FakeForks:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def kill(self, role, reverse_order):
        self.recorder.steps.append(("kill", role, reverse_order))


class FakeCalls:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder

    def destroy_engines(self, roles):
        self.recorder.steps.append(("destroy", list(roles)))


@pytest.fixture
def recorded():
    recorder = Recorder()
    deletion = Deletion(FakeDriver(recorder), FakeForks(recorder), FakeCalls(recorder))  # type: ignore[arg-type]
    return deletion, recorder.steps


def test_a_role_destroys_its_engines_then_goes_and_its_pods_are_waited_gone(recorded):
    deletion, steps = recorded
    deletion.delete_role("critic", reverse_order=False)
    assert steps == [
        ("destroy", ["critic"]),
        ("apply", "delete critic", "critic", ["actor"]),
        ("wait_gone", naming.role_selector("rel", "critic")),
        ("settle",),
    ]


def test_reverse_order_scales_a_role_down_to_rank_zero_before_it_goes(recorded):
    deletion, steps = recorded
    deletion.delete_role("critic", reverse_order=True)
    assert [step[0] for step in steps] == ["destroy", "scale_down", "apply", "wait_gone", "settle"]
    assert steps[1] == ("scale_down", "critic")


def test_a_process_fork_is_killed_after_its_engines_and_before_its_revision(recorded):
    deletion, steps = recorded
    deletion.delete_role("ref", reverse_order=True)
    assert steps == [
        ("destroy", ["ref"]),
        ("kill", "ref", True),
        ("apply", "delete fork ref", "ref", ["actor", "critic"]),
        ("settle",),
    ]


def test_a_pod_mode_fork_has_no_process_to_kill(recorded):
    deletion, steps = recorded
    deletion.delete_role("judge", reverse_order=False)
    assert [step[0] for step in steps] == ["destroy", "apply", "settle"]


def test_a_colocation_is_only_removed_from_the_values(recorded):
    deletion, steps = recorded
    deletion.delete_role("reward", reverse_order=True)
    assert steps == [("apply", "remove colocation reward", "reward", ["actor", "critic"]), ("settle",)]


def test_the_release_destroys_every_engine_kills_process_forks_then_uninstalls(recorded):
    deletion, steps = recorded
    deletion.delete_release(reverse_order=False)
    assert steps == [("destroy", ["ref", "judge", "actor", "critic"]), ("kill", "ref", False), ("uninstall",)]


def test_the_release_in_reverse_order_leaves_only_rank_zero_before_the_uninstall(recorded):
    deletion, steps = recorded
    deletion.delete_release(reverse_order=True)
    assert steps[-3:] == [("scale_down", "actor"), ("scale_down", "critic"), ("uninstall",)]
    assert steps[1] == ("kill", "ref", True)
