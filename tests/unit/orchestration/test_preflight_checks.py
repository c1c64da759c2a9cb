"""What is checked on the next revision's rendered manifests before helm applies it: node fit by capacity_check's
mode, the LocalQueues the changed workloads name, a first install's stale name_resolve records (pure; fakes)."""

from __future__ import annotations

import json
import logging

import pytest

from areal_workers import naming
from areal_workers.errors import WorkerCreationError
from areal_workers.orchestration import preflight
from areal_workers.pods.admission import QUEUE_LABEL
from areal_workers.release import name_records


def statefulset(role: str, queue: str | None = None) -> dict:
    labels = {naming.LABEL_ROLE: role, **({QUEUE_LABEL: queue} if queue else {})}
    return {"kind": "StatefulSet", "metadata": {"name": role, "labels": labels}}


class Queues:
    """The inspector's LocalQueue look-up: True exists, False not found, None unknown (no read access)."""

    def __init__(self, answers: dict[str, bool | None]) -> None:
        self.answers, self.asked = answers, []

    def local_queue_exists(self, queue: str) -> bool | None:
        self.asked.append(queue)
        return self.answers.get(queue, True)


@pytest.fixture
def problems(monkeypatch):
    found: list[str] = []
    monkeypatch.setattr(preflight.capacity, "preflight", lambda manifests, workloads, nodes: list(found))
    return found


def test_reject_refuses_with_every_problem_and_the_way_out(problems):
    problems.extend(["actor: needs 8 GPUs, the largest node has 4", "critic: needs 900Gi"])
    with pytest.raises(WorkerCreationError) as info:
        preflight.check_capacity([], ("actor",), [], "reject", "actor")
    error = info.value
    assert error.worker_key == "actor" and error.reason == "No node can hold a worker"
    assert error.details.splitlines()[:2] == problems
    # Each way to set it: the config field, its variable, the command's flag (main.py's up --capacity-check).
    assert "capacity_check 'warn' or 'off'" in error.details and "AREAL_K8S_CAPACITY_CHECK=warn" in error.details
    assert "areal-workers up --capacity-check warn" in error.details


def test_warn_logs_each_problem_and_goes_on(problems, caplog):
    problems.extend(["actor: too big", "critic: too big"])
    with caplog.at_level(logging.WARNING, logger=preflight.__name__):
        preflight.check_capacity([], ("actor",), [], "warn", "actor")
    assert [r.getMessage() for r in caplog.records] == [
        "capacity check: actor: too big",
        "capacity check: critic: too big",
    ]


def test_no_problem_passes_in_reject_mode(problems):
    preflight.check_capacity([], ("actor",), [], "reject", "actor")


def test_a_missing_local_queue_of_a_changed_workload_refuses_the_change():
    manifests = [statefulset("actor", "team-a"), statefulset("critic", "gone"), statefulset("ref", "also-gone")]
    queues = Queues({"gone": False, "also-gone": False})
    with pytest.raises(WorkerCreationError) as info:
        preflight.check_queues(manifests, ("actor", "critic"), queues, "ns", "critic")  # ref is not changed
    assert info.value.reason == "Kueue LocalQueue 'gone' not found in namespace ns"
    assert "kubectl -n ns get localqueues" in info.value.details
    assert "also-gone" not in queues.asked


def test_queues_that_exist_or_cannot_be_read_pass():
    manifests = [statefulset("actor", "b"), statefulset("critic", "a"), statefulset("plain")]
    queues = Queues({"a": None, "b": True})
    preflight.check_queues(manifests, ("actor", "critic", "plain"), queues, "ns", "actor")
    assert queues.asked == ["a", "b"]  # sorted; an unqueued workload asks nothing


def topology_map(topology: dict) -> dict:
    return {
        "kind": "ConfigMap",
        "metadata": {"name": "topology", "labels": {naming.LABEL_COMPONENT: "topology"}},
        "data": {"topology.json": json.dumps(topology)},
    }


def test_without_a_topology_configmap_no_record_is_touched(monkeypatch):
    monkeypatch.setattr(name_records, "clear_trial", lambda *args: pytest.fail("cleared without a topology"))
    other = {"kind": "ConfigMap", "metadata": {"name": "x", "labels": {naming.LABEL_COMPONENT: "other"}}}
    preflight.clear_name_records([other, statefulset("actor")], "actor")


def test_the_trials_records_are_cleared_with_the_rendered_flags_and_users(monkeypatch, caplog):
    calls = []

    def clear_trial(flags, experiment, trial, users):
        calls.append((flags, experiment, trial, users))
        return ["/records/u/exp/t1"]

    monkeypatch.setattr(name_records, "clear_trial", clear_trial)
    monkeypatch.setattr(name_records, "pod_users", lambda manifests: {"worker-user"})
    topology = {"experiment": "exp", "trial": "t1", "worker_flags": ["--name-resolve-type", "nfs"]}
    with caplog.at_level(logging.INFO, logger=preflight.__name__):
        preflight.clear_name_records([topology_map(topology)], "actor")
    assert calls == [(["--name-resolve-type", "nfs"], "exp", "t1", {"worker-user"})]
    assert "/records/u/exp/t1" in caplog.text


def test_an_unsafe_record_path_is_a_creation_error(monkeypatch):
    def clear_trial(*args):
        raise name_records.UnsafeRecordPath("trial '..' is not one path component")

    monkeypatch.setattr(name_records, "clear_trial", clear_trial)
    with pytest.raises(WorkerCreationError) as info:
        preflight.clear_name_records([topology_map({"experiment": "exp", "trial": ".."})], "actor")
    assert info.value.reason == "unsafe name_resolve record path" and "'..'" in info.value.details
