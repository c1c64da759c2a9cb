"""A submitted trainer's attempts in words, from its Job and pods: which one runs and why the last one ended."""

from __future__ import annotations

from datetime import UTC, datetime

from kubernetes import client

from areal_workers.cli.trainer_attempts import attempts_text, ended, owner_job


def pod(name: str, phase: str, minute: int, reason: str | None = None, code: int | None = None) -> client.V1Pod:
    terminated = client.V1ContainerStateTerminated(exit_code=code, reason=reason) if code is not None else None
    statuses = [
        client.V1ContainerStatus(
            name="trainer",
            image="",
            image_id="",
            ready=False,
            restart_count=0,
            state=client.V1ContainerState(terminated=terminated),
        )
    ]
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, creation_timestamp=datetime(2026, 12, 6, 3, minute, tzinfo=UTC)),
        status=client.V1PodStatus(phase=phase, container_statuses=statuses),
    )


def job(failed: int, *conditions: str) -> client.V1Job:
    return client.V1Job(
        metadata=client.V1ObjectMeta(name="trainer-x"),
        spec=client.V1JobSpec(backoff_limit=3, template=client.V1PodTemplateSpec()),
        status=client.V1JobStatus(
            failed=failed, conditions=[client.V1JobCondition(type=c, status="True") for c in conditions]
        ),
    )


def test_the_running_attempt_and_why_the_last_one_ended():
    pods = [pod("a", "Failed", 1, "OOMKilled", 137), pod("b", "Running", 2)]
    assert attempts_text(job(1), pods) == "job trainer-x: attempt 2 of 4 (attempt 1 ended: OOMKilled, exit code 137)"
    assert attempts_text(job(0), [pod("a", "Running", 1)]) == "job trainer-x: attempt 1 of 4"


def test_a_deleted_attempt_is_counted_by_the_job_and_said_deleted():
    assert attempts_text(job(1), [pod("b", "Running", 2)]) == (
        "job trainer-x: attempt 2 of 4 (attempt 1 ended: its pod was deleted)"
    )


def test_how_the_job_ended():
    done = [pod("a", "Failed", 1, "Error", 1), pod("b", "Succeeded", 2, "Completed", 0)]
    assert attempts_text(job(1, "Complete"), done) == (
        "job trainer-x: succeeded at attempt 2 of 4 (attempt 1 ended: Error, exit code 1)"
    )
    failed = [pod(n, "Failed", i, "Error", 3) for i, n in enumerate("abcd")]
    assert attempts_text(job(4, "Failed"), failed) == (
        "job trainer-x: failed after 4 attempt(s) of 4 (attempt 4 ended: Error, exit code 3)"
    )
    assert ended(None) == "its pod was deleted"


def test_only_a_job_owner_is_a_submitted_trainer_with_restarts():
    assert owner_job({"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "t", "uid": "u"}]}) == "t"
    assert owner_job({"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u"}]}) is None
    assert owner_job({}) is None
