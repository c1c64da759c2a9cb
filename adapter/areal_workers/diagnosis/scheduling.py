"""Why the scheduler cannot place a pod and whether waiting helps: its FailedScheduling message read against the
pod's requests and the nodes."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal

from kubernetes.client import CoreV1Event, V1Node, V1Pod

from ..reasons import Reason
from .nodes import TRANSIENT_TAINT_PREFIX, NodeFit, describe_selector, node_fit
from .pod_checks import pod_condition
from .problem import EPOCH, Problem, event_time, pod_name
from .resources import format_quantity, pod_requests


@dataclass(frozen=True)
class _Verdict:
    advice: str
    fatal: bool


def _values_key(resource: str) -> str:
    """The chart's values key for a resource, for advice."""
    if resource == "cpu":
        return "resources.cpu"
    if resource == "memory":
        return "resources.memory"
    if "gpu" in resource:
        return "resources.gpu"
    return f"the {resource} request"


_REASON_ITEM = re.compile(r"(\d+) (.+?)(?=, \d+ |$)")


def _scheduler_reasons(message: str) -> tuple[int | None, list[tuple[int, str]]]:
    """("0/4 nodes are available: 2 Insufficient cpu, 2 node(s) had ... . preemption: ...") -> (4, [(2, ...), ...])."""
    main = message.split(" preemption:")[0].strip().rstrip(".")
    total = re.match(r"0/(\d+) nodes are available", main)
    nodes = int(total.group(1)) if total else None
    _, _, tail = main.partition(": ")
    reasons = [(int(n), text.strip()) for n, text in _REASON_ITEM.findall(tail)]
    # Some reasons carry no count ("0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims").
    return nodes, reasons or ([(nodes or 0, tail.strip())] if tail.strip() else [])


def _is_permanent_reason(reason: str) -> bool:
    if "didn't match Pod's node affinity/selector" in reason or "didn't match node selector" in reason:
        return True
    taint = re.search(r"taint \{([^:}]+):", reason)
    return taint is not None and not taint.group(1).strip().startswith(TRANSIENT_TAINT_PREFIX)


def _reason_advice(pod: V1Pod, count: int, reason: str, requests: Mapping[str, Decimal]) -> str | None:
    """Advice for one entry of the scheduler's message, used when no nodes were passed or nodes do not explain it."""
    insufficient = re.match(r"Insufficient (\S+)", reason)
    if insufficient:
        resource = insufficient.group(1)
        need = requests.get(resource)
        needed = f"needs {format_quantity(resource, need)} {resource} per pod; " if need is not None else ""
        return (
            f"{needed}{count} node(s) lack free {resource}: wait for running pods to finish, lower "
            f"{_values_key(resource)} or add nodes"
        )
    taint = re.search(r"taint \{([^:}]+):\s*([^}]*)\}", reason)
    if taint:
        key, value = taint.group(1).strip(), taint.group(2).strip()
        if key.startswith(TRANSIENT_TAINT_PREFIX):
            return f"{count} node(s) are {key.removeprefix(TRANSIENT_TAINT_PREFIX)}: wait or repair them"
        shown = f"{key}={value}" if value else key
        return f"add tolerations for {shown} or choose other nodes ({count} node(s) tainted)"
    if "node affinity/selector" in reason or "node selector" in reason:
        return f"{describe_selector(pod, ())} matches none of {count} node(s): label nodes or change the selector"
    if "were unschedulable" in reason:
        return f"{count} node(s) are cordoned: uncordon them or wait for the maintenance to end"
    if "free ports" in reason:
        return "the worker's host ports are taken (hostNetwork?): give roles sharing nodes distinct guardPort values"
    if "affinity" in reason or "topology spread" in reason:
        return f"pod (anti-)affinity or topology spread rules exclude {count} node(s): relax them or add nodes"
    if "PersistentVolumeClaim" in reason or "volume" in reason:
        return "a volume is not bound or is bound to another zone: check the PVCs and their StorageClass"
    if "Too many pods" in reason:
        return f"{count} node(s) reached their pod limit: wait or add nodes"
    return None


def _largest(fits: Sequence[NodeFit], resource: str, *, free: bool) -> tuple[Decimal, str]:
    values = [((fit.free if free else fit.allocatable) or {}).get(resource, Decimal(0)) for fit in fits]
    best = max(range(len(fits)), key=lambda i: values[i])
    return values[best], fits[best].name


def _needs(resource: str, amount: Decimal) -> str:
    return f"needs {format_quantity(resource, amount)} {resource} per pod"


def _capacity_verdict(requests: Mapping[str, Decimal], candidates: Sequence[NodeFit]) -> _Verdict | None:
    """Fatal verdict when no eligible node's allocatable can ever hold the pod."""
    if any(all(fit.allocatable.get(r, Decimal(0)) >= q for r, q in requests.items()) for fit in candidates):
        return None
    parts = []
    for resource, amount in requests.items():
        largest, node = _largest(candidates, resource, free=False)
        if largest < amount:
            parts.append(
                f"{_needs(resource, amount)}; no node has more than {format_quantity(resource, largest)} "
                f"allocatable (node {node}): lower {_values_key(resource)} or add bigger nodes"
            )
    if not parts:
        wanted = ", ".join(f"{format_quantity(r, q)} {r}" for r, q in requests.items())
        parts.append(
            f"needs {wanted} on one node; no node has all of them allocatable: lower the requests or add bigger nodes"
        )
    return _Verdict("; ".join(parts), fatal=True)


def _in_use_advice(requests: Mapping[str, Decimal], fitting: Sequence[NodeFit]) -> str:
    usable = [fit for fit in fitting if fit.soft_block is None]
    blocked = [f"{fit.name} ({fit.soft_block})" for fit in fitting if fit.soft_block is not None]
    parts = []
    if usable and usable[0].free is not None:
        for resource, amount in requests.items():
            largest, node = _largest(usable, resource, free=True)
            if largest < amount:
                parts.append(
                    f"{_needs(resource, amount)}; the largest free on any node is "
                    f"{format_quantity(resource, max(largest, Decimal(0)))} (node {node}): wait for running "
                    f"pods to finish, lower {_values_key(resource)} or add nodes"
                )
    elif usable:
        names = ", ".join(fit.name for fit in usable[:5])
        parts.append(
            f"nodes {names} have the allocatable for it but other pods use it: wait for them to finish, "
            "lower the requests or add nodes"
        )
    if blocked:
        parts.append(f"nodes that could host it are unavailable for now: {', '.join(blocked[:5])}")
    return "; ".join(parts)


def _nodes_verdict(
    pod: V1Pod, nodes: Sequence[V1Node], pods_by_node: Mapping[str, Sequence[V1Pod]] | None
) -> tuple[_Verdict | None, str]:
    """A fatal verdict from the nodes, or None and the advice for a pod that fits some node one day."""
    requests = pod_requests(pod)
    fits = [node_fit(pod, node, pods_by_node) for node in nodes]
    candidates = [fit for fit in fits if fit.selector_ok and not fit.hard_taints]
    if not candidates:
        matching = [fit for fit in fits if fit.selector_ok]
        if not matching:
            advice = f"{describe_selector(pod, nodes)} matches no node: label nodes or change the selector"
        else:
            taints = sorted({taint for fit in matching for taint in fit.hard_taints})
            advice = f"add tolerations for {', '.join(taints[:4])} or choose other nodes"
        return _Verdict(advice, fatal=True), ""
    for resource in requests:
        if not any(fit.allocatable.get(resource, Decimal(0)) > 0 for fit in candidates):
            return _Verdict(_not_offered(resource, fits, pod), fatal=True), ""
    capacity = _capacity_verdict(requests, candidates)
    if capacity is not None:
        return capacity, ""
    fitting = [fit for fit in candidates if all(fit.allocatable.get(r, Decimal(0)) >= q for r, q in requests.items())]
    return None, _in_use_advice(requests, fitting)


def _not_offered(resource: str, fits: Sequence[NodeFit], pod: V1Pod) -> str:
    elsewhere = [fit for fit in fits if fit.allocatable.get(resource, Decimal(0)) > 0]
    if not elsewhere:
        if "gpu" in resource:
            return (
                f"{resource} is not offered by any node: is the device plugin installed? or set resources.gpu 0 "
                "(or resources.gpuResourceName to the nodes' GPU resource)"
            )
        return f"{resource} is not offered by any node: is its device plugin installed? or drop the request"
    names = ", ".join(fit.name for fit in elsewhere[:4])
    taints = sorted({taint for fit in elsewhere if fit.selector_ok for taint in fit.hard_taints})
    fixes = [f"add tolerations for {', '.join(taints[:4])}"] if taints else []
    if not all(fit.selector_ok for fit in elsewhere):
        fixes.append(f"change {describe_selector(pod, ())}")
    return f"{resource} is only offered by nodes the pod cannot use ({names}): {' or '.join(fixes)}"


def _message_verdict(pod: V1Pod, message: str) -> _Verdict:
    total, reasons = _scheduler_reasons(message)
    requests = pod_requests(pod)
    parts = [advice for count, reason in reasons if (advice := _reason_advice(pod, count, reason, requests))]
    if total == 0 or "no nodes available" in message:
        parts.append("the cluster has no schedulable nodes: add nodes or check that they joined and are Ready")
    permanent = sum(count for count, reason in reasons if _is_permanent_reason(reason))
    fatal = bool(total) and permanent >= (total or 0)
    return _Verdict("; ".join(parts) or "see the scheduler's message", fatal=fatal)


def scheduling_advice(
    pod: V1Pod, message: str, nodes: Sequence[V1Node] = (), pods_by_node: Mapping[str, Sequence[V1Pod]] | None = None
) -> str:
    """Turns the scheduler's FailedScheduling message into what to change, computed from the pod's requests and the
    nodes' allocatable minus the requests of the pods on them (`pods_by_node`, keyed by node name; None: unknown)."""
    return _scheduling_verdict(pod, message, nodes, pods_by_node, ()).advice


def _scheduling_verdict(
    pod: V1Pod,
    message: str,
    nodes: Sequence[V1Node],
    pods_by_node: Mapping[str, Sequence[V1Pod]] | None,
    events: Sequence[CoreV1Event],
) -> _Verdict:
    from_message = _message_verdict(pod, message)
    if not nodes:
        verdict = from_message
    else:
        fatal_verdict, advice = _nodes_verdict(pod, nodes, pods_by_node)
        if fatal_verdict is not None:
            verdict = fatal_verdict
        else:
            # Obstacles the node arithmetic does not see (ports, pod affinity, volumes) come from the message.
            _, reasons = _scheduler_reasons(message)
            extra = [
                text
                for count, reason in reasons
                if not reason.startswith("Insufficient")
                and "taint" not in reason
                and "selector" not in reason
                and (text := _reason_advice(pod, count, reason, {}))
            ]
            verdict = _Verdict("; ".join(part for part in (advice, *extra) if part) or from_message.advice, fatal=False)
    if verdict.fatal and any(event.reason == "TriggeredScaleUp" for event in events):
        return _Verdict(f"{verdict.advice}; cluster-autoscaler is adding a node, waiting for it", fatal=False)
    return verdict


def scheduling_problem(
    pod: V1Pod,
    nodes: Sequence[V1Node],
    events: Sequence[CoreV1Event],
    pods_by_node: Mapping[str, Sequence[V1Pod]] | None,
) -> Problem | None:
    condition = pod_condition(pod, "PodScheduled")
    if condition is None or condition.status != "False":
        return None
    if condition.reason == "SchedulingGated":
        gates = ", ".join(gate.name for gate in pod.spec.scheduling_gates or []) or "?"
        return Problem(
            pod=pod_name(pod),
            reason=Reason.SCHEDULING_GATED,
            fatal=False,
            message=condition.message or f"scheduling gates: {gates}",
            advice=f"waiting for a controller (a queue such as Kueue?) to remove the gates {gates}",
        )
    latest = max(
        (e for e in events if e.reason == "FailedScheduling"), key=lambda e: event_time(e) or EPOCH, default=None
    )
    message = condition.message or (latest.message if latest is not None else "") or "unschedulable"
    verdict = _scheduling_verdict(pod, message, nodes, pods_by_node, events)
    return Problem(
        pod=pod_name(pod),
        reason=condition.reason or Reason.UNSCHEDULABLE,
        message=message,
        fatal=verdict.fatal,
        advice=verdict.advice,
    )
