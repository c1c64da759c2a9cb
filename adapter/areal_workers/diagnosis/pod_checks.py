"""Pod-level checks: a pod that completed or failed, is disrupted, deleted or replaced, or whose node is NotReady
or gone."""

from __future__ import annotations

import re
from collections.abc import Sequence

from kubernetes.client import V1Node, V1Pod, V1PodCondition

from ..reasons import Reason
from .container_checks import LOST_ENGINES, Readiness, container_problem_of
from .nodes import is_ready
from .problem import Problem, pod_name, timestamp

_DISRUPTIONS = {
    "PreemptionByScheduler": Reason.PREEMPTED,
    "PreemptionByKubeScheduler": Reason.PREEMPTED,
    "EvictionByEvictionAPI": Reason.EVICTED,
    "TerminationByKubelet": Reason.EVICTED,
    "DeletionByTaintManager": Reason.NODE_NOT_READY,
    "DeletionByPodGC": Reason.NODE_GONE,
}


def pod_condition(pod: V1Pod, kind: str) -> V1PodCondition | None:
    conditions = pod.status.conditions if pod.status is not None else None
    return next((condition for condition in conditions or [] if condition.type == kind), None)


def replaced_problem(pod: V1Pod, ready_pod: V1Pod | None) -> Problem | None:
    old, new = (ready_pod.metadata.uid if ready_pod is not None else None), pod.metadata.uid
    if not old or not new or old == new:
        return None
    return Problem(
        pod=pod_name(pod),
        reason=Reason.RESTARTED_AFTER_READY,
        fatal=True,
        node=pod.spec.node_name,
        message=(
            "the pod was deleted and recreated after the worker was ready, so its engines are lost "
            f"(uid {old} -> {new})"
        ),
        advice=LOST_ENGINES + "; check the events and the old pod's node for why it was deleted",
    )


def phase_problem(pod: V1Pod, readiness: Readiness) -> Problem | None:
    status = pod.status
    if (
        pod.metadata.deletion_timestamp is not None
        and status.phase in ("Succeeded", "Failed")
        and (status.reason or "Error") == "Error"
    ):
        # The kubelet gives a pod being deleted a terminal phase once its containers stopped (a SIGKILL after the
        # grace period is exit code 137): that is the deletion's doing, which deletion_problem judges.
        return None
    if status.phase == "Succeeded":
        return Problem(
            pod=pod_name(pod),
            reason=Reason.COMPLETED,
            fatal=True,
            exit_code=0,
            message=status.message or "all containers exited with code 0",
            advice="the worker exited, but AReaL's guard must keep running: check the role's command",
        )
    if status.phase == "Unknown":
        return Problem(
            pod=pod_name(pod),
            reason=Reason.NODE_NOT_READY,
            fatal=True,
            message=status.message or "pod phase Unknown: its node stopped reporting",
            advice=_node_not_ready_advice(pod.spec.node_name or "?"),
        )
    if status.phase != "Failed":
        return None
    reason = status.reason or ""
    if reason in ("", "Error"):
        # An ordinary container failure: the container statuses carry the exit code.
        return container_problem_of(pod, readiness) or Problem(
            pod=pod_name(pod),
            reason=Reason.FAILED,
            fatal=True,
            message=status.message or "pod phase Failed",
            advice="read the log tail and the events",
        )
    advice = _failed_pod_advice(reason, status.message or "")
    reason = (
        Reason.PREEMPTED if reason == "Preempting" else reason
    )  # the kubelet's word for making room for a critical pod
    return Problem(
        pod=pod_name(pod),
        reason=reason,
        fatal=True,
        message=status.message or f"pod failed: {reason}",
        advice=advice,
        node=pod.spec.node_name,
    )


def _failed_pod_advice(reason: str, message: str) -> str:
    if reason == "Evicted":
        return _eviction_advice(message)
    if reason in ("Preempting", "Preempted"):
        return _PREEMPTION_ADVICE
    if reason == "DeadlineExceeded":
        return "activeDeadlineSeconds ran out: raise it or remove it for long-running workers"
    if reason.startswith("OutOf"):
        return (
            f"the kubelet rejected the pod at admission ({reason}): the scheduler's view of the node was stale or "
            "a device plugin lost devices; check the node, then restart the role"
        )
    if reason in ("Shutdown", "Terminated", "NodeShutdown"):
        return "the node shut down: restart the role (it reschedules on healthy nodes)"
    if reason == "NodeAffinity":
        return "the node's labels no longer match the pod's nodeSelector/affinity: fix the labels or the selector"
    return "restart the role; check the events for the cause"


_PREEMPTION_ADVICE = (
    "preempted by a higher-priority pod: give the workers a higher priorityClassName or reserve "
    "capacity for them, then restart the role"
)


def _eviction_advice(message: str) -> str:
    match = re.search(r"low on resource: ([\w./-]+)", message)
    resource = match.group(1).rstrip(".") if match else ""
    if resource == "memory":
        return (
            "the node ran low on memory and evicted the worker: set resources.memory to what the worker really "
            "uses (the chart sets requests = limits, which protects Guaranteed pods) or use nodes with more memory"
        )
    if resource == "ephemeral-storage":
        return (
            "the node ran out of disk: write checkpoints and caches to a volume (extraVolumes) instead of the "
            "container filesystem or an emptyDir, or use nodes with more disk"
        )
    if message:
        return "evicted by the kubelet or the Eviction API (a drain?): restart the role once the node is healthy"
    return "evicted: check the node's conditions and events, then restart the role"


def disruption_problem(pod: V1Pod) -> Problem | None:
    condition = pod_condition(pod, "DisruptionTarget")
    if condition is None or condition.status != "True":
        return None
    reason = _DISRUPTIONS.get(condition.reason or "", Reason.DISRUPTED)
    node = pod.spec.node_name
    advice = {
        "Preempted": _PREEMPTION_ADVICE,
        "Evicted": _eviction_advice(condition.message or ""),
        "NodeNotReady": _node_not_ready_advice(node or "?"),
        "NodeGone": _NODE_GONE_ADVICE,
    }.get(reason, "the pod is being terminated: restart the role")
    message = condition.message or f"DisruptionTarget: {condition.reason}"
    return Problem(pod=pod_name(pod), reason=reason, fatal=True, message=message, advice=advice, node=node)


def deletion_problem(pod: V1Pod, was_ready: bool) -> Problem | None:
    deleted_at = timestamp(pod.metadata.deletion_timestamp)
    if deleted_at is None:
        return None
    advice = (
        "its engines are going away: find who deleted it (events, audit log; a helm rollback or scale-down?) "
        "and restart the role"
        if was_ready
        else "the StatefulSet recreates it; if this repeats, find who deletes it (events, audit log)"
    )
    return Problem(
        pod=pod_name(pod),
        reason=Reason.TERMINATING,
        fatal=was_ready,
        node=pod.spec.node_name,
        message=f"the pod is being deleted (deletionTimestamp {deleted_at.isoformat()})",
        advice=advice,
    )


_NODE_GONE_ADVICE = (
    "the worker's node was deleted (scale-down, spot reclaim, repair): restart the role; to keep "
    "nodes with workers, annotate the pods cluster-autoscaler.kubernetes.io/safe-to-evict=false"
)


def _node_not_ready_advice(node: str) -> str:
    return (
        f"the worker on node {node} is unreachable and the StatefulSet does not replace it until the node is back "
        f"or deleted: check the node (kubectl describe node {node}); once it is confirmed down, delete it or "
        "force-delete the pod, then restart the role"
    )


def node_problem(pod: V1Pod, nodes: Sequence[V1Node]) -> Problem | None:
    """NodeNotReady or NodeGone when the pod's node is unreachable or deleted (nothing to say without nodes)."""
    node_name = pod.spec.node_name
    if pod.status.reason == "NodeLost":
        return Problem(
            pod=pod_name(pod),
            reason=Reason.NODE_NOT_READY,
            fatal=True,
            node=node_name,
            message=pod.status.message or "the pod's node is lost",
            advice=_node_not_ready_advice(node_name or "?"),
        )
    if not node_name or not nodes:
        return None
    node = next((node for node in nodes if node.metadata.name == node_name), None)
    if node is None:
        return Problem(
            pod=pod_name(pod),
            reason=Reason.NODE_GONE,
            fatal=True,
            node=node_name,
            message=f"node {node_name} no longer exists",
            advice=_NODE_GONE_ADVICE,
        )
    ready, why = is_ready(node)
    if ready:
        return None
    return Problem(
        pod=pod_name(pod),
        reason=Reason.NODE_NOT_READY,
        fatal=True,
        node=node_name,
        message=f"node {node_name} is NotReady: {why}",
        advice=_node_not_ready_advice(node_name),
    )
