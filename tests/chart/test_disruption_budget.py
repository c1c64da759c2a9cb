"""The roles' PodDisruptionBudgets: one per role and pod-mode fork with workers, selecting exactly its pods; no
eviction by default (AReaL restarts no worker it loses); per-role overrides and the schema's refusals."""

from __future__ import annotations

import pytest

from chartlib import find, render, render_error, role, sts


def budgets(docs: list[dict]) -> dict[str, dict]:
    return {d["metadata"]["labels"]["areal.io/role"]: d for d in find(docs, "PodDisruptionBudget")}


def test_every_role_and_pod_fork_with_workers_gets_a_budget_that_blocks_evictions():
    docs = render(
        {
            "roles": {"actor": role(2), "rollout": role(3), "idle": role(0)},
            "forks": {"ref": {"target": "actor", "mode": "pod"}, "proc": {"target": "actor"}},
        }
    )
    found = budgets(docs)
    assert sorted(found) == ["actor", "ref", "rollout"]  # no pods, no budget: idle; a process fork has no pods
    for name, budget in found.items():
        statefulset = sts(docs, name)
        assert budget["metadata"]["name"] == statefulset["metadata"]["name"]
        assert budget["spec"]["maxUnavailable"] == 0
        assert budget["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
        pod_labels = statefulset["spec"]["template"]["metadata"]["labels"]
        assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
        assert budget["spec"]["selector"]["matchLabels"]["areal.io/role"] == name  # not another role's pods


def test_a_role_allows_evictions_or_drops_its_budget():
    docs = render(
        {
            "roles": {
                "rollout": role(4, disruptionBudget={"maxUnavailable": "25%"}),
                "actor": role(2, disruptionBudget={"enabled": False}),
                "critic": role(
                    2, disruptionBudget={"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "IfHealthyBudget"}
                ),
            }
        }
    )
    found = budgets(docs)
    assert sorted(found) == ["critic", "rollout"]
    assert found["rollout"]["spec"]["maxUnavailable"] == "25%"
    assert found["critic"]["spec"] == {
        **found["critic"]["spec"],
        "maxUnavailable": 1,
        "unhealthyPodEvictionPolicy": "IfHealthyBudget",
    }


def test_defaults_off_turns_every_budget_off():
    docs = render({"workerDefaults": {"disruptionBudget": {"enabled": False}}, "roles": {"actor": role(2)}})
    assert budgets(docs) == {}


@pytest.mark.parametrize(
    ("budget", "named"),
    [
        ({"maxUnavailable": -1}, "maxUnavailable"),
        ({"maxUnavailable": "half"}, "maxUnavailable"),
        ({"unhealthyPodEvictionPolicy": "Never"}, "unhealthyPodEvictionPolicy"),
        ({"minAvailable": 1}, "minAvailable"),
    ],
)
def test_bad_budget_values_are_refused_by_the_schema(budget, named):
    error = render_error({"roles": {"actor": role(2, disruptionBudget=budget)}})
    assert named in error, error
