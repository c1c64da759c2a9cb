"""Before a change is written: could one topology domain ever hold all of a role's workers?

Some roles must run all their workers in one domain of a node label: the chart's `exclusiveTopology` (a required
pod affinity term on the pod template's own labels) and Kueue's `kueue.requiredTopology` (the pod template's
`kueue.x-k8s.io/podset-required-topology` annotation). Such a role fits when the usable nodes of one value of that
label together hold `replicas` of its pods. As in capacity.py only "never" counts: a node is usable when it matches
the pod's node selection, has no taint the pod does not tolerate and is not cordoned, and it holds as many pods as
its allocatable has room for; what other pods use, and domains other roles hold, are not counted (they change).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

from kubernetes.client import V1Node, V1Pod

from ..diagnosis import node_fit, pod_requests

REQUIRED_TOPOLOGY_ANNOTATION = "kueue.x-k8s.io/podset-required-topology"
EXCLUSIVE_GROUP_LABEL = "areal.io/exclusive-group"
_MAX_LISTED = 3
_UNBOUNDED = 10**9  # a node that reports no limit on what the pod needs (no requests, no pod limit)


class SharedDomain(NamedTuple):
    """A node label all of a role's pods must share one value of, and the setting that asks for it."""

    label: str
    setting: str


def shared_domains(statefulset: Mapping[str, Any]) -> list[SharedDomain]:
    """The one-domain requirements of the StatefulSet's pod template: Kueue's required topology, and each required
    pod affinity term that selects the template's own pods (in its own namespace)."""
    template = (statefulset.get("spec") or {}).get("template") or {}
    metadata = template.get("metadata") or {}
    own_labels = metadata.get("labels") or {}
    found = []
    kueue_level = (metadata.get("annotations") or {}).get(REQUIRED_TOPOLOGY_ANNOTATION)
    if kueue_level:
        found.append(SharedDomain(str(kueue_level), "kueue.requiredTopology"))
    affinity = ((template.get("spec") or {}).get("affinity") or {}).get("podAffinity") or {}
    for term in affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or []:
        selector = term.get("labelSelector") or {}
        match = selector.get("matchLabels") or {}
        own = match and not selector.get("matchExpressions") and all(own_labels.get(k) == v for k, v in match.items())
        if own and "namespaces" not in term and "namespaceSelector" not in term and term.get("topologyKey"):
            setting = "exclusiveTopology" if EXCLUSIVE_GROUP_LABEL in match else "its required pod affinity term"
            found.append(SharedDomain(str(term["topologyKey"]), setting))
    return list(dict.fromkeys(found))


def domain_verdict(role: str, statefulset: Mapping[str, Any], pod: V1Pod, nodes: Sequence[V1Node]) -> str | None:
    """A message when no domain of a label the role's pods must share could ever hold all of them; else None."""
    replicas = int((statefulset.get("spec") or {}).get("replicas") or 0)
    if replicas < 1 or not nodes:
        return None
    needs = {**pod_requests(pod), "pods": Decimal(1)}
    for domain in shared_domains(statefulset):
        holds = _holds_by_domain(domain.label, pod, needs, nodes)
        if not holds:
            return (
                f"role {role} must run its {replicas} workers in one domain of node label {domain.label} "
                f"({domain.setting}), but no node it may use has that label: label the nodes "
                f"(kubectl label node NODE {domain.label}=DOMAIN) or remove {domain.setting}"
            )
        best = max(sum(counts.values()) for counts in holds.values())
        if best >= replicas:
            continue
        ranked = sorted(holds.items(), key=lambda item: -sum(item[1].values()))
        shown = "; ".join(
            f"{value}: {sum(counts.values())} on {_nodes_text(counts)}" for value, counts in ranked[:_MAX_LISTED]
        )
        more = f"; +{len(ranked) - _MAX_LISTED} more" if len(ranked) > _MAX_LISTED else ""
        return (
            f"role {role} must run its {replicas} workers in one domain of node label {domain.label} "
            f"({domain.setting}), but no domain could ever hold more than {best} ({shown}{more}): lower the role's "
            f"replicas to <= {best}, add nodes with room to one domain, or remove {domain.setting}"
        )
    return None


def _holds_by_domain(
    label: str, pod: V1Pod, needs: Mapping[str, Decimal], nodes: Sequence[V1Node]
) -> dict[str, dict[str, int]]:
    """{domain value: {node: how many of the pods it could hold}} over the usable nodes that carry `label`."""
    holds: dict[str, dict[str, int]] = {}
    for node in nodes:
        value = (node.metadata.labels or {}).get(label)
        cordoned = bool(node.spec is not None and node.spec.unschedulable)
        fit = node_fit(pod, node, None)
        if value is None or cordoned or not fit.selector_ok or fit.hard_taints:
            continue
        holds.setdefault(value, {})[fit.name] = _pods_per_node(fit.allocatable, needs)
    return holds


def _pods_per_node(allocatable: Mapping[str, Decimal], needs: Mapping[str, Decimal]) -> int:
    counts = [
        int(allocatable.get(resource, Decimal(0)) // amount)
        for resource, amount in needs.items()
        if amount > 0 and not (resource == "pods" and "pods" not in allocatable)
    ]
    return min(counts, default=_UNBOUNDED)


def _nodes_text(counts: Mapping[str, int]) -> str:
    names = sorted(counts, key=lambda name: (-counts[name], name))
    text = ", ".join(f"{name} ({counts[name]})" for name in names[:_MAX_LISTED])
    return text + (f", +{len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else "")
