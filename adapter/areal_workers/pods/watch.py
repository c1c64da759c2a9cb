"""Waiting on a role's pods with one label-selected watch (list, then watch from its resourceVersion).

No per-pod polling: a 1024-worker role costs one list and one watch stream. The watch is re-established after
apiserver restarts and expired resource versions, until the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from dataclasses import dataclass

import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from ..naming import LABEL_POD_INDEX

RECONNECT_DELAY = 0.5
LIST_TIMEOUT_SECONDS = 30.0  # a listing the API server has not answered by then has failed


def pod_index(pod: client.V1Pod) -> int | None:
    raw = (pod.metadata.labels or {}).get(LABEL_POD_INDEX)
    if raw is None:  # clusters older than 1.28 lack the label; the ordinal ends the name
        raw = pod.metadata.name.rsplit("-", 1)[-1]
    return int(raw) if raw.isdigit() else None


def is_ready(pod: client.V1Pod) -> bool:
    if pod.metadata.deletion_timestamp is not None or not pod.status or not pod.status.pod_ip:
        return False
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


@dataclass
class WaitTimedOut(Exception):
    """The deadline passed; `pods` is the last state seen (by index) for the diagnosis."""

    pods: dict[int, client.V1Pod]


class PodWatch:
    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core = core
        self.namespace = namespace

    def list(self, selector: str) -> tuple[list[client.V1Pod], str]:
        """One listing, never waited on forever (a metrics scrape lists from the exporter's thread, too)."""
        listing = self.core.list_namespaced_pod(
            self.namespace, label_selector=selector, _request_timeout=LIST_TIMEOUT_SECONDS
        )
        return listing.items, listing.metadata.resource_version

    def delete(self, name: str) -> None:
        self.core.delete_namespaced_pod(name, self.namespace)

    def wait(
        self,
        selector: str,
        done: Callable[[dict[str, client.V1Pod]], bool],
        timeout: float,
        on_pod: Callable[[client.V1Pod], None] | None = None,
        on_idle: tuple[float, Callable[[dict[str, client.V1Pod]], object]] | None = None,
    ) -> dict[str, client.V1Pod]:
        """Watches pods matching `selector` (by name) until `done(pods)`; `on_pod` sees every pod state and may
        raise to stop the wait. `on_idle` (seconds, check): the check also sees the pods every that many seconds,
        for state kept elsewhere than in the pods (a Kueue Workload). Raises WaitTimedOut at the deadline."""
        deadline = time.monotonic() + timeout
        pods: dict[str, client.V1Pod] = {}
        version: str | None = None
        while True:
            try:
                if version is None:
                    items, version = self.list(selector)
                    pods = {pod.metadata.name: pod for pod in items}
                    for pod in items:
                        if on_pod:
                            on_pod(pod)
                if done(pods):
                    return pods
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise WaitTimedOut(self._by_index(pods))
                if on_idle is not None:
                    remaining = min(remaining, on_idle[0])
                version = self._follow(selector, version, remaining, pods, done, on_pod)
                if on_idle is not None and version is not None and not done(pods):
                    on_idle[1](pods)
            except ApiException as error:
                if error.status in (401, 403, 404):
                    raise
                version = None  # 410 Gone or a server error: relist
                self._pause(deadline, pods)
            except BrokenPipeError:  # a callback wrote to a closed stdout (`status -w | head`): not the apiserver's
                raise
            except (urllib3.exceptions.HTTPError, ConnectionError):  # apiserver unreachable (restarting)
                version = None
                self._pause(deadline, pods)

    def _follow(
        self,
        selector: str,
        version: str,
        remaining: float,
        pods: dict[str, client.V1Pod],
        done: Callable[[dict[str, client.V1Pod]], bool],
        on_pod: Callable[[client.V1Pod], None] | None,
    ) -> str | None:
        stream = watch.Watch().stream(
            self.core.list_namespaced_pod,
            self.namespace,
            label_selector=selector,
            resource_version=version,
            timeout_seconds=max(1, int(remaining + 0.999)),
            allow_watch_bookmarks=True,
        )
        for event in stream:
            kind = event["type"]
            if kind == "ERROR":
                return None
            if kind == "BOOKMARK":
                version = event["raw_object"]["metadata"]["resourceVersion"]
                continue
            pod = event["object"]
            version = pod.metadata.resource_version
            if kind == "DELETED":
                pods.pop(pod.metadata.name, None)
            else:
                pods[pod.metadata.name] = pod
            if on_pod:
                on_pod(pod)
            if done(pods):
                return version
        return version

    @staticmethod
    def _pause(deadline: float, pods: dict[str, client.V1Pod]) -> None:
        if time.monotonic() + RECONNECT_DELAY >= deadline:
            raise WaitTimedOut(PodWatch._by_index(pods))
        time.sleep(RECONNECT_DELAY)

    @staticmethod
    def _by_index(pods: dict[str, client.V1Pod]) -> dict[int, client.V1Pod]:
        return {index: pod for pod in pods.values() if (index := pod_index(pod)) is not None}


def all_ready(replicas: int, revisions: Collection[str] = ()) -> Callable[[dict[str, client.V1Pod]], bool]:
    """Indices 0..replicas-1 each have a Ready pod with an IP, and no other index remains. With `revisions` (their
    StatefulSet's update revision), each of those pods runs one of them: a Ready pod of an earlier template, which
    the StatefulSet's rolling update has yet to replace, is not a worker of the change."""

    def check(pods: dict[str, client.V1Pod]) -> bool:
        by_index = {pod_index(p): p for p in pods.values() if p.metadata.deletion_timestamp is None}
        return set(by_index) == set(range(replicas)) and all(
            is_ready(p) and (not revisions or template_revision(p) in revisions) for p in by_index.values()
        )

    return check


def template_revision(pod: client.V1Pod) -> str | None:
    """The StatefulSet revision (ControllerRevision) whose template the pod was made from."""
    return (pod.metadata.labels or {}).get("controller-revision-hash")


def none_left(pods: dict[str, client.V1Pod]) -> bool:
    return not pods
