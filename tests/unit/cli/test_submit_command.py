"""`areal-workers submit` when the Job's controller cannot create the trainer pod: the FailedCreate event's text and
the fix, a non-zero exit at once for a refusal every retry would get (the Job deleted), and the event in the
message of a start time-out for one that may pass (an exhausted ResourceQuota)."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest
from kubernetes import client

from areal_workers.cli.commands import submit, trainer_creation
from areal_workers.cli.session import EXIT_PROBLEM, EXIT_TIMEOUT, CliError
from areal_workers.pods.watch import WaitTimedOut
from areal_workers.trainer.network import Endpoint

POD_SECURITY = (
    'Error creating: pods "trainer-t-8st9m" is forbidden: violates PodSecurity "restricted:latest": privileged '
    '(container "trainer" must not set securityContext.privileged=true)'
)
NO_SERVICE_ACCOUNT = (
    'Error creating: pods "trainer-t-" is forbidden: error looking up service account rl/areal-controller: '
    'serviceaccount "areal-controller" not found'
)
QUOTA = (
    'Error creating: pods "trainer-t-cxpdk" is forbidden: exceeded quota: q, requested: limits.cpu=2, used: '
    "limits.cpu=0, limited: limits.cpu=1"
)


def event(message: str, reason: str = "FailedCreate", minute: int = 0, count: int = 1) -> client.CoreV1Event:
    return client.CoreV1Event(
        metadata=client.V1ObjectMeta(name=f"trainer-t.{minute}"),
        involved_object=client.V1ObjectReference(kind="Job", name="trainer-t"),
        reason=reason,
        message=message,
        count=count,
        last_timestamp=datetime(2026, 1, 1, 0, minute, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    ("message", "fatal", "fix"),
    [
        (POD_SECURITY, True, "container_security_context, pod_security_context"),
        (POD_SECURITY, True, "kubectl label namespace rl pod-security.kubernetes.io/enforce=baseline --overwrite"),
        (NO_SERVICE_ACCOUNT, True, "kubectl apply -n rl -f rbac/"),
        (QUOTA, False, "lower cpu, memory or gpu in the submit file"),
        (
            'Error creating: admission webhook "policy.example.com" denied the request: no latest tags',
            True,
            "an admission webhook of the cluster refuses the trainer pod",
        ),
        ("Error creating: the server was unable to return a response", False, "kubectl describe job trainer-t -n rl"),
    ],
)
def test_a_failedcreate_event_is_judged_and_given_its_fix(message, fatal, fix):
    failure = trainer_creation.create_failure([event(message, count=3)], "trainer-t", "rl", "areal-controller")
    assert failure is not None and failure.fatal is fatal and fix in failure.fix
    assert failure.render() == f"the Job's controller reports FailedCreate (3x): {message}\nfix: {failure.fix}"


def test_the_latest_failedcreate_is_shown_and_other_events_do_not_count():
    events = [event(QUOTA, minute=1), event(POD_SECURITY, minute=2), event("Created pod: x", "SuccessfulCreate", 3)]
    failure = trainer_creation.create_failure(events, "trainer-t", "rl", "areal-controller")
    assert failure is not None and failure.message == POD_SECURITY and failure.count == 2
    assert trainer_creation.create_failure([events[2]], "trainer-t", "rl", "areal-controller") is None


class FakeBatch:
    def __init__(self) -> None:
        self.deleted: list[str] = []

    def create_namespaced_job(self, namespace: str, body: dict) -> client.V1Job:
        return client.V1Job(metadata=client.V1ObjectMeta(name=body["metadata"]["name"], uid="job-uid"))

    def delete_namespaced_job(self, name: str, namespace: str, **kwargs) -> None:
        self.deleted.append(name)


def session_with(events: list[client.CoreV1Event], wait) -> SimpleNamespace:
    selectors: list[str] = []

    def list_events(namespace, field_selector):
        selectors.append(field_selector)
        return SimpleNamespace(items=events)

    return SimpleNamespace(
        api=None,
        namespace="rl",
        selectors=selectors,
        core=SimpleNamespace(
            list_namespaced_event=list_events,
            list_namespaced_pod=lambda namespace, label_selector: SimpleNamespace(items=[]),
        ),
        pods=lambda: SimpleNamespace(wait=wait),
    )


def run_submit(session, monkeypatch, batch: FakeBatch | None = None) -> None:
    batch = batch or FakeBatch()
    monkeypatch.setattr(submit.client, "BatchV1Api", lambda api: batch)
    monkeypatch.setattr(submit, "discover_apiserver", lambda api: [Endpoint("192.0.2.1", 443)])
    policies = SimpleNamespace(create_namespaced_network_policy=lambda namespace, body: None)
    monkeypatch.setattr(submit.client, "NetworkingV1Api", lambda api: policies)
    submit.submit(
        session, None, {"image": "reg/areal:1", "name": "trainer-t"}, ["python", "t.py"], False, False, 60, "table"
    )


def test_a_pod_that_cannot_be_admitted_ends_submit_at_once_with_the_event_and_the_job_deleted(monkeypatch):
    def wait(selector, done, timeout, on_idle=None):  # the Job has no pod; the check runs while it waits
        assert selector == "job-name=trainer-t"
        on_idle[1]({})
        raise AssertionError("the check should have ended the wait")

    session = session_with([event(POD_SECURITY)], wait)
    batch = FakeBatch()
    with pytest.raises(CliError) as refused:
        run_submit(session, monkeypatch, batch)
    text = str(refused.value)
    assert refused.value.exit_code == EXIT_PROBLEM
    assert text.startswith(
        "the trainer pod of job trainer-t cannot be created: the Job's controller reports FailedCreate"
    )
    assert POD_SECURITY in text and "fix: namespace rl enforces a PodSecurity level" in text
    assert "deleted job trainer-t" in text and batch.deleted == ["trainer-t"]
    assert session.selectors == ["involvedObject.uid=job-uid"]  # this Job's events, not an earlier one's of its name


def test_a_start_timeout_shows_a_failedcreate_that_may_still_pass_and_keeps_the_job(monkeypatch):
    def wait(selector, done, timeout, on_idle=None):
        on_idle[1]({})  # not fatal: the wait goes on, until it runs out
        raise WaitTimedOut({})

    session = session_with([event(QUOTA, count=4)], wait)
    with pytest.raises(CliError) as timed_out:
        run_submit(session, monkeypatch)
    text = str(timed_out.value)
    assert timed_out.value.exit_code == EXIT_TIMEOUT
    assert "did not start within 60s: no pod yet; the Job's controller reports FailedCreate (4x): " + QUOTA in text
    assert "lower cpu, memory or gpu" in text and "kubectl delete job trainer-t -n rl gives up" in text


def test_failedcreate_events_of_a_job_whose_pod_exists_are_not_read():
    session = session_with([event(NO_SERVICE_ACCOUNT)], wait=None)
    check, last = trainer_creation.watch_creation(
        session, "trainer-t", "job-uid", "areal-controller", lambda text: None
    )
    check({"trainer-t-abcde": object()})  # created after all (a ServiceAccount that came late)
    assert last() is None and session.selectors == []
