"""`areal-workers doctor`'s GPU capacity check: how many workers of N GPUs the nodes hold now, judged with the
adapter's own `diagnosis.node_fit` on the pod template the chart rendered, with GPUs requested by pods already on a
node subtracted (allocatable, with a warning, when other namespaces' pods cannot be listed)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ...diagnosis import NodeFit, format_quantity, node_fit, pod_requests
from ...release.capacity import role_statefulsets, template_pod
from .check import LISTED, Check, more

DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"


def _gpu_resource(pod: client.V1Pod) -> str:
    return next((resource for resource in pod_requests(pod) if "gpu" in resource), DEFAULT_GPU_RESOURCE)


def _exclusion(fit: NodeFit) -> str | None:
    if not fit.selector_ok:
        return "outside the node selection"
    if fit.hard_taints:
        return f"taint {fit.hard_taints[0]}"
    return fit.soft_block


def _workers_on(fit: NodeFit, resource: str, gpus: int) -> int:
    free = (fit.free if fit.free is not None else fit.allocatable).get(resource, Decimal(0))
    return max(0, int(free // gpus))


def gpu_capacity(
    pod: client.V1Pod,
    nodes: Sequence[client.V1Node],
    pods_by_node: Mapping[str, Sequence[client.V1Pod]] | None,
    gpus: int,
    workers: int,
) -> Check:
    """How many workers of `gpus` GPUs fit the nodes `pod` (the chart's pod template) may use, on the GPUs not
    requested by pods already there (`pods_by_node` None: unknown, allocatable is counted)."""
    name = "GPU capacity"
    resource = _gpu_resource(pod)
    fits = [node_fit(pod, node, pods_by_node) for node in nodes]
    excluded = [(fit.name, why) for fit in fits if (why := _exclusion(fit)) is not None]
    usable = [fit for fit in fits if _exclusion(fit) is None]
    per_node = {fit.name: _workers_on(fit, resource, gpus) for fit in usable}
    holding = sum(1 for count in per_node.values() if count)
    fitting = sum(per_node.values())
    measure = "free" if pods_by_node is not None else "allocatable"
    detail = (
        f"{holding}/{len(nodes)} nodes have {resource}: {gpus} {measure}; {fitting} worker(s) of {gpus} GPUs "
        f"fit, {workers} wanted"
    )
    if usable:
        amounts = [f"{fit.name} {_gpus_text(fit, resource)}" for fit in usable[:LISTED]]
        detail += f" ({measure} {resource}: {', '.join(amounts)}{more(usable)})"
    if excluded:
        detail += "; not usable: " + ", ".join(f"{node} ({why})" for node, why in excluded[:LISTED])
    if fitting >= workers:
        if pods_by_node is None:
            return Check(
                name,
                "warn",
                detail,
                "counted allocatable GPUs: other pods may hold some; grant list on "
                "pods at cluster scope to count free ones",
            )
        return Check(name, "pass", detail)
    return Check(name, "fail", detail, _gpu_fix(usable, resource, gpus, fitting))


def _gpus_text(fit: NodeFit, resource: str) -> str:
    total = format_quantity(resource, fit.allocatable.get(resource, Decimal(0)))
    free = None if fit.free is None else max(fit.free.get(resource, Decimal(0)), Decimal(0))
    return total if free is None else f"{format_quantity(resource, free)}/{total}"


def _gpu_fix(usable: Sequence[NodeFit], resource: str, gpus: int, fitting: int) -> str:
    if not usable:
        return (
            "no node can be used (see above): label nodes to match node_selector, tolerate their taints in "
            "values_files, uncordon them, or add nodes"
        )
    largest = max(fit.allocatable.get(resource, Decimal(0)) for fit in usable)
    if largest < 1:
        return (
            f"no usable node offers {resource}: install its device plugin, or set the chart's resources.gpuResourceName"
        )
    if largest < gpus:
        return (
            f"lower the GPUs per worker (SchedulingSpec.gpu) to <= {int(largest)}, or add nodes with {gpus} {resource}"
        )
    return (
        f"lower the workers to <= {fitting} or their GPUs, wait for pods using {resource} to finish, or add nodes "
        f"with {gpus} {resource} free"
    )


def check_gpus(
    core: client.CoreV1Api, manifests: Sequence[Mapping[str, Any]], role: str, gpus: int, workers: int
) -> Check:
    """The nodes against `role`'s pod template as the chart rendered it (selector, tolerations, GPUs)."""
    name = "GPU capacity"
    statefulsets = role_statefulsets(manifests, role)
    if not statefulsets:
        return Check(name, "skip", "the chart rendered no StatefulSet for the workers")
    try:
        nodes = core.list_node().items
    except ApiException as error:
        return Check(
            name,
            "skip",
            f"nodes cannot be listed: HTTP {error.status} {error.reason}",
            "grant list on nodes (see 'permission list nodes') to check GPU capacity",
        )
    pod = template_pod(statefulsets[0])
    pods_by_node, unknown = _pods_by_node(core)
    check = gpu_capacity(pod, nodes, pods_by_node, gpus, workers)
    return replace(check, detail=f"{check.detail}; GPUs in use not counted: {unknown}") if unknown else check


def _pods_by_node(core: client.CoreV1Api) -> tuple[dict[str, list[client.V1Pod]] | None, str]:
    """The scheduled pods of every namespace by node, or None and why they cannot be read."""
    try:
        pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=").items
    except ApiException as error:
        return None, f"pods of all namespaces cannot be listed (HTTP {error.status} {error.reason})"
    grouped: dict[str, list[client.V1Pod]] = {}
    for pod in pods:
        grouped.setdefault(pod.spec.node_name, []).append(pod)
    return grouped, ""
