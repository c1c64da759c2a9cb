"""Kueue admission of a queued role: where its Workload stands, read from the Workload object.

A role whose StatefulSet carries `kueue.x-k8s.io/queue-name` is one Kueue Workload (podset count = replicas): Kueue
admits all its workers at once or none, and until then its pods wait behind the scheduling gate
`kueue.x-k8s.io/admission`. `admission_of` (pure) turns a Workload and the other pending Workloads of its queue into
an `Admission`; `AdmissionReader` fetches them. The Workload's name is on every pod of the group (POD_GROUP_LABEL).

* queued: no quota reserved yet. The position counts the pending Workloads of the same LocalQueue ahead of it in
  Kueue's order (higher priority first, then older); the Workload's own message says which quota is short.
* inadmissible: the role asks for more than the queue's ClusterQueue can ever give ("> maximum capacity"): waiting
  cannot help, so the role fails at once.
* preempted / evicted: Kueue took the admission back (a higher-priority Workload needed the quota, a queue was
  stopped, ...): the role's workers are gone, with Kueue's reason, not a crash.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..errors import SchedulerError
from ..naming import LABEL_ROLE

logger = logging.getLogger(__name__)

GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
ADMISSION_GATE = "kueue.x-k8s.io/admission"
NEVER_FITS = "> maximum capacity"
FRESH_SECONDS = 1.0  # a role's pods are checked one by one: their Workload is read once per this period


@dataclass(frozen=True)
class Admission:
    """Where a queued role's Workload stands. `state`: queued, inadmissible, admitted, preempted or evicted."""

    state: str
    queue: str
    workload: str
    message: str = ""
    position: int | None = None  # 1 = next in its LocalQueue
    pending: int | None = None  # pending Workloads of that LocalQueue, this one included

    @property
    def fatal(self) -> bool:
        return self.state in ("inadmissible", "preempted", "evicted")

    def describe(self) -> str:
        if self.state == "queued":
            where = f"position {self.position} of {self.pending}" if self.position else "position unknown"
            quota = f", pending quota: {self.message}" if self.message else ""
            return f"queued in {self.queue} ({where}{quota}; Kueue Workload {self.workload})"
        if self.state == "inadmissible":
            return (
                f"never admitted by {self.queue}: {self.message} (Kueue Workload {self.workload}). Ask for fewer "
                f"workers or GPUs per worker, or have the ClusterQueue's nominalQuota (or borrowing) raised"
            )
        if self.state == "preempted":
            return (
                f"preempted by Kueue in {self.queue}: {self.message} (Kueue Workload {self.workload}). Its workers "
                f"were stopped to free quota for a higher-priority workload; it is queued again and re-admitted "
                f"whole when quota frees up, with fresh workers"
            )
        if self.state == "evicted":
            return f"evicted by Kueue from {self.queue}: {self.message} (Kueue Workload {self.workload})"
        return f"admitted by {self.queue} (Kueue Workload {self.workload})"


def _condition(workload: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (workload.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _true(condition: dict[str, Any] | None) -> TypeGuard[dict[str, Any]]:
    return condition is not None and condition.get("status") == "True"


def _queue_order(workload: dict[str, Any]) -> tuple[int, str, str]:
    return (
        -int((workload.get("spec") or {}).get("priority") or 0),
        workload["metadata"].get("creationTimestamp") or "",
        workload["metadata"]["name"],
    )


def is_pending(workload: dict[str, Any]) -> bool:
    return not _true(_condition(workload, "QuotaReserved")) and not _true(_condition(workload, "Finished"))


def admission_of(workload: dict[str, Any], peers: Sequence[dict[str, Any]] = ()) -> Admission:
    """The Admission of `workload`; `peers`: the Workloads of its namespace (its queue's pending ones give the
    position)."""
    name = workload["metadata"]["name"]
    queue = (workload.get("spec") or {}).get("queueName") or "?"
    reserved = _condition(workload, "QuotaReserved")
    evicted = _condition(workload, "Evicted")
    if _true(evicted) and (_true(_condition(workload, "Preempted")) or evicted.get("reason") == "Preempted"):
        preempted = _condition(workload, "Preempted")
        message = (preempted or {}).get("message") or evicted.get("message") or ""
        return Admission("preempted", queue, name, message)
    if _true(evicted):
        return Admission("evicted", queue, name, f"{evicted.get('reason')}: {evicted.get('message') or ''}".strip())
    if _true(reserved):
        return Admission("admitted", queue, name)
    message = (reserved or {}).get("message") or ""
    if NEVER_FITS in message:
        return Admission("inadmissible", queue, name, message)
    line = [w for w in peers if (w.get("spec") or {}).get("queueName") == queue and is_pending(w)]
    if not any(w["metadata"]["name"] == name for w in line):
        line.append(workload)
    ordered = sorted(line, key=_queue_order)
    position = next(i for i, w in enumerate(ordered, 1) if w["metadata"]["name"] == name)
    return Admission("queued", queue, name, message, position, len(ordered))


def queues_of(manifests: Sequence[dict[str, Any]], workloads: Sequence[str]) -> set[str]:
    """The LocalQueues named by the rendered StatefulSets of `workloads` (roles or pod-mode forks)."""
    queues = set()
    for manifest in manifests:
        labels = (manifest.get("metadata") or {}).get("labels") or {}
        if manifest.get("kind") == "StatefulSet" and labels.get(LABEL_ROLE) in workloads and labels.get(QUEUE_LABEL):
            queues.add(labels[QUEUE_LABEL])
    return queues


def workload_name(pod: client.V1Pod) -> str | None:
    """The Kueue Workload a pod belongs to (None: not a Kueue pod group's)."""
    return (pod.metadata.labels or {}).get(POD_GROUP_LABEL)


def is_gated(pod: client.V1Pod) -> bool:
    return any(gate.name == ADMISSION_GATE for gate in (pod.spec.scheduling_gates or [] if pod.spec else []))


class AdmissionReader:
    """Reads Workloads of one namespace (rbac/: get and list on workloads.kueue.x-k8s.io). Without that permission,
    or without Kueue, the reader answers None and the diagnosis goes on from the pods alone."""

    def __init__(self, custom: client.CustomObjectsApi, namespace: str) -> None:
        self.custom, self.namespace = custom, namespace
        self._readable = True
        self._recent: dict[str, tuple[float, Admission | None]] = {}

    def workload(self, name: str) -> dict[str, Any] | None:
        if not self._readable:
            return None
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "workloads", name)
        except ApiException as error:
            self._note(error)
            return None

    def workloads(self) -> list[dict[str, Any]]:
        if not self._readable:
            return []
        try:
            return self.custom.list_namespaced_custom_object(GROUP, VERSION, self.namespace, "workloads")["items"]
        except ApiException as error:
            self._note(error)
            return []

    def of_pod(self, pod: client.V1Pod) -> Admission | None:
        """The Admission of the Workload `pod` belongs to (None: no Kueue pod, or its Workload cannot be read)."""
        name = workload_name(pod)
        if not name:
            return None
        read_at, known = self._recent.get(name, (-FRESH_SECONDS, None))
        if time.monotonic() - read_at < FRESH_SECONDS:
            return known
        workload = self.workload(name)
        admission = None
        if workload is not None:
            admission = admission_of(workload, self.workloads() if is_pending(workload) else [])
        self._recent = {name: (time.monotonic(), admission)}
        return admission

    def local_queue_exists(self, queue: str) -> bool | None:
        """Whether the LocalQueue exists in the namespace (None: cannot tell, the API did not answer)."""
        try:
            self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "localqueues", queue)
        except ApiException as error:
            if error.status == 404:
                return False
            if error.status == 403:
                raise SchedulerError(
                    f"cannot read Kueue LocalQueue {queue!r} in namespace {self.namespace}: "
                    f"{error.body or error.reason}; apply rbac/ (get on localqueues.kueue.x-k8s.io)"
                ) from None
            logger.warning("cannot read LocalQueue %s: %s", queue, error.reason)
            return None
        return True

    def _note(self, error: ApiException) -> None:
        if error.status == 403:
            self._readable = False
            logger.warning(
                "cannot read Kueue Workloads in %s (forbidden): queue positions are not reported; apply "
                "rbac/ (get, list on workloads.kueue.x-k8s.io)",
                self.namespace,
            )
        elif error.status != 404:
            logger.warning("cannot read Kueue Workloads: %s", error.reason)
