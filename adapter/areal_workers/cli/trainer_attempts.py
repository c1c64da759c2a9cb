"""A submitted trainer's attempts: which attempt of its Job runs now, and why the last one ended, from the Job and
its pods (pure), for `submit` while it follows them and for `status`."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from ..trainer.job import JOB_NAME_LABEL


def ended(pod: client.V1Pod | None) -> str:
    """Why an attempt's pod ended, in a few words (None: the pod is gone, deleted before it finished)."""
    if pod is None:
        return "its pod was deleted"
    for status in pod.status.container_statuses or []:
        terminated = status.state.terminated if status.state is not None else None
        if terminated is not None:
            reason = terminated.reason or ("Completed" if terminated.exit_code == 0 else "Error")
            return f"{reason}, exit code {terminated.exit_code}"
    return pod.status.reason or pod.status.message or f"phase {pod.status.phase}"


def attempts_text(job: client.V1Job, pods: list[client.V1Pod]) -> str:
    """`job NAME: attempt K of N (attempt K-1 ended: WHY)`, or how the Job ended."""
    name, limit = job.metadata.name, (job.spec.backoff_limit or 0) + 1
    ordered = sorted(pods, key=lambda p: p.metadata.creation_timestamp or 0)
    failed = [p for p in ordered if p.status.phase == "Failed"]
    counted = max(job.status.failed or 0, len(failed))
    conditions = {c.type for c in job.status.conditions or [] if c.status == "True"}
    last = f" (attempt {counted} ended: {ended(failed[-1] if failed else None)})" if counted else ""
    if "Complete" in conditions:
        return f"job {name}: succeeded at attempt {counted + 1} of {limit}{last}"
    if "Failed" in conditions:
        return f"job {name}: failed after {counted} attempt(s) of {limit}{last}"
    return f"job {name}: attempt {min(counted + 1, limit)} of {limit}{last}"


def owner_job(values: dict[str, Any]) -> str | None:
    """The Job that owns a release's objects (a trainer submitted with restarts), from the release's values."""
    for owner in values.get("ownerReferences") or []:
        if owner.get("kind") == "Job" and owner.get("apiVersion") == "batch/v1":
            return str(owner.get("name"))
    return None


def job_pods_selector(job: str) -> str:
    return f"{JOB_NAME_LABEL}={job}"
