"""Why a drain waits for a worker: its node is cordoned (kubectl drain, the cluster autoscaler, a node upgrade) and
its role's PodDisruptionBudget allows no eviction while the trial runs. The pod itself is healthy, so this is a note
beside the diagnosis, not a Problem."""

from __future__ import annotations

from collections.abc import Sequence

from kubernetes.client import V1Node, V1Pod, V1PodDisruptionBudget


def drain_note(pod: V1Pod, nodes: Sequence[V1Node], budgets: Sequence[V1PodDisruptionBudget], release: str) -> str:
    """What a drain of the pod's node does to this worker; "" when its node is not cordoned (or unknown)."""
    node_name = pod.spec.node_name
    node = next((node for node in nodes if node.metadata.name == node_name), None)
    if node is None or not (node.spec and node.spec.unschedulable):
        return ""
    cordoned = f"node {node_name} is cordoned (kubectl drain, the cluster autoscaler or a node upgrade is emptying it)"
    budget = next((budget for budget in budgets if _selects(budget, pod)), None)
    if budget is None:
        return (
            f"{cordoned}, and no PodDisruptionBudget protects this worker: an eviction takes it, and AReaL loses its "
            "engines (enable the role's disruptionBudget)"
        )
    allowed = budget.status.disruptions_allowed if budget.status is not None else 0
    if allowed:
        return (
            f"{cordoned}: PodDisruptionBudget {budget.metadata.name} allows {allowed} eviction(s) now, so the drain "
            "may take this worker, and AReaL loses its engines"
        )
    role = (pod.metadata.labels or {}).get("areal.io/role", "<role>")
    return (
        f"{cordoned}, and the drain waits for this worker: PodDisruptionBudget {budget.metadata.name} allows no "
        f"eviction while the trial runs (maxUnavailable {budget.spec.max_unavailable}). To let the drain go on, end "
        f"the trial (delete_workers(), or areal-workers down --release {release}), or allow evictions with "
        f"roles.{role}.disruptionBudget.maxUnavailable (an evicted worker's engines are lost); "
        f"kubectl uncordon {node_name} cancels the drain"
    )


def _selects(budget: V1PodDisruptionBudget, pod: V1Pod) -> bool:
    selector = budget.spec.selector
    wanted = (selector.match_labels or {}) if selector is not None else {}
    labels = pod.metadata.labels or {}
    return bool(wanted) and all(labels.get(key) == value for key, value in wanted.items())
