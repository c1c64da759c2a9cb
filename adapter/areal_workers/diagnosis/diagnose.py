"""`diagnose_pod`: the checks in order; the first one that finds a problem names it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from kubernetes.client import CoreV1Event, V1Node, V1Pod

from .container_checks import Readiness, container_problem_of, mount_problem, probe_problem, pull_secret_race
from .pod_checks import deletion_problem, disruption_problem, node_problem, phase_problem, replaced_problem
from .problem import Problem, event_lines, events_of, last_lines
from .scheduling import scheduling_problem


def diagnose_pod(
    pod: V1Pod,
    *,
    was_ready: bool = False,
    nodes: Sequence[V1Node] = (),
    events: Sequence[CoreV1Event] = (),
    log_tail: Sequence[str] = (),
    pods_by_node: Mapping[str, Sequence[V1Pod]] | None = None,
    ready_pod: V1Pod | None = None,
    restarted_pod: V1Pod | None = None,
    now: datetime | None = None,
) -> Problem | None:
    """Why `pod` is not ready, or None when it is healthy or merely progressing.

    was_ready: the worker was ready once, so a restart lost its engines.
    ready_pod: the pod as last seen ready (implies was_ready). Restarts are then counted from its restartCounts, so a
        crash before readiness is not mistaken for a restart after it, and another uid means the pod was replaced.
    restarted_pod: the pod as the scheduler saw it running again after it restarted its worker in place (a
        restarted trainer reclaiming its predecessor's workers); restarts up to its restartCounts are the
        scheduler's own, not problems. Ignored for another uid, and when `ready_pod` is given.
    nodes: the cluster's nodes; when given, a bound pod whose node is missing sits on a deleted node.
    events: the pod's events (events of other objects or of an earlier pod with the same name are ignored).
    log_tail: the failing container's last log lines (of the previous instance, `--previous`, once it restarted).
    pods_by_node: pods per node name, to compute free capacity for an unschedulable pod (None: unknown).
    now: the time for the events' ages (default: the current time).
    """
    if pod.status is None:
        return None
    same_pod = restarted_pod is not None and restarted_pod.metadata.uid == pod.metadata.uid
    accounted = ready_pod if ready_pod is not None else (restarted_pod if same_pod else None)
    readiness = Readiness(was_ready or ready_pod is not None, _restart_counts(accounted))
    pod_events = events_of(pod, events)
    problem = (
        replaced_problem(pod, ready_pod)
        or phase_problem(pod, readiness)
        or disruption_problem(pod)
        or node_problem(pod, nodes)
        or deletion_problem(pod, readiness.was_ready)
        or container_problem_of(pod, readiness)
        or mount_problem(pod, pod_events)
        or scheduling_problem(pod, nodes, pod_events, pods_by_node)
        or probe_problem(pod, pod_events)
    )
    if problem is None:
        return None
    problem = pull_secret_race(problem, pod_events)
    return replace(problem, events=event_lines(pod_events, now=now), log_tail=last_lines(log_tail))


def _restart_counts(pod: V1Pod | None) -> dict[str, int]:
    statuses = pod.status.container_statuses if pod is not None and pod.status is not None else None
    return {status.name: status.restart_count or 0 for status in statuses or []}
