"""What is checked, and cleared, on the rendered manifests of the next revision before helm applies it: the node fit
of the changed workloads' pods, the Kueue LocalQueues they name, and on a first install the trial's stale
name_resolve records. A refusal is AReaL's WorkerCreationError and leaves the cluster untouched.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes import client

from .. import naming
from ..config import CapacityCheck
from ..errors import WorkerCreationError
from ..pods import admission
from ..pods.inspector import ReleaseInspector
from ..release import capacity, name_records

logger = logging.getLogger(__name__)


def check_capacity(
    manifests: list[dict[str, Any]],
    workloads: tuple[str, ...],
    nodes: list[client.V1Node],
    mode: CapacityCheck,
    key: str,
) -> None:
    problems = capacity.preflight(manifests, workloads, nodes)
    if problems and mode == "reject":
        raise WorkerCreationError(
            key,
            "No node can hold a worker",
            "\n".join(problems) + "\n(on a cluster whose autoscaler adds such nodes: capacity_check 'warn' or 'off' "
            "lets it; AREAL_K8S_CAPACITY_CHECK=warn, or areal-workers up --capacity-check warn)",
        )
    for problem in problems:
        logger.warning("capacity check: %s", problem)


def check_queues(
    manifests: list[dict[str, Any]], workloads: tuple[str, ...], inspector: ReleaseInspector, namespace: str, key: str
) -> None:
    """A queued workload's LocalQueue must exist: Kueue would hold its pods forever without a word."""
    for queue in sorted(admission.queues_of(manifests, workloads)):
        if inspector.local_queue_exists(queue) is False:
            raise WorkerCreationError(
                key,
                f"Kueue LocalQueue {queue!r} not found in namespace {namespace}",
                f"create it (kind LocalQueue, apiVersion kueue.x-k8s.io/v1beta2, pointing at "
                f"a ClusterQueue) or set kueue_queue (AREAL_K8S_KUEUE_QUEUE, values "
                f"kueue.queueName) to one of: kubectl -n {namespace} get localqueues",
            )


def clear_name_records(manifests: list[dict[str, Any]], key: str) -> None:
    topology_maps = [
        m
        for m in manifests
        if m.get("kind") == "ConfigMap" and m["metadata"].get("labels", {}).get(naming.LABEL_COMPONENT) == "topology"
    ]
    if not topology_maps:
        return
    topology = json.loads(topology_maps[0]["data"]["topology.json"])
    try:
        cleared = name_records.clear_trial(
            topology.get("worker_flags", []),
            topology["experiment"],
            topology["trial"],
            name_records.pod_users(manifests),
        )
    except name_records.UnsafeRecordPath as error:  # before the install: nothing is in the cluster yet
        raise WorkerCreationError(key, "unsafe name_resolve record path", str(error)) from error
    if cleared:
        logger.info("cleared stale name_resolve records of the trial: %s", ", ".join(cleared))
