"""Pod logs as a kubelet keeps them: CRI-format log files, and the KWOK Logs objects through which the apiserver's
pods/log (`kubectl logs`, with `--previous`) serves those files."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING

from kubernetes import client
from kubernetes.client.exceptions import ApiException

if TYPE_CHECKING:
    from podrunner.pods import ManagedPod

LOGS_GROUP, LOGS_VERSION = "kwok.x-k8s.io", "v1alpha1"

log = logging.getLogger("podrunner")


def previous_log(log_path: Path) -> Path:
    return log_path.with_name(log_path.stem + ".previous.log")


def _cri_line(line: bytes) -> bytes:
    stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()
    return stamp + b" stdout F " + line.rstrip(b"\n") + b"\n"


def append_cri_line(path: Path, line: bytes) -> None:
    with open(path, "ab") as log_file:
        log_file.write(_cri_line(line))


def write_cri_log(stream: IO[bytes], path: Path) -> None:
    """Copies a process's output into `path` in the CRI log format the kubelet (and KWOK) serve logs from."""
    with stream, open(path, "ab", buffering=0) as log_file:
        for line in stream:
            log_file.write(_cri_line(line))


def publish_logs(api_client: client.ApiClient, pod: ManagedPod) -> bool:
    """A KWOK Logs object, so `kubectl logs` (the apiserver's pods/log) serves this pod's log files. False when
    the namespace is terminating or gone (403/404): its pods are about to go, there is nothing to run."""
    namespace, name = pod.name.split("/", 1)
    logs = {
        "apiVersion": f"{LOGS_GROUP}/{LOGS_VERSION}",
        "kind": "Logs",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "logs": [
                {
                    "containers": [pod.container],
                    "logsFile": str(pod.log.resolve()),
                    "previousLogsFile": str(previous_log(pod.log).resolve()),
                    "follow": False,
                }
            ]
        },
    }
    objects = client.CustomObjectsApi(api_client)
    try:
        objects.create_namespaced_custom_object(LOGS_GROUP, LOGS_VERSION, namespace, "logs", logs)
    except ApiException as error:
        if error.status in (403, 404):
            log.info("%s: not run: its namespace is terminating or gone (%s)", pod.name, error.reason)
            return False
        if error.status != 409:  # 409: a pod of the same name ran before; point at this one's files
            raise
        objects.patch_namespaced_custom_object(
            LOGS_GROUP, LOGS_VERSION, namespace, "logs", name, {"spec": logs["spec"]}
        )
    return True


def withdraw_logs(api_client: client.ApiClient, pod: ManagedPod) -> None:
    """Deletes the pod's Logs object while it still points at this pod's files: a successor of the same name
    that never starts (its image never pulls) must not show its predecessor's log as its own. The delete is
    conditional on the object's resourceVersion, so a successor that published its own files keeps them."""
    namespace, name = pod.name.split("/", 1)
    objects = client.CustomObjectsApi(api_client)
    try:
        current = objects.get_namespaced_custom_object(LOGS_GROUP, LOGS_VERSION, namespace, "logs", name)
        files = [entry.get("logsFile") for entry in current.get("spec", {}).get("logs", [])]
        if files != [str(pod.log.resolve())]:
            return
        objects.delete_namespaced_custom_object(
            LOGS_GROUP,
            LOGS_VERSION,
            namespace,
            "logs",
            name,
            body=client.V1DeleteOptions(
                preconditions=client.V1Preconditions(resource_version=current["metadata"]["resourceVersion"])
            ),
        )
    except ApiException as error:
        if error.status not in (403, 404, 409):  # gone with its namespace, or taken over by a successor
            raise
