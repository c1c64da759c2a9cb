"""How one node stands towards one pod: node selection, taints, readiness, allocatable and free resources."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from kubernetes.client import V1Node, V1NodeSelectorRequirement, V1NodeSelectorTerm, V1Pod, V1Taint, V1Toleration
from kubernetes.utils import parse_quantity

from .resources import add_to, pod_requests

# Taints that node lifecycle, cordon and pressure set and remove on their own.
TRANSIENT_TAINT_PREFIX = "node.kubernetes.io/"
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_GONE_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True)
class NodeFit:
    """How one node stands towards one pod: selection, taints, availability, allocatable and free resources."""

    name: str
    selector_ok: bool
    hard_taints: tuple[str, ...]  # untolerated taints no controller removes by itself
    soft_block: str | None  # cordoned, NotReady or a transient taint: may clear up
    allocatable: Mapping[str, Decimal]
    free: Mapping[str, Decimal] | None  # None: pods on the node unknown


def is_ready(node: V1Node) -> tuple[bool, str]:
    conditions = node.status.conditions if node.status is not None else None
    ready = next((condition for condition in conditions or [] if condition.type == "Ready"), None)
    if ready is None:
        return False, "the node reports no Ready condition"
    if ready.status == "True":
        return True, ""
    detail = ": ".join(text for text in (ready.reason, ready.message) if text)
    return False, f"Ready={ready.status}" + (f" ({detail})" if detail else "")


def _tolerates(toleration: V1Toleration, taint: V1Taint) -> bool:
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if not toleration.key:
        return toleration.operator == "Exists"
    if toleration.key != taint.key:
        return False
    return toleration.operator == "Exists" or (toleration.value or "") == (taint.value or "")


def _taint_text(taint: V1Taint) -> str:
    return f"{taint.key}" + (f"={taint.value}" if taint.value else "") + f":{taint.effect}"


def _matches_requirement(values: Mapping[str, str], requirement: V1NodeSelectorRequirement) -> bool:
    key, operator, wanted = requirement.key, requirement.operator, requirement.values or []
    present = key in values
    if operator == "In":
        return present and values[key] in wanted
    if operator == "NotIn":
        return not present or values[key] not in wanted
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(wanted) == 1:
        try:
            actual, bound = int(values[key]), int(wanted[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def _required_terms(pod: V1Pod) -> list[V1NodeSelectorTerm]:
    affinity = pod.spec.affinity
    node_affinity = affinity.node_affinity if affinity is not None else None
    required = node_affinity.required_during_scheduling_ignored_during_execution if node_affinity else None
    return list(required.node_selector_terms or []) if required is not None else []


def _selector_matches(pod: V1Pod, node: V1Node) -> bool:
    labels = node.metadata.labels or {}
    if any(labels.get(key) != value for key, value in (pod.spec.node_selector or {}).items()):
        return False
    terms = _required_terms(pod)
    fields = {"metadata.name": node.metadata.name}
    return not terms or any(
        (term.match_expressions or term.match_fields)
        and all(_matches_requirement(labels, r) for r in term.match_expressions or [])
        and all(_matches_requirement(fields, r) for r in term.match_fields or [])
        for term in terms
    )


def describe_selector(pod: V1Pod, nodes: Sequence[V1Node]) -> str:
    """The pod's nodeSelector and required node affinity in words; with nodes, the values their labels have."""
    parts = []
    selector = pod.spec.node_selector or {}
    if selector:
        parts.append("nodeSelector " + ", ".join(f"{key}={value}" for key, value in selector.items()))
    terms = _required_terms(pod)
    if terms:
        described = [
            "; ".join(
                f"{r.key} {r.operator} {list(r.values or [])}".removesuffix(" []")
                for r in [*(t.match_expressions or []), *(t.match_fields or [])]
            )
            for t in terms
        ]
        parts.append("required node affinity " + " or ".join(f"({text})" for text in described))
    text = " and ".join(parts) or "the pod's node selection"
    seen = []
    for key in selector if nodes else ():
        values = sorted({label for node in nodes if (label := (node.metadata.labels or {}).get(key)) is not None})
        seen.append(f"{key}: {', '.join(values[:5])}" if values else f"no node has label {key}")
    return text + (f" (nodes have {'; '.join(seen)})" if seen else "")


def node_fit(pod: V1Pod, node: V1Node, pods_by_node: Mapping[str, Sequence[V1Pod]] | None) -> NodeFit:
    """`node` against `pod`; `pods_by_node` (None: unknown) gives the free resources."""
    name = node.metadata.name
    tolerations = pod.spec.tolerations or []
    untolerated = [
        taint
        for taint in (node.spec.taints if node.spec is not None else None) or []
        if taint.effect in _BLOCKING_EFFECTS and not any(_tolerates(t, taint) for t in tolerations)
    ]
    hard = tuple(_taint_text(t) for t in untolerated if not t.key.startswith(TRANSIENT_TAINT_PREFIX))
    soft = [_taint_text(t) for t in untolerated if t.key.startswith(TRANSIENT_TAINT_PREFIX)]
    ready, why = is_ready(node)
    if node.spec is not None and node.spec.unschedulable:
        soft.insert(0, "cordoned")
    if not ready:
        soft.insert(0, f"NotReady ({why})")
    allocatable = {
        key: parse_quantity(value) for key, value in ((node.status.allocatable if node.status else None) or {}).items()
    }
    free = None
    if pods_by_node is not None:
        used: dict[str, Decimal] = {}
        for other in pods_by_node.get(name, ()):
            if _same_pod(other, pod) or (other.status is not None and other.status.phase in _GONE_PHASES):
                continue
            add_to(used, pod_requests(other))
        free = {key: value - used.get(key, Decimal(0)) for key, value in allocatable.items()}
    return NodeFit(
        name=name,
        selector_ok=_selector_matches(pod, node),
        hard_taints=hard,
        soft_block=", ".join(soft) or None,
        allocatable=allocatable,
        free=free,
    )


def _same_pod(a: V1Pod, b: V1Pod) -> bool:
    if a.metadata.uid and b.metadata.uid:
        return a.metadata.uid == b.metadata.uid
    return (a.metadata.name, a.metadata.namespace) == (b.metadata.name, b.metadata.namespace)
