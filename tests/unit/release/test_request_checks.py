"""Which of AReaL's requests fit the release as its model shows it, refused with AReaL's errors and messages (pure)."""

from __future__ import annotations

import pytest

from areal_workers.areal_types import Job
from areal_workers.errors import InvalidRequestError, WorkerCreationError, WorkerNotFoundError
from areal_workers.release import request_checks
from areal_workers.release.model import ReleaseModel
from areal_workers.release.values import TopologyError

MODEL = ReleaseModel(
    values={"roles": {"actor": {"replicas": 2}, "critic": {"replicas": 3}}},
    topology={
        "roles": {
            "actor": {"replicas": 2, "guard_port": 8000, "extra_ports": []},
            "critic": {"replicas": 3, "guard_port": 8000, "extra_ports": []},
        },
        "forks": {"ref": {"target": "actor", "mode": "process"}},
        "colocations": {"reward": "actor"},
    },
    revision=4,
)


def test_a_job_that_cannot_become_values_is_a_creation_error_not_a_topology_error():
    with pytest.raises(WorkerCreationError) as info:
        request_checks.spec(Job(role="Bad_Role", replicas=1))
    assert not isinstance(info.value, TopologyError)
    assert info.value.worker_key == "Bad_Role" and info.value.reason == "Invalid role name"
    with pytest.raises(WorkerCreationError) as info:
        request_checks.spec(Job(role="actor", replicas=0))
    assert info.value.details == "replicas must be greater than 0"


def test_as_creation_error_passes_other_exceptions_through():
    with pytest.raises(KeyError), request_checks.as_creation_error():
        raise KeyError("not a topology problem")


def test_only_a_managed_release_may_be_changed():
    request_checks.require_managed("managed", "rel", "scale_workers")
    with pytest.raises(WorkerCreationError) as info:
        request_checks.require_managed("external", "rel", "scale_workers")
    assert info.value.worker_key == "rel" and info.value.reason == "scale_workers is not allowed on an external release"


def test_a_role_must_be_a_role_of_the_release():
    request_checks.require_role(MODEL, "actor")
    for not_a_role in ("ref", "reward", "missing"):  # a fork or a colocation is no role of its own
        with pytest.raises(WorkerNotFoundError):
            request_checks.require_role(MODEL, not_a_role)


@pytest.mark.parametrize("taken", ["actor", "ref", "reward"])
def test_a_new_role_may_not_reuse_a_role_fork_or_colocation_name(taken):
    with pytest.raises(WorkerCreationError) as info:
        request_checks.require_new(MODEL, taken)
    assert info.value.reason == "Worker group already exists" and f"delete_workers('{taken}')" in info.value.details
    request_checks.require_new(MODEL, "fresh")


def test_strategy_is_separation_or_colocation():
    request_checks.require_strategy("actor", "separation")
    request_checks.require_strategy("actor", "colocation")
    with pytest.raises(InvalidRequestError) as info:
        request_checks.require_strategy("actor", "spread")
    assert isinstance(info.value, ValueError) and "'spread'" in info.value.details


@pytest.mark.parametrize("replicas", [0, -1, True, 1.0, "2", None])
def test_replica_count_must_be_a_positive_integer(replicas):
    with pytest.raises(WorkerCreationError) as info:
        request_checks.require_replica_count("actor", replicas)
    assert repr(replicas) in info.value.details


def test_a_positive_integer_replica_count_is_accepted():
    request_checks.require_replica_count("actor", 1)
    request_checks.require_replica_count("actor", 64)


def test_a_role_with_dependents_keeps_its_replica_count():
    request_checks.require_same_replicas(MODEL, "actor", 2)  # unchanged
    request_checks.require_same_replicas(MODEL, "critic", 5)  # nothing lives on critic
    with pytest.raises(WorkerCreationError) as info:
        request_checks.require_same_replicas(MODEL, "actor", 4)
    assert info.value.reason == "Replica count mismatch"
    assert "['reward', 'ref']" in info.value.details  # colocations first, then forks


def test_a_colocation_target_is_a_role_or_fork_of_the_same_replica_count():
    assert request_checks.require_colocation_target(MODEL, "new", 2, "actor") == "actor"
    assert request_checks.require_colocation_target(MODEL, "new", 2, "ref") == "ref"  # a fork: its target's count
    with pytest.raises(WorkerCreationError) as info:
        request_checks.require_colocation_target(MODEL, "new", 2, None)
    assert info.value.details == "Colocation strategy requires target role to be specified"
    with pytest.raises(WorkerNotFoundError):
        request_checks.require_colocation_target(MODEL, "new", 2, "reward")  # a colocation is no target
    with pytest.raises(WorkerCreationError) as info:
        request_checks.require_colocation_target(MODEL, "new", 2, "critic")
    assert info.value.details.startswith("Colocated role must have same replica count as target (2 != 3); ")
    assert "give new 3 replicas" in info.value.details and "separation" in info.value.details


def test_a_fork_is_a_new_validly_named_role_of_an_existing_role():
    request_checks.require_fork(MODEL, "ref2", "actor")
    with pytest.raises(WorkerNotFoundError):
        request_checks.require_fork(MODEL, "ref2", "ref")  # no fork of a fork
    with pytest.raises(WorkerNotFoundError):
        request_checks.require_fork(MODEL, "ref2", "reward")  # nor of a colocation
    with pytest.raises(WorkerCreationError) as info:
        request_checks.require_fork(MODEL, "ref", "actor")
    assert info.value.reason == "Worker group already exists"
    with pytest.raises(WorkerCreationError) as info:
        request_checks.require_fork(MODEL, "Ref_2", "actor")
    assert info.value.reason == "Invalid role name"
