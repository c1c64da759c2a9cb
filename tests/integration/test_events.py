"""The scheduler's decisions as Kubernetes Events on the real apiserver, read back as a person reads them: with the
real kubectl (`get events --field-selector involvedObject.name=<statefulset>`, `describe statefulset`). A bad update
shows the worker's failure and the rollback with its cause on the role's StatefulSet; a repeated refusal is one
Event with a series; a Lease taken over and the reaper's uninstall are on the release's topology ConfigMap. The same
story through `areal-workers events` (listed, and followed with --watch until Ctrl-C) and `status`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from areal_workers import WorkerCreationError, WorkerFailedError
from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_INTERRUPTED, EXIT_PROBLEM
from areal_workers.reasons import DIAGNOSES
from clusterlib import default_sigint, job, spec, wait_for
from repo_paths import TOOLS_BIN

pytestmark = pytest.mark.reference_guard_only
CRASH = "python -c 'import sys; sys.exit(4)'"


def kubectl(kubeconfig: Path, namespace: str, *args: str) -> str:
    done = subprocess.run(
        [str(TOOLS_BIN / "kubectl"), "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def events(kubeconfig: Path, namespace: str, selector: str) -> list[dict]:
    """The namespace's Events of areal-workers that `selector` selects, as kubectl shows them (core/v1), oldest
    first."""
    listed = json.loads(kubectl(kubeconfig, namespace, "get", "events", "--field-selector", selector, "-o", "json"))
    ours = [e for e in listed["items"] if e.get("reportingComponent") == "areal-workers"]
    return sorted(ours, key=lambda e: e["eventTime"])


def test_a_bad_update_shows_the_worker_failure_and_the_rollback_with_its_cause(make_scheduler, kubeconfig, namespace):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    scheduler.update_workers(job("actor", 1, [spec(cmd=CRASH)]))
    with pytest.raises(WorkerFailedError):
        scheduler.get_workers("actor", timeout=60)
    statefulset = scheduler.driver.model.roles["actor"]["statefulset"]

    seen = events(kubeconfig, namespace, f"involvedObject.name={statefulset}")
    reasons = [e["reason"] for e in seen]
    assert reasons[:2] == ["RevisionWritten", "RevisionWritten"], reasons
    assert [e["action"] for e in seen[:2]] == ["Create", "Update"]
    assert seen[1]["message"] == f"release {scheduler.release} revision 2: update actor: command changed"
    failure = next(e for e in seen if e["reason"] in {str(r) for r in DIAGNOSES})
    assert failure["type"] == "Warning" and failure["message"].startswith("worker actor/0 failed: ")
    assert "exit code: 4" in failure["message"], failure["message"]
    rollback = next(e for e in seen if e["reason"] == "RolledBack")
    assert rollback["message"].startswith(f"rolled back release {scheduler.release} to revision 1")
    assert f"after revision 2 failed: {failure['reason']} (actor/0)" in rollback["message"], rollback["message"]
    for event in seen:
        assert event["reportingInstance"] and event["involvedObject"]["kind"] == "StatefulSet"
        assert event["involvedObject"]["uid"], event  # so that describe finds it
    described = kubectl(kubeconfig, namespace, "describe", "statefulset", statefulset)
    assert "RolledBack" in described and "RevisionWritten" in described, described
    assert "areal-workers" in kubectl(
        kubeconfig, namespace, "get", "events", "--field-selector", "reportingComponent=areal-workers"
    )


def test_scaling_and_forking_are_revisions_written_on_the_targets_statefulset(make_scheduler, kubeconfig, namespace):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    scheduler.scale_workers("actor", 2)
    scheduler.get_workers("actor")
    scheduler.fork_workers("ref", "actor")  # process forks: in the actor's pods
    statefulset = scheduler.driver.model.roles["actor"]["statefulset"]

    seen = events(kubeconfig, namespace, f"involvedObject.name={statefulset}")
    written = [(e["action"], e["message"]) for e in seen if e["reason"] == "RevisionWritten"]
    assert [action for action, _ in written] == ["Create", "Scale", "Fork"], written
    assert written[1][1].startswith(f"release {scheduler.release} revision 2: scale actor"), written
    assert " ref" in written[2][1], written


def test_a_repeated_refusal_is_one_event_with_a_series(make_scheduler, kubeconfig, namespace):
    scheduler = make_scheduler()
    for _ in range(3):
        with pytest.raises(WorkerCreationError, match="No node can hold a worker"):
            scheduler.create_workers(job("huge", 1, [spec(cpu=4096)]))

    (refused,) = events(kubeconfig, namespace, "reason=ChangeRefused")
    assert refused["involvedObject"]["name"] == f"{scheduler.release}-areal-workers-huge"  # never created
    assert refused["series"]["count"] == 3 and refused["type"] == "Warning"
    assert "No node can hold a worker" in refused["message"]


def test_a_lease_taken_over_is_recorded_on_the_topology_configmap(make_scheduler, kubeconfig, namespace):
    first = make_scheduler(lease_grace_seconds=30)
    first.create_workers(job("actor", 1))
    first.close()  # its Lease stays, renewed no more
    second = make_scheduler(lease_grace_seconds=30, lease_takeover=True)

    (taken,) = events(kubeconfig, namespace, "reason=LeaseTakenOver")
    assert taken["involvedObject"]["kind"] == "ConfigMap" and taken["involvedObject"]["name"].endswith("-topology")
    assert first.lease.holder in taken["message"] and second.lease.holder in taken["message"]


def test_the_reapers_uninstall_leaves_its_event(make_scheduler, kubeconfig, namespace, capsys):
    scheduler = make_scheduler(lease_grace_seconds=3)
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    scheduler.lease.stop()  # the trainer stalls
    configmap = scheduler.driver.inspector._topology_configmap().metadata.name
    actions = []
    try:
        for wait in (0, 4):  # the first look, then one past the grace
            time.sleep(wait)
            argv = ["--kubeconfig", str(kubeconfig), "-n", namespace, "reap", "-o", "json", "--timeout", "120"]
            assert main(argv) == 0
            actions += [lease["action"] for lease in json.loads(capsys.readouterr().out)["leases"]]
    finally:
        scheduler.close()

    assert actions == ["alive", "reaped"]
    (reaped,) = events(kubeconfig, namespace, "reason=ReleaseReaped")
    assert reaped["involvedObject"] == {**reaped["involvedObject"], "kind": "ConfigMap", "name": configmap}
    assert reaped["message"].startswith(f"reaped release {scheduler.release}: its trainer")


def test_events_and_status_tell_a_bad_updates_story_and_a_watch_follows_it(
    make_scheduler, kubeconfig, namespace, capsys
):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    release = scheduler.release
    trial = ["--kubeconfig", str(kubeconfig), "-n", namespace, "--release", release]
    watch = subprocess.Popen(
        [sys.executable, "-m", "areal_workers.cli", *trial, "events", "--watch", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PATH": f"{TOOLS_BIN}{os.pathsep}{os.environ['PATH']}"},
        preexec_fn=default_sigint,
    )
    followed: list[dict] = []
    reader = threading.Thread(target=lambda: followed.extend(json.loads(line) for line in watch.stdout))
    reader.start()
    try:
        wait_for(lambda: followed, 60, "the watch's listing of the first revision's Event")
        scheduler.update_workers(job("actor", 1, [spec(cmd=CRASH)]))
        with pytest.raises(WorkerFailedError):
            scheduler.get_workers("actor", timeout=60)
        wait_for(lambda: any(d["reason"] == "RolledBack" for d in followed), 60, "the rollback, followed")
        alive = watch.poll() is None
        watch.send_signal(signal.SIGINT)  # Ctrl-C
        code = watch.wait(60)
    finally:
        watch.kill()
        reader.join(30)
    errors = watch.stderr.read()
    assert alive and code == EXIT_INTERRUPTED, f"exit {code}: {errors}"
    followed_reasons = [d["reason"] for d in followed]
    assert followed_reasons[:2] == ["RevisionWritten", "RevisionWritten"], followed_reasons
    cause = next(r for r in followed_reasons if r in {str(d) for d in DIAGNOSES})  # the worker's failure, by cause
    assert followed_reasons.index(cause) < followed_reasons.index("RolledBack"), followed_reasons

    assert main([*trial, "events", "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)["decisions"]
    reasons = [d["reason"] for d in listed]
    assert reasons[:2] == ["RevisionWritten", "RevisionWritten"] and "RolledBack" in reasons, reasons
    rollback = next(d for d in listed if d["reason"] == "RolledBack")
    assert rollback["type"] == "Warning" and rollback["regarding"].startswith("statefulset/")
    assert f"after revision 2 failed: {cause} (actor/0)" in rollback["note"], rollback
    assert all(d["release"] == release for d in listed)

    # The same Events, found by their labels with kubectl.
    labelled = kubectl(kubeconfig, namespace, "get", "events", "-l", f"app.kubernetes.io/instance={release}")
    assert "RolledBack" in labelled, labelled

    assert main([*trial, "status", "-o", "json"]) in (0, EXIT_PROBLEM)
    (status,) = json.loads(capsys.readouterr().out)["trials"]
    assert "RolledBack" in [d["reason"] for d in status["decisions"]], status["decisions"]
    assert len(status["decisions"]) <= 5
    main([*trial, "status"])
    table = capsys.readouterr().out
    assert "last decisions (areal-workers events for all):" in table and "RolledBack" in table, table
