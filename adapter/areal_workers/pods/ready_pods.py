"""The worker pods AReaL holds, as recorded on the release's topology ConfigMap: each pod's uid and restart counts
when get_workers handed its workers out (or when a restarted trainer restarted them in place), with a digest of its
workload's entry. A reader in another process (`areal-workers status` and `diagnose`, a scheduler that adopted the
release) compares a pod with it: another uid, or more restarts, is a worker restarted after it was ready, whose
engines are lost (diagnosis: RestartedAfterReady). A record of another entry (the workload changed since) is not
compared. Pure: the inspector reads and writes the annotation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kubernetes import client

from .. import naming

READY_PODS_ANNOTATION = "areal.io/ready-pods"


@dataclass(frozen=True)
class HeldPod:
    uid: str
    restarts: tuple[tuple[str, int], ...]  # (container, restartCount), sorted
    entry: str  # digest of the workload's fingerprint (ReleaseModel.fingerprint) when it was recorded


# workload -> pod name -> the pod as held
Record = dict[str, dict[str, HeldPod]]


def digest(fingerprint: str) -> str:
    return hashlib.sha256(fingerprint.encode()).hexdigest()[:16]


def _held(pod: client.V1Pod, entry: str) -> HeldPod:
    statuses = (pod.status.container_statuses if pod.status is not None else None) or []
    restarts = tuple(sorted((s.name, s.restart_count or 0) for s in statuses))
    return HeldPod(str(pod.metadata.uid), restarts, entry)


def with_workload(record: Record, workload: str, pods: Iterable[client.V1Pod], fingerprint: str) -> Record:
    """`record` with `workload`'s pods replaced by `pods` (those not being deleted), held at `fingerprint`."""
    entry = digest(fingerprint)
    held = {p.metadata.name: _held(p, entry) for p in pods if p.metadata.deletion_timestamp is None}
    updated = {w: pods_ for w, pods_ in record.items() if w != workload}
    if held:
        updated[workload] = held
    return updated


def without(record: Record, workloads: Iterable[str]) -> Record:
    gone = set(workloads)
    return {w: pods for w, pods in record.items() if w not in gone}


def render(record: Record) -> str:
    """{workload: {"entry": digest, "pods": {name: [uid, {container: restarts}]}}}: compact (a role of a thousand
    workers stays far below the 256 KiB an object's annotations may hold)."""
    data = {
        workload: {
            "entry": next(iter(pods.values())).entry,
            "pods": {name: [held.uid, dict(held.restarts)] for name, held in sorted(pods.items())},
        }
        for workload, pods in sorted(record.items())
        if pods
    }
    return json.dumps(data, sort_keys=True, separators=(",", ":"))


def parse(annotations: Mapping[str, str] | None) -> Record:
    """The recorded pods; an annotation edited into something else reads as none (nothing is compared)."""
    try:
        data = json.loads((annotations or {}).get(READY_PODS_ANNOTATION, "{}"))
    except json.JSONDecodeError:
        return {}
    if not isinstance(data, dict):
        return {}
    record: Record = {}
    for workload, entry in data.items():
        pods = entry.get("pods") if isinstance(entry, dict) else None
        if not isinstance(pods, dict):
            continue
        for name, held in pods.items():
            if isinstance(held, list) and len(held) == 2 and isinstance(held[1], dict):
                restarts = tuple(sorted((str(c), n) for c, n in held[1].items() if isinstance(n, int)))
                pod = HeldPod(str(held[0]), restarts, str(entry.get("entry", "")))
                record.setdefault(str(workload), {})[str(name)] = pod
    return record


def baseline(record: Record, pod: client.V1Pod, fingerprint: str) -> client.V1Pod | None:
    """The pod as AReaL got it, for diagnosis.diagnose_pod's `ready_pod` (its uid and restart counts), when the
    record holds `pod`'s name at this entry of its workload; None when it holds nothing to compare."""
    workload = (pod.metadata.labels or {}).get(naming.LABEL_ROLE)
    held = record.get(workload or "", {}).get(pod.metadata.name)
    if held is None or held.entry != digest(fingerprint) or not held.uid:
        return None
    statuses = [
        client.V1ContainerStatus(name=name, restart_count=count, ready=True, image="", image_id="")
        for name, count in held.restarts
    ]
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=pod.metadata.name, uid=held.uid, labels=pod.metadata.labels),
        status=client.V1PodStatus(container_statuses=statuses),
    )
