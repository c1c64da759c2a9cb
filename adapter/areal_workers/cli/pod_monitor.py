"""The trainer's PodMonitor (trainer/metrics.py builds it), created beside its Job and owned by it."""

from __future__ import annotations

import copy
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from ..trainer.metrics import POD_MONITOR_API
from .session import Session, api_message


def create_pod_monitor(session: Session, monitor: dict[str, Any], job: client.V1Job) -> str | None:
    """Creates (or replaces) the PodMonitor, owned by the Job so it goes with it; what went wrong, else None. A
    trainer without its PodMonitor still runs: the caller reports it."""
    monitor = copy.deepcopy(monitor)
    monitor["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job.metadata.name, "uid": job.metadata.uid}
    ]
    group, version, plural = POD_MONITOR_API
    custom = client.CustomObjectsApi(session.api)
    name = monitor["metadata"]["name"]
    try:
        try:
            custom.create_namespaced_custom_object(group, version, session.namespace, plural, monitor)
        except ApiException as error:
            if error.status != 409:  # a finished Job's PodMonitor the garbage collector has not removed yet
                raise
            current = custom.get_namespaced_custom_object(group, version, session.namespace, plural, name)
            monitor["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            custom.replace_namespaced_custom_object(group, version, session.namespace, plural, name, monitor)
    except ApiException as error:
        if error.status == 404:
            return f"PodMonitor {name} not created: the cluster has no PodMonitor API (the Prometheus Operator's CRD)"
        return f"PodMonitor {name} not created: {api_message(error)}"
    except (HTTPError, ConnectionError) as error:
        return f"PodMonitor {name} not created: {error}"
    return None
