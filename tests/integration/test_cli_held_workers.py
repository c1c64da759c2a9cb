"""`areal-workers status` and `diagnose` against what the release records and what helm says, on the local cluster:
a worker whose guard is killed with SIGKILL after get_workers handed it out is restarted by the kubelet (podrunner),
Ready again, and still shown as failed with its engines lost, to a scheduler that adopts the release as well; the
restart in place a restarted trainer asks for is not; and a release the admission policy refused shows helm's error
instead of pods missing for no reason."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_OK, EXIT_PROBLEM
from areal_workers.errors import WorkerFailedError
from clusterlib import controller_kubeconfig, guard_health, job, wait_for
from localkube.rbac import policy_supported
from real_node_trials import close_all, scheduler_factory, task
from repo_paths import REPO, TOOLS_BIN

CHART = REPO / "charts" / "areal-workers"


@pytest.fixture
def cli(kubeconfig, namespace, capsys, monkeypatch):
    """areal-workers in this process, aimed at the test's namespace; returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("PATH", f"{TOOLS_BIN}{os.pathsep}{os.environ['PATH']}")  # helm

    def call(*argv: str) -> tuple[int, str, str]:
        code = main(["--kubeconfig", str(kubeconfig), "-n", namespace, *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


def worker_row(cli, worker: str) -> tuple[int, dict]:
    code, out, _ = cli("status", "-o", "json")
    (trial,) = json.loads(out)["trials"]
    return code, next(w for w in trial["workers"] if w["id"] == worker)


def restarted_and_ready(core: client.CoreV1Api, namespace: str, pod: client.V1Pod) -> client.V1Pod:
    def again() -> client.V1Pod | None:
        now = core.read_namespaced_pod(pod.metadata.name, namespace)
        status = (now.status.container_statuses or [None])[0]
        ready = status is not None and status.ready
        return now if ready and status.restart_count > pod.status.container_statuses[0].restart_count else None

    return wait_for(again, 60, f"the kubelet restarting {pod.metadata.name}'s worker and its probe passing again")


def test_a_worker_killed_after_it_was_ready_is_restarted_with_its_engines_lost_not_one_restarted_in_place(
    cli, make_scheduler, core, namespace
):
    scheduler = make_scheduler(lease_grace_seconds=0)
    scheduler.create_workers(job("rollout", 3))
    scheduler.get_workers("rollout")

    # A restarted trainer's scheduler creates the role again: each worker restarted in place, which is no loss.
    successor = make_scheduler(lease_grace_seconds=0)
    successor.create_workers(job("rollout", 3))
    workers = successor.get_workers("rollout")
    code, row = worker_row(cli, "rollout/1")
    assert code == EXIT_OK and row["ready"] and row["restarts"] == 1, row

    pod = core.read_namespaced_pod(row["pod"], namespace)
    os.kill(guard_health(workers[1])["pid"], signal.SIGKILL)  # kill -9 of the guard
    restarted_and_ready(core, namespace, pod)

    code, row = worker_row(cli, "rollout/1")
    assert code == EXIT_PROBLEM
    assert (row["ready"], row["fatal"], row["state"]) == (False, True, "Running"), row
    assert row["reason"].startswith("RestartedAfterReady: ") and "engines are lost" in row["reason"], row
    code, table, _ = cli("status")
    assert code == EXIT_PROBLEM and "2/3 workers ready" in table and "FAILED" in table, table

    code, out, _ = cli("diagnose", "rollout/1")
    assert code == EXIT_PROBLEM
    assert f"{row['pod']} (container worker)" in out and "RestartedAfterReady [fatal]" in out, out
    assert "engines are lost" in out, out

    adopter = make_scheduler(lease_grace_seconds=0)  # another process of the trial: it never held these pods
    with pytest.raises(WorkerFailedError) as failed:
        adopter.get_workers("rollout", timeout=30)
    assert failed.value.worker_id == "rollout/1"
    assert "RestartedAfterReady" in failed.value.stderr and "engines are lost" in failed.value.stderr


def container_processes(container_id: str) -> list[int]:
    """Host pids of a real-node container's processes, oldest first (cgroupfs: the container's id ends the cgroup
    path of each of them)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cgroup = (entry / "cgroup").read_text()
            except OSError:  # gone meanwhile
                continue
            if container_id in cgroup:
                found.append(int(entry.name))
    return sorted(found)


@pytest.mark.serial_cluster  # the real node's few cores (tools/test_lanes.py)
@pytest.mark.real_node
@pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="the local cluster's real node only")
def test_on_the_real_node_a_guard_killed_after_ready_is_a_restart_with_engines_lost(
    real_node, cli, kubeconfig, helm_executable, namespace, tmp_path, core
):
    make, made = scheduler_factory(kubeconfig, helm_executable, namespace, tmp_path)
    try:
        scheduler = make(lease_grace_seconds=0)
        scheduler.create_workers(job("rollout", 2, [task()]))
        scheduler.get_workers("rollout")
        code, row = worker_row(cli, "rollout/1")
        assert code == EXIT_OK and row["ready"], row

        pod = core.read_namespaced_pod(row["pod"], namespace)
        container = pod.status.container_statuses[0].container_id.split("://", 1)[1]
        guard = container_processes(container)[0]  # the container's first process: AReaL's rpc_server
        os.kill(guard, signal.SIGKILL)  # kill -9, as an operator or the node's OOM killer would
        again = wait_for(
            lambda: (
                (now := core.read_namespaced_pod(pod.metadata.name, namespace)).status.container_statuses[0].ready
                and now.status.container_statuses[0].restart_count == 1
                and now
            ),
            240,
            "the kubelet restarting the killed worker and its probe passing again",
        )
        assert again.metadata.uid == pod.metadata.uid  # the same pod: a container restart, not a new pod

        code, row = worker_row(cli, "rollout/1")
        assert code == EXIT_PROBLEM and (row["ready"], row["fatal"], row["restarts"]) == (False, True, 1), row
        assert row["reason"].startswith("RestartedAfterReady: container worker restarted after the worker was ready"), (
            row
        )
        code, out, _ = cli("diagnose", "rollout/1")
        assert code == EXIT_PROBLEM and "RestartedAfterReady [fatal]" in out, out
        assert "engines are lost" in out and "exit code 137" in out, out
        with pytest.raises(WorkerFailedError) as failed:  # and the scheduler that holds it says the same
            scheduler.get_workers("rollout", timeout=30)
        assert failed.value.worker_id == "rollout/1" and "RestartedAfterReady" in failed.value.stderr
    finally:
        close_all(made)


def test_a_release_the_admission_policy_refused_shows_helms_error_not_missing_pods(
    cli, kubeconfig, helm_executable, namespace, tmp_path
):
    if not policy_supported(kubeconfig):  # the local cluster's (1.34) does; another cluster may predate them
        assert os.environ.get("AREAL_WORKERS_KUBECONFIG"), "the local API server serves no ValidatingAdmissionPolicies"
        pytest.skip("the API server does not serve ValidatingAdmissionPolicies")
    credentials = controller_kubeconfig(kubeconfig, namespace, tmp_path / "controller.yaml")
    installed = subprocess.run(
        [
            helm_executable,
            "--kubeconfig",
            credentials,
            "install",
            "demo",
            str(CHART),
            "-n",
            namespace,
            "--set",
            "roles.actor.replicas=2",
            "--set",
            "tests.enabled=false",
            "--set",
            "workerDefaults.containerSecurityContext.privileged=true",
            "--set",
            "workerDefaults.containerSecurityContext.allowPrivilegeEscalation=null",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert installed.returncode != 0 and "privileged containers (worker) are refused" in installed.stderr

    code, out, _ = cli("status", "--release", "demo", "-o", "json")
    (trial,) = json.loads(out)["trials"]
    assert code == EXIT_PROBLEM and trial["helm_status"] == "failed"
    assert "privileged containers (worker) are refused" in trial["helm_error"], trial
    assert [w["id"] for w in trial["workers"]] == ["actor/0", "actor/1"]
    for row in trial["workers"]:
        assert row["reason"] == f"no pod: helm's last operation failed: {trial['helm_error']}", row
    code, table, _ = cli("status", "--release", "demo")
    assert code == EXIT_PROBLEM and "helm's last operation failed" in table and "StatefulSet has not" not in table

    code, out, _ = cli("diagnose", "actor", "--release", "demo")
    assert code == EXIT_PROBLEM
    first = out.splitlines()[0]
    assert first.startswith("release demo revision 1: helm's last operation failed:"), out
    assert "privileged containers (worker) are refused" in first, out
    assert "actor/0: no pod, because helm's last operation failed (above)" in out and "StatefulSet" not in out.replace(
        trial["helm_error"], ""
    ), out
