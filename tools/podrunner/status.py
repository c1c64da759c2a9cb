"""What podrunner writes into pod status, as a kubelet would: container states and Ready, the outcome of a test
hook, a container config error."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from podrunner.pods import ManagedPod


def timestamp() -> str:
    """Now, as pod status writes times."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class StatusWriter:
    """Patches pod status; failures other than a pod that is gone go to `report_error`."""

    def __init__(self, api: client.CoreV1Api, report_error: Callable[[str], None]) -> None:
        self.api = api
        self.report_error = report_error

    def patch(self, namespace: str, name: str, status: dict) -> bool:
        """Writes pod status; False when it could not (the caller tries again on its next probe)."""
        try:
            self.api.patch_namespaced_pod_status(name, namespace, {"status": status})
        except ApiException as error:
            if error.status != 404:  # the pod is gone: nothing to report
                self.report_error(f"status of {namespace}/{name}: {error.status} {error.reason}")
            return False
        except (urllib3.exceptions.HTTPError, OSError):  # apiserver restarting
            return False
        return True

    def container_state(self, pod: ManagedPod, ready: bool, last_terminated: dict | None = None) -> bool:
        """A worker's container running (ready or not), or, with `last_terminated`, waiting to be restarted."""
        namespace, name = pod.name.split("/", 1)
        status = "True" if ready else "False"
        container_status: dict = {
            "name": pod.container,
            "ready": ready,
            "restartCount": pod.restarts,
            "started": pod.process is not None,
            "state": {"running": {"startedAt": timestamp()}},
        }
        if last_terminated is not None:
            container_status["lastState"] = {"terminated": last_terminated}
            container_status["state"] = {
                "waiting": {
                    "reason": "CrashLoopBackOff" if pod.restarts > 1 else "Error",
                    "message": "back-off restarting failed container",
                }
            }
        conditions = [
            {
                "type": kind,
                "status": status,
                "lastTransitionTime": timestamp(),
                **({} if ready else {"reason": "ContainersNotReady"}),
            }
            for kind in ("ContainersReady", "Ready")
        ]
        return self.patch(namespace, name, {"conditions": conditions, "containerStatuses": [container_status]})

    def hook_finished(self, pod: ManagedPod, code: int) -> None:
        """A test hook's phase Succeeded or Failed, from its exit code."""
        namespace, name = pod.name.split("/", 1)
        terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": timestamp(),
            "finishedAt": timestamp(),
        }
        self.patch(
            namespace,
            name,
            {
                "phase": "Succeeded" if code == 0 else "Failed",
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": timestamp()}
                ],
                "containerStatuses": [
                    {"name": pod.container, "ready": False, "restartCount": 0, "state": {"terminated": terminated}}
                ],
            },
        )

    def config_error(self, pod: client.V1Pod, error: Exception) -> None:
        """The kubelet's CreateContainerConfigError, for a pod podrunner cannot emulate."""
        container = pod.spec.containers[0].name
        self.patch(
            pod.metadata.namespace,
            pod.metadata.name,
            {
                "containerStatuses": [
                    {
                        "name": container,
                        "ready": False,
                        "restartCount": 0,
                        "image": pod.spec.containers[0].image,
                        "imageID": "",
                        "state": {"waiting": {"reason": "CreateContainerConfigError", "message": str(error)}},
                    }
                ]
            },
        )
