"""The chart's reaper CronJob on the cluster: installed as a release of its own with no roles (reaper.enabled), it runs
`areal-workers reap` every minute as the reaper ServiceAccount of rbac/reaper.yaml, whose Role creates nothing (its
pods run by podrunner with that ServiceAccount's credentials), and uninstalls the release of a trainer killed with
SIGKILL once the trainer's Lease is seen unchanged past its grace by two of its runs; the reaper's own release, which
has no Lease, stays."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from kubernetes import client

from areal_workers import naming
from localkube.rbac import apply_rbac
from repo_paths import REPO
from test_trainer_lifetime import start_trainer, trainer_config  # noqa: F401 (trainer_config is a fixture)

pytestmark = pytest.mark.late
CHART = REPO / "charts" / "areal-workers"
REAPER = "reaper"
# The CronJob controller starts Jobs on minute boundaries: up to a minute of waiting for its first Job, which takes
# the first look at the unchanged Lease. The second look, which reaps (the grace, 3 s, has passed on the reaper's
# clock), is a Job the test creates from the CronJob as `kubectl create job --from=cronjob/...` does, rather than the
# next minute's.
DEADLINE_SECONDS = 300
GRACE_SECONDS = 3
KUBECTL = REPO / ".tools" / "bin" / "kubectl"


def helm(helm_executable: str, kubeconfig: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [helm_executable, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=180
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)}: {result.stderr}")
    return result


def installed(helm_executable: str, kubeconfig: Path, namespace: str) -> dict[str, str]:
    """Release name -> status, for every release of the namespace."""
    listing = helm(helm_executable, kubeconfig, "list", "-n", namespace, "--all", "-o", "json").stdout
    return {release["name"]: release["status"] for release in json.loads(listing)}


@pytest.fixture
def reaper_release(trainer_config, kubeconfig, helm_executable, namespace, worker_lane, tmp_path):  # noqa: F811
    """rbac/ applied to the namespace (the reaper's own identity included) and the reaper-only release installed in it
    (its pods run by the podrunner that trainer_config started for the namespace, with the reference lane's
    interpreter, which has areal-workers)."""
    assert worker_lane.name == "reference", "the reaper pod's python is the lane's: run this module in the main lane"
    apply_rbac(kubeconfig, namespace)  # rbac/, its admission policy bound to this namespace alone
    values = tmp_path / "reaper.json"
    values.write_text(
        json.dumps(
            {
                "roles": {},
                "reaper": {
                    "enabled": True,
                    "schedule": "* * * * *",
                    "serviceAccountName": "areal-reaper",  # rbac/reaper.yaml: the reaper's own Role
                    "command": ["python", "-m", "areal_workers.cli", "reap"],
                    "image": {"repository": "local/areal-workers-reaper", "tag": "dev"},
                },
            }
        )
    )
    helm(helm_executable, kubeconfig, "install", REAPER, str(CHART), "-n", namespace, "-f", str(values))
    yield
    helm(helm_executable, kubeconfig, "uninstall", REAPER, "-n", namespace, "--wait", check=False)


def test_the_reaper_cronjob_uninstalls_a_killed_trainers_release(
    reaper_release,
    trainer_config,  # noqa: F811 (the fixture imported above)
    kubeconfig,
    helm_executable,
    namespace,
    core,
    kube_client,
    tmp_path,
):
    batch = client.BatchV1Api(kube_client)
    [cronjob] = batch.list_namespaced_cron_job(namespace).items
    assert cronjob.metadata.name == f"{REAPER}-areal-workers-reaper"
    # A reaper-only release is not a trial: no topology ConfigMap for the CLI to list.
    assert core.list_namespaced_config_map(namespace, label_selector="app.kubernetes.io/component=topology").items == []

    trainer, _ = start_trainer(trainer_config, tmp_path)
    release = naming.release_name("exp", "trainer")
    selector = naming.release_selector(release)
    assert installed(helm_executable, kubeconfig, namespace) == {REAPER: "deployed", release: "deployed"}
    assert core.list_namespaced_pod(namespace, label_selector=selector).items

    wait_between_runs(batch, namespace, cronjob.metadata.name, time.monotonic() + DEADLINE_SECONDS)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait(30)
    killed, killed_at = time.monotonic(), datetime.now(UTC).replace(microsecond=0)
    first_look = wait_for_a_scheduled_run(batch, namespace, cronjob.metadata.name, killed_at, killed + DEADLINE_SECONDS)
    log = reaper_log(core, namespace, first_look)
    assert release in log and "reaped" not in log, f"the first look at the unchanged Lease reaps nothing:\n{log}"
    time.sleep(GRACE_SECONDS)
    subprocess.run(
        [str(KUBECTL), "--kubeconfig", str(kubeconfig), "-n", namespace, "create", "job", "reaper-second-look"]
        + [f"--from=cronjob/{cronjob.metadata.name}"],
        check=True,
        capture_output=True,
        timeout=60,
    )
    while time.monotonic() - killed < DEADLINE_SECONDS:
        gone = release not in installed(helm_executable, kubeconfig, namespace)
        if gone and not core.list_namespaced_pod(namespace, label_selector=selector).items:
            break
        time.sleep(1)
    else:
        jobs = [
            (job.metadata.name, job.status.succeeded, job.status.failed)
            for job in batch.list_namespaced_job(namespace).items
        ]
        pytest.fail(
            f"release {release} or its pods still there {DEADLINE_SECONDS}s after its trainer was killed; "
            f"the reaper's Jobs (name, succeeded, failed): {jobs}"
        )
    elapsed = time.monotonic() - killed
    print(
        f"trainer killed -> last worker gone: {elapsed:.1f}s (lease grace 3s, reaper CronJob every minute)",
        file=sys.stderr,
    )

    assert installed(helm_executable, kubeconfig, namespace) == {REAPER: "deployed"}
    assert (
        client.CoordinationV1Api(kube_client)
        .list_namespaced_lease(namespace, label_selector="areal-workers.dev/lease-of")
        .items
        == []
    )
    # The Job that reaped ends once the release's pods are gone (what the loop above waited for too).
    deadline = time.monotonic() + 60
    while True:
        owned = cronjob_jobs(batch, namespace, cronjob.metadata.name)
        logs = {
            job.metadata.name: reaper_log(core, namespace, job.metadata.name)
            for job in owned
            if (job.status.succeeded or 0) >= 1
        }
        if any(release in log and "reaped" in log for log in logs.values()) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert any(release in log and "reaped" in log for log in logs.values()), (
        [(job.metadata.name, job.status.to_dict()) for job in owned],
        logs,
    )
    # Its decision as an Event, written with the reaper Role's rule on events.k8s.io events (rbac/reaper.yaml).
    reaped = core.list_namespaced_event(namespace, field_selector="reason=ReleaseReaped").items
    assert [(e.reporting_component, e.involved_object.kind) for e in reaped] == [("areal-workers", "ConfigMap")]
    assert reaped[0].message.startswith(f"reaped release {release}: its trainer"), reaped[0].message


def cronjob_jobs(batch: client.BatchV1Api, namespace: str, cronjob: str) -> list[client.V1Job]:
    """The Jobs the CronJob owns: those its controller started and those created from it by hand."""
    return [
        job
        for job in batch.list_namespaced_job(namespace).items
        if any(o.kind == "CronJob" and o.name == cronjob for o in job.metadata.owner_references or [])
    ]


def wait_between_runs(batch: client.BatchV1Api, namespace: str, cronjob: str, deadline: float) -> None:
    """Returns while none of the CronJob's Jobs runs and its next one is more than 15 s away (the controller starts
    them on minute boundaries, a few seconds late on a loaded machine): a trainer killed now is first looked at by a
    run scheduled after the kill, never by one that started before it and read the Lease after it."""
    while time.monotonic() < deadline:
        running = [
            job for job in cronjob_jobs(batch, namespace, cronjob) if not (job.status.succeeded or job.status.failed)
        ]
        if not running and 10 <= datetime.now(UTC).second < 45:
            return
        time.sleep(1)
    pytest.fail(f"the CronJob {cronjob}'s Jobs never all ended between two minute boundaries")


def wait_for_a_scheduled_run(
    batch: client.BatchV1Api, namespace: str, cronjob: str, since: datetime, deadline: float
) -> str:
    """The name of the first Job the CronJob controller itself started (no `instantiate: manual` annotation) at or
    after `since`, once it has succeeded."""
    while time.monotonic() < deadline:
        for job in cronjob_jobs(batch, namespace, cronjob):
            scheduled = (job.metadata.annotations or {}).get("cronjob.kubernetes.io/instantiate") != "manual"
            fresh = job.metadata.creation_timestamp >= since
            if scheduled and fresh and (job.status.succeeded or 0) >= 1:
                return job.metadata.name
        time.sleep(1)
    jobs = [(job.metadata.name, job.status.to_dict()) for job in batch.list_namespaced_job(namespace).items]
    pytest.fail(f"the CronJob {cronjob} started no Job that succeeded; its Jobs: {jobs}")


def reaper_log(core, namespace: str, job: str) -> str:
    """The log of the Job's pod (`areal-workers reap` prints a table of the Leases and what it did)."""
    text = ""
    for pod in core.list_namespaced_pod(namespace, label_selector=f"batch.kubernetes.io/job-name={job}").items:
        try:
            text += core.read_namespaced_pod_log(pod.metadata.name, namespace)
        except client.ApiException as error:
            text += f"<no log of {pod.metadata.name}: {error.status}>"
    return text
