"""Before a change is written: could any node ever hold a pod of each new or changed role?

Pure functions from the manifests the chart rendered for the change (`Releases.render`) and the cluster's nodes to
messages that name the cause and the fix. A pod template fits a node when the node matches its nodeSelector and
required node affinity, has no NoSchedule/NoExecute taint it does not tolerate, is not cordoned, and its allocatable
holds every resource the pod requests (cpu, memory, GPUs and any other extended resource) and one more pod.
Resources in use by other pods do not count: they are freed over time, so only "never" is reported.

The predicates are those of `diagnosis` (which explains pods that are already Pending): `node_fit`, `pod_requests`,
`describe_selector`. Like there, a node that is NotReady or has a `node.kubernetes.io/` taint still counts (it may
recover); a cordoned node does not. Without nodes (an empty list: no permission to list them) there is no verdict.
Pod anti-affinity, topology spread, host ports and volumes are not judged: they depend on pods not created yet. A
role whose pods must share one topology domain (exclusive placement, Kueue's required topology) is judged by
domain_capacity.py: some domain must hold all its replicas.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from decimal import ROUND_FLOOR, Decimal
from typing import Any, NamedTuple, get_args

from kubernetes.client import (
    V1Affinity,
    V1Container,
    V1Node,
    V1NodeAffinity,
    V1NodeSelector,
    V1NodeSelectorRequirement,
    V1NodeSelectorTerm,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1ResourceRequirements,
    V1Toleration,
)

from ..config import CapacityCheck
from ..diagnosis import NodeFit, describe_selector, format_quantity, node_fit, pod_requests
from ..naming import LABEL_ROLE
from .domain_capacity import domain_verdict

__all__ = ["CapacityCheck", "CapacityProblem", "check_capacity", "preflight", "role_statefulsets", "template_pod"]

ROLE_NAME_ANNOTATION = "areal.io/role-name"
_PODS = "pods"
_UNLIMITED = Decimal("Infinity")
_GIB = Decimal(1024**3)
_MAX_LISTED = 3


class CapacityProblem(NamedTuple):
    """A role none of whose pods any node could ever hold; `message` starts with "role <role>"."""

    role: str
    message: str


def preflight(
    manifests: Sequence[Mapping[str, Any]],
    roles: Iterable[str],
    nodes: Sequence[V1Node],
    mode: CapacityCheck = "reject",
) -> list[str]:
    """One message per role that no node can hold ([] for mode "off" or without nodes). With "reject" the caller
    raises them before anything is written, with "warn" it logs them and goes on."""
    if mode not in get_args(CapacityCheck):
        raise ValueError(f"capacity check mode must be one of {', '.join(get_args(CapacityCheck))}, got {mode!r}")
    if mode == "off":
        return []
    return [problem.message for problem in check_capacity(manifests, roles, nodes)]


def check_capacity(
    manifests: Sequence[Mapping[str, Any]], roles: Iterable[str], nodes: Sequence[V1Node]
) -> list[CapacityProblem]:
    """For each role's StatefulSet(s) among `manifests`: a problem when no node in `nodes` can hold one of its pods."""
    if not nodes:
        return []
    problems = []
    for role in dict.fromkeys(roles):
        for statefulset in role_statefulsets(manifests, role):
            if (statefulset.get("spec") or {}).get("replicas") == 0:
                continue
            pod = template_pod(statefulset)
            message = _role_verdict(role, pod, nodes) or domain_verdict(role, statefulset, pod, nodes)
            if message is not None:
                problems.append(CapacityProblem(role, message))
    return problems


def role_statefulsets(manifests: Sequence[Mapping[str, Any]], role: str) -> list[Mapping[str, Any]]:
    """The StatefulSets the chart renders for `role` (a role or a pod-mode fork); colocated roles have none."""
    return [manifest for manifest in manifests if manifest.get("kind") == "StatefulSet" and _role_of(manifest) == role]


def _role_of(manifest: Mapping[str, Any]) -> str | None:
    metadata = manifest.get("metadata") or {}
    return (metadata.get("annotations") or {}).get(ROLE_NAME_ANNOTATION) or (metadata.get("labels") or {}).get(
        LABEL_ROLE
    )


# ---------------------------------------------------------------------------------------------------------------
# Pod template -> V1Pod


def template_pod(statefulset: Mapping[str, Any]) -> V1Pod:
    """The StatefulSet's pod template as a V1Pod carrying what node selection reads: name, nodeSelector, required
    node affinity, tolerations, the containers' resources and the overhead. (The client's deserializer is strict
    about types the API server accepts, such as `cpu: 8`, and its signature differs between client versions.)"""
    template = (statefulset.get("spec") or {}).get("template") or {}
    spec = template.get("spec") or {}
    name = ((statefulset.get("metadata") or {}).get("name") or "worker") + "-0"
    return V1Pod(
        metadata=V1ObjectMeta(name=name, labels=_strings((template.get("metadata") or {}).get("labels"))),
        spec=V1PodSpec(
            containers=[_container(c) for c in spec.get("containers") or []],
            init_containers=[_container(c) for c in spec.get("initContainers") or []] or None,
            node_selector=_strings(spec.get("nodeSelector")),
            tolerations=[_toleration(t) for t in spec.get("tolerations") or []] or None,
            affinity=_node_affinity(spec.get("affinity")),
            overhead=_strings(spec.get("overhead")),
        ),
    )


def _strings(mapping: Mapping[str, Any] | None) -> dict[str, str] | None:
    return {str(key): str(value) for key, value in mapping.items()} if mapping else None


def _container(container: Mapping[str, Any]) -> V1Container:
    resources = container.get("resources") or {}
    return V1Container(
        name=str(container.get("name") or "container"),
        restart_policy=container.get("restartPolicy"),
        resources=V1ResourceRequirements(
            requests=_strings(resources.get("requests")), limits=_strings(resources.get("limits"))
        ),
    )


def _toleration(toleration: Mapping[str, Any]) -> V1Toleration:
    return V1Toleration(
        key=toleration.get("key"),
        operator=toleration.get("operator"),
        value=toleration.get("value"),
        effect=toleration.get("effect"),
    )


def _node_affinity(affinity: Mapping[str, Any] | None) -> V1Affinity | None:
    node_affinity = (affinity or {}).get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return None
    return V1Affinity(
        node_affinity=V1NodeAffinity(
            required_during_scheduling_ignored_during_execution=V1NodeSelector(
                node_selector_terms=[
                    V1NodeSelectorTerm(
                        match_expressions=_requirements(term.get("matchExpressions")),
                        match_fields=_requirements(term.get("matchFields")),
                    )
                    for term in terms
                ]
            )
        )
    )


def _requirements(requirements: Sequence[Mapping[str, Any]] | None) -> list[V1NodeSelectorRequirement] | None:
    if not requirements:
        return None
    return [
        V1NodeSelectorRequirement(
            key=r.get("key"), operator=r.get("operator"), values=[str(v) for v in r.get("values") or []] or None
        )
        for r in requirements
    ]


# ---------------------------------------------------------------------------------------------------------------
# Verdict


class _Candidate(NamedTuple):
    node: V1Node
    fit: NodeFit

    @property
    def cordoned(self) -> bool:
        return bool(self.node.spec is not None and self.node.spec.unschedulable)


def _role_verdict(role: str, pod: V1Pod, nodes: Sequence[V1Node]) -> str | None:
    needs = _ordered_needs(pod)
    candidates = [_Candidate(node, node_fit(pod, node, None)) for node in nodes]
    selected = [c for c in candidates if c.fit.selector_ok]
    if not selected:
        return (
            f"role {role}: {describe_selector(pod, nodes)} matches none of the {_count(len(nodes))}: label "
            "nodes to match, or change KubernetesSchedulerConfig.node_selector or the chart's "
            "nodeSelector/affinity"
        )
    tolerated = [c for c in selected if not c.fit.hard_taints]
    if not tolerated:
        taints = sorted({taint for c in selected for taint in c.fit.hard_taints})
        return (
            f"role {role}: every node it may use ({_names(selected)}) has a taint it does not tolerate "
            f"({', '.join(taints[:4])}): add tolerations for them (the chart's workerDefaults.tolerations or the "
            "role's own tolerations, in values_files), or choose other nodes"
        )
    usable = [c for c in tolerated if not c.cordoned]
    if not usable:
        return (
            f"role {role}: every node it may use is cordoned ({_names(tolerated)}): uncordon them "
            "(kubectl uncordon NODE) or add nodes"
        )
    if any(_holds(c.fit, needs) for c in usable):
        return None
    return _shortfall(role, pod, needs, usable, candidates)


def _ordered_needs(pod: V1Pod) -> dict[str, Decimal]:
    """What one pod needs: GPUs and other extended resources first, then cpu, memory, the rest; and one pod slot."""
    requests = pod_requests(pod)
    order = sorted(requests, key=lambda r: (0 if "/" in r else 1 if r == "cpu" else 2 if r == "memory" else 3, r))
    return {**{resource: requests[resource] for resource in order}, _PODS: Decimal(1)}


def _available(fit: NodeFit, resource: str) -> Decimal:
    if resource == _PODS and _PODS not in fit.allocatable:
        return _UNLIMITED  # a node that reports no pod limit (hand-written test nodes)
    return fit.allocatable.get(resource, Decimal(0))


def _holds(fit: NodeFit, needs: Mapping[str, Decimal]) -> bool:
    return all(_available(fit, resource) >= amount for resource, amount in needs.items())


def _largest(candidates: Sequence[_Candidate], resource: str) -> Decimal:
    return max(_available(c.fit, resource) for c in candidates)


def _shortfall(
    role: str, pod: V1Pod, needs: Mapping[str, Decimal], usable: Sequence[_Candidate], candidates: Sequence[_Candidate]
) -> str:
    largest = {resource: _largest(usable, resource) for resource in needs}
    short = {resource: largest[resource] for resource, amount in needs.items() if largest[resource] < amount}
    scope = _scope(pod, candidates)
    if short:
        cause = "; ".join(_none_offers(resource, most) for resource, most in short.items())
        fixes = [_lower(resource, most) for resource, most in short.items()]
    else:
        cause, scope = "no node offers all of it at once", f"{scope}: {_shapes(usable, needs)}"
        fixes = ["lower the requests"]
    fixes.append(f"add a node with {_shape(needs)}")
    message = f"role {role} needs {_needs_text(needs)} per worker; {cause} ({scope}): {', or '.join(fixes)}"
    return message + _excluded_hint(pod, needs, candidates)


def _needs_text(needs: Mapping[str, Decimal]) -> str:
    return ", ".join(
        f"{resource}: {format_quantity(resource, amount)}" for resource, amount in needs.items() if resource != _PODS
    )


def _shape(needs: Mapping[str, Decimal]) -> str:
    return (
        ", ".join(
            f"{resource} >= {format_quantity(resource, amount)}"
            for resource, amount in needs.items()
            if resource != _PODS
        )
        or "room for one more pod"
    )


def _shapes(usable: Sequence[_Candidate], needs: Mapping[str, Decimal]) -> str:
    """'a has nvidia.com/gpu 8, cpu 4; b has ...' for the first nodes, showing the resources the pod needs."""
    shown = [
        f"{c.fit.name} has "
        + ", ".join(
            f"{resource} {format_quantity(resource, _available(c.fit, resource))}"
            for resource in needs
            if resource != _PODS
        )
        for c in usable[:_MAX_LISTED]
    ]
    return "; ".join(shown) + (f"; +{len(usable) - _MAX_LISTED} more" if len(usable) > _MAX_LISTED else "")


def _none_offers(resource: str, largest: Decimal) -> str:
    if resource == _PODS:
        return "no node it may use accepts another pod (allocatable pods is 0)"
    if largest <= 0:
        return f"no node offers {resource}"
    return f"no node offers more than {format_quantity(resource, largest)} {resource}"


def _lower(resource: str, largest: Decimal) -> str:
    """The change to the role that makes it fit the largest node, in SchedulingSpec's units."""
    if resource == _PODS:
        return "raise the nodes' pod limit (kubelet maxPods)"
    if "gpu" in resource:
        if largest < 1:
            return (
                "set SchedulingSpec.gpu to 0 (or install the GPU device plugin, or set the chart's "
                "resources.gpuResourceName to the nodes' GPU resource)"
            )
        return f"lower SchedulingSpec.gpu to <= {int(largest)}"
    if resource == "cpu":
        return f"lower SchedulingSpec.cpu to <= {_plain(largest)}"
    if resource == "memory":
        return f"lower SchedulingSpec.mem to <= {_plain((largest / _GIB).quantize(Decimal('0.1'), ROUND_FLOOR))} (GiB)"
    if largest <= 0:
        return f"drop the {resource} request from the chart's values (or install its device plugin)"
    return f"lower the {resource} request in the chart's values to <= {format_quantity(resource, largest)}"


def _plain(value: Decimal) -> str:
    text = f"{value.normalize():f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _scope(pod: V1Pod, candidates: Sequence[_Candidate]) -> str:
    """'2 of 3 nodes match its nodeSelector pool=gpu, 1 of them cordoned': where the verdict looked."""
    selected = [c for c in candidates if c.fit.selector_ok]
    tainted = sum(1 for c in selected if c.fit.hard_taints)
    cordoned = sum(1 for c in selected if not c.fit.hard_taints and c.cordoned)
    spec = pod.spec
    affinity = spec.affinity.node_affinity if spec.affinity is not None else None
    if spec.node_selector or affinity is not None:
        text = f"{len(selected)} of {_count(len(candidates))} match its {describe_selector(pod, ())}"
    else:
        text = _count(len(candidates))
    if tainted:
        text += f", {tainted} of them with a taint it does not tolerate"
    if cordoned:
        text += f", {cordoned} of them cordoned"
    return text


def _excluded_hint(pod: V1Pod, needs: Mapping[str, Decimal], candidates: Sequence[_Candidate]) -> str:
    """'; node big-1 would hold it but is cordoned' for nodes large enough that the pod may not use."""
    reasons = []
    for c in candidates:
        if not _holds(c.fit, needs):
            continue
        if not c.fit.selector_ok:
            reasons.append(f"node {c.fit.name} would hold it but does not match its {describe_selector(pod, ())}")
        elif c.fit.hard_taints:
            reasons.append(
                f"node {c.fit.name} would hold it but has taint {', '.join(c.fit.hard_taints[:2])} (add a toleration)"
            )
        elif c.cordoned:
            reasons.append(f"node {c.fit.name} would hold it but is cordoned (kubectl uncordon {c.fit.name})")
    return "".join(f"; {reason}" for reason in reasons[:_MAX_LISTED])


def _count(nodes: int) -> str:
    return f"{nodes} node" + ("" if nodes == 1 else "s")


def _names(candidates: Sequence[_Candidate]) -> str:
    names = ", ".join(c.fit.name for c in candidates[:_MAX_LISTED])
    return names + (f", +{len(candidates) - _MAX_LISTED} more" if len(candidates) > _MAX_LISTED else "")
