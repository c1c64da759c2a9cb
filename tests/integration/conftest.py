"""Helpers for tests against a real apiserver."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from kubernetes import client, watch


def _is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def wait_for_ready_pods(core: client.CoreV1Api, namespace: str, selector: str, count: int,
                        timeout: float = 60.0) -> dict[str, client.V1Pod]:
    """Waits with one watch (list, then watch from its resourceVersion) until `count` pods are Ready."""
    deadline = time.monotonic() + timeout
    listing = core.list_namespaced_pod(namespace, label_selector=selector)
    pods = {p.metadata.name: p for p in listing.items}
    version = listing.metadata.resource_version
    while sum(map(_is_ready, pods.values())) != count or len(pods) != count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            states = {name: (p.status.phase, _is_ready(p)) for name, p in pods.items()}
            raise TimeoutError(f"{count} Ready pods for {selector!r} not seen in {timeout}s: {states}")
        stream = watch.Watch().stream(core.list_namespaced_pod, namespace, label_selector=selector,
                                      resource_version=version, timeout_seconds=max(1, int(remaining)))
        for event in stream:
            pod = event["object"]
            version = pod.metadata.resource_version
            if event["type"] == "DELETED":
                pods.pop(pod.metadata.name, None)
            else:
                pods[pod.metadata.name] = pod
            if len(pods) == count and all(map(_is_ready, pods.values())):
                break
    return pods


@pytest.fixture
def core(kube_client) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


@pytest.fixture
def ready_pods(core) -> Callable[..., dict[str, client.V1Pod]]:
    return lambda namespace, selector, count, timeout=60.0: wait_for_ready_pods(
        core, namespace, selector, count, timeout)


@pytest.fixture
def pod_runner(kubeconfig, tmp_path):
    """Runs the annotated pods of the given namespace as local processes (tools/podrunner.py)."""
    from podrunner import PodRunner

    runners: list[PodRunner] = []

    def start(namespace: str) -> PodRunner:
        runner = PodRunner(kubeconfig, namespace, tmp_path / f"pods-{namespace}").start()
        runners.append(runner)
        return runner

    yield start
    for runner in runners:
        runner.stop()
        assert runner.errors == [], runner.errors
