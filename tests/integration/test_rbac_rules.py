"""Every rule of the controller Role (rbac/role.yaml) is needed: without it, the adapter operation that uses it
fails (or, for the diagnosis inputs, the error it raises loses that input). One rule is removed at a time from the
Role of a scheduler that runs as the controller's ServiceAccount; rbac/README.md maps each rule to its code path.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import pytest
import yaml
from kubernetes import client

from areal_workers import ClusterAccessError, KubernetesScheduler, WorkerFailedError
from clusterlib import job, spec
from repo_paths import REPO

ROLE = "areal-controller"
FULL_RULES: list[dict] = yaml.safe_load((REPO / "rbac" / "role.yaml").read_text())["rules"]
CRASH_LINE = "rbac-rules: cannot load /ckpt/step-100"
CRASH = f"python -c 'import sys; print(\"{CRASH_LINE}\", flush=True); sys.exit(3)'"


@pytest.fixture
def identity() -> str:
    """The scheduler runs as the controller's ServiceAccount, bound to rbac/role.yaml."""
    return "rbac"


@dataclass(frozen=True)
class Case:
    """The rule (by resource) taken away, what runs before that (with every rule), and the operation that
    shows the loss: it raises an error naming the rule's resource, or `check` judges the error it raises."""

    resource: str
    prepare: Callable[[KubernetesScheduler], object]
    operation: Callable[[KubernetesScheduler], object]
    check: Callable[[Exception], None] | None = None


def nothing(scheduler: KubernetesScheduler) -> None:
    return None


def create(replicas: int = 1) -> Callable[[KubernetesScheduler], object]:
    return lambda scheduler: scheduler.create_workers(job("actor", replicas))


def create_a_crashing_role(scheduler: KubernetesScheduler) -> object:
    scheduler.create_workers(job("broken", 1, [spec(cmd=CRASH)]))
    return scheduler.get_workers("broken", timeout=60)


def create_queued(scheduler: KubernetesScheduler) -> object:
    """A role queued in a Kueue LocalQueue: its queue is read before the revision that queues it."""
    queued = type(scheduler)(
        config=replace(scheduler.config, kueue_queue="lq"), experiment_name="exp", trial_name="queued"
    )
    try:
        return queued.create_workers(job("actor", 1))
    finally:
        queued.close()


def diagnosis_without(missing: str, present: str) -> Callable[[Exception], None]:
    """The crash is still reported, without the section the rule provides; the other section shows the
    diagnosis did run."""

    def check(error: Exception) -> None:
        assert isinstance(error, WorkerFailedError), repr(error)
        assert "exit code 3" in error.stderr, error.stderr
        assert missing not in error.stderr, error.stderr
        assert present in error.stderr, error.stderr

    return check


CASES = {
    # helm's release storage: the first `helm status` / `helm upgrade --install` of the release.
    "secrets": Case("secrets", nothing, create()),
    # helm upgrade --install: the chart's objects are read before they are created.
    "statefulsets": Case("statefulsets", nothing, create()),
    "services-configmaps-serviceaccounts": Case("serviceaccounts", nothing, create()),
    "networkpolicies": Case("networkpolicies", nothing, create()),
    "poddisruptionbudgets": Case("poddisruptionbudgets", nothing, create()),
    # get_workers: PodWatch lists and watches the role's pods.
    "pods": Case("pods", create(), lambda scheduler: scheduler.get_workers("actor", timeout=30)),
    # ReleaseInspector.log_tail: the worker's own last lines leave the error; the events stay.
    "pods-log": Case(
        "pods/log", nothing, create_a_crashing_role, diagnosis_without(missing=CRASH_LINE, present="events (last")
    ),
    # ReleaseInspector.events: the events leave the error; the log tail stays.
    "events": Case(
        "events", nothing, create_a_crashing_role, diagnosis_without(missing="events (last", present=CRASH_LINE)
    ),
    # delete_workers(reverse_order=True) scales the role to rank 0 before the helm upgrade that removes it.
    "statefulsets-scale": Case(
        "statefulsets/scale", create(2), lambda scheduler: scheduler.delete_workers("actor", reverse_order=True)
    ),
    # ReleaseLease: a scheduler takes the release's Lease right before its first install (and renews it while it
    # lives); without the rule the install does not happen.
    "leases": Case(
        "leases",
        nothing,
        create(),
        lambda error: (
            (
                isinstance(error, ClusterAccessError)
                and error.cause == "forbidden"
                and "leases in coordination.k8s.io" in str(error)
            )
            or pytest.fail(repr(error))
        ),
    ),
    # A queued role's LocalQueue is read before the revision that queues it (preflight.check_queues).
    "localqueues": Case("localqueues", nothing, create_queued),
}
# Rules whose loss shows only on a cluster with Kueue admitting pods: shown in test_kueue.py.
TESTED_IN_TEST_KUEUE = {"workloads"}


def test_every_rule_of_the_role_has_a_case():
    covered = {case.resource for case in CASES.values()} | TESTED_IN_TEST_KUEUE
    assert all(covered & set(rule["resources"]) for rule in FULL_RULES), [
        rule["resources"] for rule in FULL_RULES if not covered & set(rule["resources"])
    ]


@pytest.fixture
def drop_rule(make_scheduler, kube_client, namespace) -> Iterator[Callable[[str], None]]:
    """Removes the rule granting a resource from the controller's Role (applied by make_scheduler) and waits until
    the authorizer denies it; puts every rule back before make_scheduler's clean-up."""
    rbac = client.RbacAuthorizationV1Api(kube_client)
    authorization = client.AuthorizationV1Api(kube_client)
    user = f"system:serviceaccount:{namespace}:{ROLE}"

    def drop(resource: str, group: str | None = None) -> None:
        rule = next(
            rule
            for rule in FULL_RULES
            if resource in rule["resources"] and (group is None or group in rule["apiGroups"])
        )
        role = rbac.read_namespaced_role(ROLE, namespace)
        role.rules = [
            client.V1PolicyRule(api_groups=r["apiGroups"], resources=r["resources"], verbs=r["verbs"])
            for r in FULL_RULES
            if r is not rule
        ]
        rbac.replace_namespaced_role(ROLE, namespace, role)
        name, _, subresource = resource.partition("/")
        review = client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=user,
                groups=["system:serviceaccounts", "system:authenticated"],
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace,
                    group=rule["apiGroups"][0],
                    resource=name,
                    subresource=subresource or None,
                    verb=rule["verbs"][0],
                ),
            )
        )
        deadline = time.monotonic() + 10
        while authorization.create_subject_access_review(review).status.allowed:
            assert time.monotonic() < deadline, f"the authorizer still grants {resource}"
            time.sleep(0.05)

    yield drop
    role = rbac.read_namespaced_role(ROLE, namespace)
    role.rules = [
        client.V1PolicyRule(api_groups=r["apiGroups"], resources=r["resources"], verbs=r["verbs"]) for r in FULL_RULES
    ]
    rbac.replace_namespaced_role(ROLE, namespace, role)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_without_the_rule_its_adapter_operation_fails(make_scheduler, drop_rule, case):
    scheduler = make_scheduler()
    case.prepare(scheduler)
    drop_rule(case.resource)
    with pytest.raises(Exception) as raised:
        case.operation(scheduler)
    if case.check is not None:
        case.check(raised.value)
    else:
        text = str(raised.value).replace('\\"', '"')  # an ApiException shows the API's JSON, quotes escaped
        rule = next(rule for rule in FULL_RULES if case.resource in rule["resources"])
        assert "forbidden" in text and any(f'resource "{name}"' in text for name in rule["resources"]), text


def test_without_the_events_rule_the_scheduler_works_records_nothing_and_logs_once(
    make_scheduler, drop_rule, core, namespace, caplog
):
    """Events are best-effort: with the rule the controller records its decisions; without it every call still
    works, no Event is written, and one warning names the rule to add."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")

    def recorded() -> list[str]:
        selector = "reportingComponent=areal-workers"
        return [e.reason for e in core.list_namespaced_event(namespace, field_selector=selector).items]

    assert recorded() == ["RevisionWritten"]
    drop_rule("events", group="events.k8s.io")
    with caplog.at_level(logging.WARNING, logger="areal_workers.runtime.events"):
        scheduler.scale_workers("actor", 2)
        assert len(scheduler.get_workers("actor")) == 2
        scheduler.delete_workers("actor")
    assert recorded() == ["RevisionWritten"]
    (line,) = [r.getMessage() for r in caplog.records if r.name == "areal_workers.runtime.events"]
    assert "forbidden" in line.lower() and "create and patch on events in API group events.k8s.io" in line, line
