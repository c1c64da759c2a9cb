"""Why the Job's controller cannot create `submit`'s trainer pod: its FailedCreate events (the apiserver's answers to
the pod's creation), read while `submit` waits for the pod. A failure no retry can pass (an admission refusal, a
missing ServiceAccount, an invalid pod) ends the wait and deletes the Job, whose controller would retry it forever."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ..session import EXIT_PROBLEM, CliError, Session

_EPOCH = datetime.min.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class CreateFailure:
    """Why the Job's controller cannot create the trainer pod: its latest FailedCreate event (the apiserver's
    answer to the pod's creation), how often it was reported, whether a retry can succeed, and what to change."""

    message: str
    count: int
    fatal: bool
    fix: str

    def render(self) -> str:
        return f"the Job's controller reports FailedCreate ({self.count}x): {self.message}\nfix: {self.fix}"


def create_failure(
    events: list[client.CoreV1Event], job: str, namespace: str, service_account: str
) -> CreateFailure | None:
    """The Job's FailedCreate events as a CreateFailure; None when there is none. Refusals by admission (PodSecurity,
    a webhook, a LimitRange), a missing ServiceAccount and an invalid pod are fatal: every retry gets the same answer.
    An exhausted ResourceQuota, or an error of the apiserver's own, may pass: the wait goes on."""
    failed = [e for e in events if e.reason == "FailedCreate"]
    if not failed:
        return None
    latest = max(failed, key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp or _EPOCH)
    message = (latest.message or "").strip()
    count = sum(e.count or 1 for e in failed)
    lowered = message.lower()
    if "violates podsecurity" in lowered:
        fix = (
            f"namespace {namespace} enforces a PodSecurity level (its label pod-security.kubernetes.io/enforce) "
            "that refuses what the message names. The trainer's defaults pass `restricted`: remove the submit "
            "file's override the message names (container_security_context, pod_security_context, a hostPath "
            "volume), or, if the trainer needs it, have the namespace's owner lower its level (kubectl label "
            f"namespace {namespace} pod-security.kubernetes.io/enforce=baseline --overwrite)"
        )
        return CreateFailure(message, count, True, fix)
    if "serviceaccount" in lowered and "not found" in lowered:
        fix = (
            f"the trainer's ServiceAccount {service_account} does not exist in namespace {namespace}: "
            f"kubectl apply -n {namespace} -f rbac/ (the controller's ServiceAccount and Role), or name an "
            "existing one with service_account: in the submit file"
        )
        return CreateFailure(message, count, True, fix)
    if "exceeded quota" in lowered:
        fix = (
            f"a ResourceQuota of namespace {namespace} has no room for the trainer's requests (kubectl describe "
            f"quota -n {namespace}): lower cpu, memory or gpu in the submit file, or wait until other pods of "
            "the namespace end (a longer --start-timeout)"
        )
        return CreateFailure(message, count, False, fix)
    if "admission webhook" in lowered:
        fix = (
            "an admission webhook of the cluster refuses the trainer pod: change what its message names in the "
            "submit file (areal-workers submit --dry-run prints the Job), or ask the cluster's administrators "
            "about the policy"
        )
        return CreateFailure(message, count, True, fix)
    if "is forbidden" in lowered or "is invalid" in lowered:
        fix = (
            "the apiserver refuses the trainer pod for what the message names: change it in the submit file "
            "(areal-workers submit --dry-run prints the Job)"
        )
        return CreateFailure(message, count, True, fix)
    return CreateFailure(message, count, False, f"kubectl describe job {job} -n {namespace}")


def _job_events(session: Session, uid: str) -> list[client.CoreV1Event]:
    """The Job's events; none when they cannot be read (they explain a wait, they are not what submit needs)."""
    selector = f"involvedObject.uid={uid}"
    try:
        events: list[client.CoreV1Event] = session.core.list_namespaced_event(
            session.namespace, field_selector=selector
        ).items
    except (ApiException, HTTPError, ConnectionError):
        return []
    return events


def delete_job(session: Session, name: str) -> str:
    """Deletes the Job whose pod cannot be created (its controller would retry it forever); says what happened."""
    try:
        client.BatchV1Api(session.api).delete_namespaced_job(name, session.namespace, propagation_policy="Background")
    except (ApiException, HTTPError, ConnectionError) as error:
        reason = f"{error.status} {error.reason}" if isinstance(error, ApiException) else str(error)
        return (
            f"could not delete job {name} ({reason}): kubectl delete job {name} -n {session.namespace} before "
            "submitting again"
        )
    return f"deleted job {name}, whose controller would keep retrying the pod; submit again once fixed"


def watch_creation(
    session: Session, name: str, uid: str, service_account: str, progress: Callable[[str], None]
) -> tuple[Callable[[dict[str, client.V1Pod]], None], Callable[[], CreateFailure | None]]:
    """The check PodWatch.wait runs while it waits (on_idle): with no pod yet, the Job's events are read, and a fatal
    FailedCreate ends the wait (the Job deleted); the last failure seen, for the message of a wait that ran out."""
    seen: list[CreateFailure] = []

    def check(pods: dict[str, client.V1Pod]) -> None:
        if pods:
            return
        failure = create_failure(_job_events(session, uid), name, session.namespace, service_account)
        if failure is None:
            return
        seen[:] = [failure]
        if failure.fatal:
            raise CliError(
                f"the trainer pod of job {name} cannot be created: {failure.render()}\n{delete_job(session, name)}",
                EXIT_PROBLEM,
            )
        progress(f"waiting for the trainer pod of job {name}: FailedCreate: {failure.message}")

    return check, lambda: seen[-1] if seen else None
