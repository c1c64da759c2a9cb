"""drain_note: a worker on a cordoned node is told what the drain does to it, by its role's budget."""

from __future__ import annotations

from kubernetes.client import (
    V1LabelSelector,
    V1Node,
    V1NodeSpec,
    V1ObjectMeta,
    V1Pod,
    V1PodDisruptionBudget,
    V1PodDisruptionBudgetSpec,
    V1PodDisruptionBudgetStatus,
    V1PodSpec,
)

from areal_workers.diagnosis import drain_note

LABELS = {"app.kubernetes.io/instance": "aw-t", "areal.io/role": "actor"}


def pod(node: str = "gpu-1") -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name="aw-t-actor-0", labels=LABELS), spec=V1PodSpec(containers=[], node_name=node)
    )


def node(name: str = "gpu-1", cordoned: bool = True) -> V1Node:
    return V1Node(metadata=V1ObjectMeta(name=name), spec=V1NodeSpec(unschedulable=cordoned or None))


def budget(allowed: int, labels: dict[str, str] = LABELS) -> V1PodDisruptionBudget:
    return V1PodDisruptionBudget(
        metadata=V1ObjectMeta(name="aw-t-actor"),
        spec=V1PodDisruptionBudgetSpec(max_unavailable=0, selector=V1LabelSelector(match_labels=labels)),
        status=V1PodDisruptionBudgetStatus(
            current_healthy=2, desired_healthy=2, disruptions_allowed=allowed, expected_pods=2
        ),
    )


def test_a_budget_that_allows_nothing_says_the_drain_waits_and_how_to_let_it_go_on():
    note = drain_note(pod(), [node()], [budget(0)], "aw-t")
    assert note.startswith("node gpu-1 is cordoned")
    assert "PodDisruptionBudget aw-t-actor allows no eviction" in note
    assert "areal-workers down --release aw-t" in note and "roles.actor.disruptionBudget.maxUnavailable" in note
    assert "kubectl uncordon gpu-1" in note


def test_a_budget_that_allows_evictions_warns_that_the_engines_go():
    assert "allows 1 eviction(s) now" in drain_note(pod(), [node()], [budget(1)], "aw-t")


def test_no_budget_of_this_role_means_nothing_protects_the_worker():
    other_role = budget(0, {**LABELS, "areal.io/role": "critic"})
    assert "no PodDisruptionBudget protects this worker" in drain_note(pod(), [node()], [other_role], "aw-t")


def test_nothing_to_say_when_the_node_is_schedulable_or_unknown():
    assert drain_note(pod(), [node(cordoned=False)], [budget(0)], "aw-t") == ""
    assert drain_note(pod(), [node("gpu-2")], [budget(0)], "aw-t") == ""
    assert drain_note(pod(), [], [budget(0)], "aw-t") == ""
