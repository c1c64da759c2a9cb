"""The whole demo in a namespace that enforces PodSecurity `restricted` (the level docs/en/security.md tells users to
enforce), with the apiserver's real PodSecurity admission: the trainer Job of `areal-workers submit` gets its pod,
and its workers, process and pod forks, `helm test` and the reaper CronJob's pod are all admitted. A trainer whose
securityContext is overridden to violate the level ends `submit` at once with the Job's FailedCreate event and the
fix, instead of a wait that only says "no pod yet". (test_demo_in_cluster.py runs the demo of `make demo IN_CLUSTER=1`
itself in such a namespace.)"""

from __future__ import annotations

import subprocess
import time

import pytest
import yaml
from kubernetes import client

from areal_workers.cli.session import EXIT_PROBLEM
from clusterlib import job, submit_trainer
from repo_paths import TOOLS_BIN
from test_reaper_cronjob import REAPER, reaper_release  # noqa: F401 (a fixture)
from test_trainer_in_cluster import trainer_namespace  # noqa: F401 (a fixture)
from test_trainer_lifetime import trainer_config  # noqa: F401 (a fixture, reaper_release's)

RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}
KUBECTL = TOOLS_BIN / "kubectl"


@pytest.fixture
def namespace(make_namespace) -> str:
    """Every fixture of this module (make_scheduler, trainer_namespace, reaper_release) works in a namespace that
    enforces `restricted`."""
    return make_namespace(RESTRICTED)


def test_a_submitted_trainer_runs_and_creates_its_workers_in_a_restricted_namespace(
    trainer_namespace,  # noqa: F811 (the fixture imported above)
    kubeconfig,
    capsys,
    core,
):
    namespace, script, values = trainer_namespace
    assert core.read_namespace(namespace).metadata.labels["pod-security.kubernetes.io/enforce"] == "restricted"
    code, out, err = submit_trainer(
        capsys, kubeconfig, namespace, "--name", "trainer-restricted", "--", "python", str(script), str(values), "0"
    )
    assert code == 0, err
    assert "counters sum to 82" in out and "succeeded with exit code 0" in err
    [pod] = core.list_namespaced_pod(namespace, label_selector="job-name=trainer-restricted").items
    assert (
        pod.spec.security_context.run_as_non_root and pod.spec.security_context.seccomp_profile.type == "RuntimeDefault"
    )


def test_a_trainer_whose_security_context_violates_restricted_fails_with_the_jobs_failedcreate_event(
    trainer_namespace,  # noqa: F811 (the fixture imported above)
    kubeconfig,
    capsys,
    kube_client,
):
    namespace, script, values = trainer_namespace
    settings = script.parent / "privileged.yaml"
    settings.write_text(
        yaml.safe_dump({"container_security_context": {"privileged": True, "allowPrivilegeEscalation": True}})
    )
    started = time.monotonic()
    code, _, err = submit_trainer(
        capsys,
        kubeconfig,
        namespace,
        "-f",
        str(settings),
        "--name",
        "trainer-privileged",
        "--",
        "python",
        str(script),
        str(values),
        "0",
    )
    assert code == EXIT_PROBLEM, err
    assert time.monotonic() - started < 60, "submit waited for its start timeout instead of reading the events"
    # The Job controller's event, as the apiserver's PodSecurity admission worded it, and what to change.
    assert "FailedCreate" in err and 'violates PodSecurity "restricted:latest"' in err and "privileged" in err, err
    assert "container_security_context" in err and "pod-security.kubernetes.io/enforce" in err, err
    # The Job is deleted: its controller would keep retrying a pod that cannot be admitted.
    assert "deleted job trainer-privileged" in err, err
    assert [j.metadata.name for j in client.BatchV1Api(kube_client).list_namespaced_job(namespace).items] == []


def test_workers_forks_and_helm_test_pass_in_a_restricted_namespace(make_scheduler, helm_executable, kubeconfig, core):
    scheduler = make_scheduler(fork_mode="pod")
    scheduler.create_workers(job("actor", 2))
    targets = scheduler.get_workers("actor")
    # A pod-mode fork: a sibling StatefulSet whose pods PodSecurity admits like the workers'.
    assert scheduler.create_workers(job("ref", 2, type="colocation", target="actor", fork=True)) == ["ref/0", "ref/1"]
    assert {w.ip for w in scheduler.get_workers("ref")}.isdisjoint(w.ip for w in targets)
    result = subprocess.run(
        [
            helm_executable,
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            scheduler.namespace,
            "test",
            scheduler.release,
            "--timeout",
            "2m",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    [hook] = [
        p for p in core.list_namespaced_pod(scheduler.namespace).items if p.metadata.name.endswith("-test-health")
    ]
    assert hook.status.phase == "Succeeded"


def test_process_forks_pass_in_a_restricted_namespace(make_scheduler):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.fork_workers("ref", "actor")
    [fork] = scheduler.get_workers("ref")
    assert fork.ip == scheduler.get_workers("actor")[0].ip  # a child of the target's guard, in its pod


def test_the_reaper_cronjobs_pod_is_admitted_and_runs_reap_in_a_restricted_namespace(
    reaper_release,  # noqa: F811 (the fixture imported above)
    kubeconfig,
    namespace,
    kube_client,
):
    """A Job made from the CronJob (the pod template its schedule would run, without waiting for a minute); its
    `areal-workers reap` ends 0 (test_reaper_cronjob.py has it reap a killed trainer's release)."""
    subprocess.run(
        [
            str(KUBECTL),
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            namespace,
            "create",
            "job",
            "reap-now",
            f"--from=cronjob/{REAPER}-areal-workers-reaper",
        ],
        check=True,
        capture_output=True,
    )
    batch = client.BatchV1Api(kube_client)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        status = batch.read_namespaced_job("reap-now", namespace).status
        if status.succeeded or status.failed:
            break
        time.sleep(0.5)
    events = [
        f"{e.reason}: {e.message}"
        for e in client.CoreV1Api(kube_client)
        .list_namespaced_event(namespace, field_selector="involvedObject.kind=Job,involvedObject.name=reap-now")
        .items
    ]
    assert status.succeeded == 1, (status.to_dict(), events)
