"""`status` and `diagnose` (cli/commands/workers.py) against what the release records and what helm says: a worker
restarted or replaced since AReaL got it is failed with its engines lost (the record on the topology ConfigMap,
pods/ready_pods.py), a release whose last helm operation failed shows helm's error instead of missing pods, and a
watch reads the release again on every frame."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes import client
from test_workers_command import RELEASE, TOPOLOGY, FakeSession, pod

from areal_workers import naming
from areal_workers.cli.commands import workers
from areal_workers.cli.session import EXIT_OK, EXIT_PROBLEM
from areal_workers.pods import ready_pods
from areal_workers.release.model import ReleaseModel

REFUSED = (
    'Release "aw-exp-t-1a2b3c4d" failed: admission webhook refused: statefulsets.apps "aw-exp-t-1a2b3c4d-areal-'
    "workers-actor\" is forbidden: ValidatingAdmissionPolicy 'areal-workers-controller' denied request"
)


@pytest.fixture(autouse=True)
def no_lease(monkeypatch):
    monkeypatch.setattr(workers.TrialReader, "trainer", lambda self, release: "")


def restarted(worker: client.V1Pod, restarts: int = 1) -> client.V1Pod:
    """The kubelet restarted the worker's container (its guard was killed with SIGKILL): Ready again."""
    status = worker.status.container_statuses[0]
    status.restart_count = restarts
    status.last_state = client.V1ContainerState(
        terminated=client.V1ContainerStateTerminated(exit_code=137, reason="Error")
    )
    return worker


def holding(session: FakeSession, pods: list[client.V1Pod], entry: str | None = None) -> None:
    """The record a scheduler wrote when get_workers handed these pods out (`entry`: of another role entry)."""
    model = ReleaseModel(values={}, topology=TOPOLOGY)
    for role in {p.metadata.labels[naming.LABEL_ROLE] for p in pods}:
        mine = [p for p in pods if p.metadata.labels[naming.LABEL_ROLE] == role]
        session.held_record = ready_pods.with_workload(
            session.held_record, role, mine, entry if entry is not None else model.fingerprint(role)
        )


def status_json(session: FakeSession, capsys: Any) -> tuple[int, dict[str, Any]]:
    code = workers.status(session, "json", False, None)
    (trial,) = json.loads(capsys.readouterr().out)["trials"]
    return code, trial


def test_a_worker_restarted_after_it_was_held_is_failed_with_its_engines_lost(capsys):
    pods = [pod("actor", 0), pod("actor", 1), pod("critic", 0)]
    session = FakeSession(pods)
    holding(session, pods)
    restarted(pods[1])
    code, trial = status_json(session, capsys)
    rows = {w["id"]: w for w in trial["workers"]}
    assert code == EXIT_PROBLEM and trial["all_ready"] is False
    assert (rows["actor/1"]["ready"], rows["actor/1"]["fatal"]) == (False, True)
    assert rows["actor/1"]["reason"].startswith(
        "RestartedAfterReady: container worker restarted after the worker was ready, so its engines are lost"
    )
    assert rows["gen/1"]["ready"] is False  # the process fork in that pod lost its engines with it
    assert [rows[w]["ready"] for w in ("actor/0", "critic/0", "gen/0")] == [True, True, True]


def test_a_worker_whose_pod_was_replaced_since_it_was_held_is_diagnosed_as_restarted(capsys):
    pods = [pod("actor", 0), pod("actor", 1)]
    session = FakeSession(pods)
    holding(session, pods)
    pods[0].metadata.uid = "uid-of-the-new-pod"
    assert workers.diagnose(session, "actor", "table") == EXIT_PROBLEM
    out = capsys.readouterr().out
    assert "RestartedAfterReady [fatal]" in out
    assert "the pod was deleted and recreated after the worker was ready, so its engines are lost" in out
    assert f"actor/1 ({RELEASE}-actor-1): ready, no problem found" in out


def test_restarts_before_the_pods_were_held_or_of_another_role_entry_are_not_counted(capsys):
    pods = [pod("actor", 0), pod("actor", 1), pod("critic", 0)]
    session = FakeSession(pods)
    restarted(pods[0])  # a crash before get_workers returned: recorded with it
    holding(session, pods[:2])
    holding(session, pods[2:], entry="the critic's entry before an update")
    restarted(pods[2])  # the update replaced the critic: the record of its old entry says nothing of this pod
    code, trial = status_json(session, capsys)
    assert code == EXIT_OK and trial["all_ready"] is True


def test_without_a_record_a_ready_restarted_worker_is_ready(capsys):
    pods = [pod("actor", 0), restarted(pod("actor", 1)), pod("critic", 0)]
    code, trial = status_json(FakeSession(pods), capsys)
    assert code == EXIT_OK and trial["all_ready"] is True


def test_a_release_whose_last_helm_operation_failed_shows_helms_error_instead_of_missing_pods(capsys):
    session = FakeSession([])
    session.revision, session.helm_status, session.description = 1, "failed", REFUSED
    code, trial = status_json(session, capsys)
    assert code == EXIT_PROBLEM and trial["helm_error"] == REFUSED
    assert {w["reason"] for w in trial["workers"]} == {f"no pod: helm's last operation failed: {REFUSED}"}
    assert all(w["fatal"] for w in trial["workers"])

    assert workers.diagnose(session, "actor", "table") == EXIT_PROBLEM
    out = capsys.readouterr().out
    assert out.splitlines()[0] == f"release {RELEASE} revision 1: helm's last operation failed: {REFUSED}"
    assert "StatefulSet" not in out.replace(REFUSED, "")
    assert "actor/0: no pod, because helm's last operation failed (above)" in out


def test_helms_list_of_errors_is_shown_on_one_line(capsys):
    session = FakeSession([])
    session.helm_status = "failed"
    session.description = f'Release "{RELEASE}" failed: 1 error occurred:\n\t* {REFUSED}\n\n'
    assert workers.diagnose(session, "critic", "table") == EXIT_PROBLEM
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f'release {RELEASE} revision 3: helm\'s last operation failed: Release "{RELEASE}" failed: 1 error occurred: '
        f"* {REFUSED}",
        "critic/0: no pod, because helm's last operation failed (above)",
    ]


def test_a_deployed_release_without_pods_is_still_the_statefulsets_doing(capsys):
    session = FakeSession([])
    code, trial = status_json(session, capsys)
    assert trial["helm_error"] == ""
    assert trial["workers"][0]["reason"].startswith("no pod yet: the StatefulSet has not created it")


def test_a_watch_reads_the_release_again_on_every_frame(capsys):
    session = FakeSession([pod("actor", 0)])

    def wait(selector: str, redraw: Any, deadline: float, on_idle: Any = None) -> None:
        redraw({"a": pod("actor", 0)})
        session.revision, session.ready = 5, 2  # `rollback` between two pod changes: revision 5, to revision 2
        session.description = "Rollback to 2"
        redraw({"a": pod("actor", 0)})
        if on_idle is None:
            return
        seconds, idle = on_idle
        assert seconds == workers.HEADER_REFRESH_SECONDS
        idle({"a": pod("actor", 0)})  # no pod changed, nor the release: nothing new to show
        session.revision, session.helm_status = 6, "failed"  # an upgrade that changed no pod, and failed
        session.description = f'Upgrade "{RELEASE}" failed: context deadline exceeded'
        idle({"a": pod("actor", 0)})

    listing = session.pods().list
    session.pods = lambda: SimpleNamespace(list=listing, wait=wait)  # type: ignore[method-assign]
    session.ready = 4
    assert workers.status(session, "json", True, None) == EXIT_PROBLEM  # the last frame's workers are not all ready
    frames = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(f["trials"][0]["revision"], f["trials"][0]["ready_revision"]) for f in frames] == [(3, 4), (5, 2), (6, 2)]
    assert frames[-1]["trials"][0]["helm_error"] == f'Upgrade "{RELEASE}" failed: context deadline exceeded'
