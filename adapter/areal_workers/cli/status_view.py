"""`areal-workers status` as data: one row per worker of a trial, built by pure functions from the release model
(what the chart rendered) and the pods, so the table, JSON and the watch show the same thing."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Any

from kubernetes import client

from .. import diagnosis, naming
from ..pods import ready_pods
from ..pods.watch import is_ready, pod_index
from ..release.model import ReleaseModel
from .decisions_view import Decision


@dataclass(frozen=True)
class WorkerRow:
    id: str
    role: str
    index: int
    pod: str | None
    ready: bool
    state: str  # Running, Pending, ContainerCreating, CrashLoopBackOff, Missing, ...
    restarts: int
    node: str | None
    ip: str | None
    ports: list[str]
    age_seconds: int | None
    reason: str = ""  # why it is not ready (the adapter's diagnosis, without events and logs)
    fatal: bool = False
    host_pod_of: str | None = None  # a process fork: the role whose pod runs it


@dataclass(frozen=True)
class RoleRow:
    name: str
    kind: str  # role, fork (process), fork (pod), colocated
    target: str | None
    replicas: int
    ready: int


@dataclass
class TrialStatus:
    release: str
    experiment: str
    trial: str
    revision: int | None
    helm_status: str
    ready_revision: int | None
    trainer: str = ""  # its Lease: alive, or expired (the release is reaped by `areal-workers reap`)
    helm_error: str = ""  # helm's description of the current revision when its operation failed
    roles: list[RoleRow] = field(default_factory=list)
    workers: list[WorkerRow] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)  # the last ones, oldest first (cli/decisions_view.py)
    decisions_note: str = ""  # why there are none to show when they could not be read

    @property
    def all_ready(self) -> bool:
        return all(row.ready for row in self.workers)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["all_ready"] = self.all_ready
        data["decisions"] = [decision.to_dict() for decision in self.decisions]
        return data


def _age(pod: client.V1Pod, now: datetime) -> int | None:
    created = pod.metadata.creation_timestamp
    return int((now - created).total_seconds()) if created else None


def _restarts(pod: client.V1Pod) -> int:
    return sum(status.restart_count or 0 for status in pod.status.container_statuses or [])


def pod_state(pod: client.V1Pod) -> str:
    """What kubectl's STATUS column shows: a waiting or terminated reason, else the phase."""
    if pod.metadata.deletion_timestamp is not None:
        return "Terminating"
    for status in pod.status.container_statuses or []:
        state = status.state
        if state and state.waiting and state.waiting.reason:
            return state.waiting.reason
        if state and state.terminated and state.terminated.reason:
            return state.terminated.reason
    for condition in pod.status.conditions or []:
        if condition.type == "PodScheduled" and condition.status == "False" and condition.reason:
            return condition.reason
    return pod.status.phase or "Unknown"


def _row(
    role: str,
    index: int,
    pod: client.V1Pod | None,
    ports: list[str],
    nodes: list[client.V1Node],
    now: datetime,
    host_pod_of: str | None = None,
    held: client.V1Pod | None = None,
    helm_error: str = "",
) -> WorkerRow:
    worker = naming.worker_id(role, index)
    if pod is None:
        missing = (
            f"no pod: helm's last operation failed: {helm_error}"
            if helm_error
            else "no pod yet: the StatefulSet has not created it (kubectl describe statefulset)"
        )
        return WorkerRow(
            worker,
            role,
            index,
            None,
            False,
            "Missing",
            0,
            None,
            None,
            ports,
            None,
            reason=missing,
            fatal=bool(helm_error),
            host_pod_of=host_pod_of,
        )
    # A pod AReaL holds (`held`: as it got it) is judged against it: restarted or replaced since is fatal.
    problem = diagnosis.diagnose_pod(pod, nodes=nodes, ready_pod=held) if held or not is_ready(pod) else None
    ready = is_ready(pod) and not (problem and problem.fatal)
    reason = ""
    if problem is not None:
        reason = problem.reason + (f": {problem.message.splitlines()[0]}" if problem.message else "")
    elif not ready:
        reason = "starting: not Ready yet"
    return WorkerRow(
        worker,
        role,
        index,
        pod.metadata.name,
        ready,
        pod_state(pod),
        _restarts(pod),
        pod.spec.node_name,
        pod.status.pod_ip,
        ports,
        _age(pod, now),
        reason,
        bool(problem and problem.fatal),
        host_pod_of,
    )


def _workload_pods(pods: list[client.V1Pod], workload: str) -> dict[int, client.V1Pod]:
    mine = [p for p in pods if (p.metadata.labels or {}).get(naming.LABEL_ROLE) == workload]
    # A terminating pod and its successor share an index: show the live one.
    mine.sort(key=lambda p: p.metadata.deletion_timestamp is None)
    return {index: pod for pod in mine if (index := pod_index(pod)) is not None}


def trial_status(
    release: str,
    model: ReleaseModel,
    pods: list[client.V1Pod],
    nodes: list[client.V1Node],
    helm_status: str,
    ready_revision: int | None,
    now: datetime | None = None,
    *,
    held: ready_pods.Record | None = None,
    helm_error: str = "",
) -> TrialStatus:
    """`held`: the pods AReaL holds as recorded (pods/ready_pods.py); `helm_error`: helm's description of a
    current revision whose operation failed (its pods missing for that reason, not the StatefulSet's)."""
    now = now or datetime.now(timezone.utc)
    status = TrialStatus(
        release,
        str(model.topology.get("experiment", "")),
        str(model.topology.get("trial", "")),
        model.revision,
        helm_status,
        ready_revision,
        helm_error=helm_error,
    )

    def row(
        workload: str, index: int, pod: client.V1Pod | None, ports: list[str], host: str | None = None
    ) -> WorkerRow:
        pod_workload = host or workload
        baseline = ready_pods.baseline(held, pod, model.fingerprint(pod_workload)) if held and pod else None
        return _row(workload, index, pod, ports, nodes, now, host, baseline, helm_error)

    for workload in sorted(model.roles) + sorted(n for n in model.forks if not model.is_process_fork(n)):
        by_index = _workload_pods(pods, workload)
        rows = [row(workload, i, by_index.get(i), model.ports(workload)) for i in range(model.replicas(workload))]
        status.workers += rows
        kind = "role" if workload in model.roles else "fork (pod)"
        status.roles.append(
            RoleRow(workload, kind, model.forks.get(workload, {}).get("target"), len(rows), sum(r.ready for r in rows))
        )
    for fork in sorted(n for n in model.forks if model.is_process_fork(n)):
        target = model.pod_role(fork)
        by_index = _workload_pods(pods, target)
        recorded = model.fork_ports(fork)
        rows = [
            row(fork, i, by_index.get(i), recorded[i] if i < len(recorded) else [], target)
            for i in range(model.replicas(fork))
        ]
        status.workers += rows
        status.roles.append(
            RoleRow(fork, "fork (process)", model.forks[fork]["target"], len(rows), sum(r.ready for r in rows))
        )
    for role, target in sorted(model.colocations.items()):
        targets = [r for r in status.workers if r.role == target]
        status.roles.append(RoleRow(role, "colocated", target, len(targets), sum(r.ready for r in targets)))
    return status
