"""What the bandit demo reads from the cluster itself, beside the scheduler: pods of the release, the worker table,
progress while it waits, and whether anything still answers on the workers' addresses after cleanup."""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from areal_workers import Worker, naming

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
REAL_NODE_LABEL = "areal-workers.dev/node"  # tools/realnode/config.py
TABLE_HEADER = ("WORKER", "POD", "NODE", "IP", "PORTS", "READY", "RESTARTS")


def is_local_cluster(core: client.CoreV1Api) -> bool:
    """True on the project's local cluster: every node is one of KWOK's fake nodes (`make cluster-up`), whose worker
    pods run as processes on this machine, or its real node (tools/realnode/)."""
    try:
        nodes = core.list_node().items
    except ApiException:
        return False  # no right to list nodes: not the local cluster's admin
    return bool(nodes) and all(
        (n.metadata.annotations or {}).get(KWOK_NODE_ANNOTATION) == "fake"
        or (n.metadata.labels or {}).get(REAL_NODE_LABEL) == "real"
        for n in nodes
    )


def has_real_node(core: client.CoreV1Api) -> bool:
    """The local cluster's real node (kubelet + containerd) is there and Ready."""
    try:
        nodes = core.list_node(label_selector=f"{REAL_NODE_LABEL}=real").items
    except ApiException:
        return False
    return any(c.type == "Ready" and c.status == "True" for n in nodes for c in n.status.conditions or [])


def release_pods(core: client.CoreV1Api, namespace: str, release: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector=naming.release_selector(release)).items
    return sorted(pods, key=lambda pod: pod.metadata.name)


def pod_role(pod: client.V1Pod) -> str:
    return (pod.metadata.labels or {}).get(naming.LABEL_ROLE, "?")


def pod_index(pod: client.V1Pod) -> int:
    return int((pod.metadata.labels or {}).get(naming.LABEL_POD_INDEX, "-1"))


def is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def restarts(pod: client.V1Pod) -> int:
    return sum(s.restart_count or 0 for s in pod.status.container_statuses or [])


def uids(pods: Iterable[client.V1Pod]) -> dict[str, str]:
    return {pod.metadata.name: pod.metadata.uid for pod in pods}


def _state(pod: client.V1Pod) -> str:
    """What `kubectl get pods` shows in STATUS: a waiting reason when there is one, else the phase."""
    if pod.metadata.deletion_timestamp is not None:
        return "Terminating"
    for status in pod.status.container_statuses or []:
        if status.state is not None and status.state.waiting is not None and status.state.waiting.reason:
            return status.state.waiting.reason
    return pod.status.phase or "Unknown"


def progress(core: client.CoreV1Api, namespace: str, release: str, role: str, replicas: int) -> str:
    """`1/2 ready · Running 2`: the pods of one role as the API server reports them."""
    pods = core.list_namespaced_pod(namespace, label_selector=naming.role_selector(release, role)).items
    ready = sum(1 for pod in pods if is_ready(pod) and pod.metadata.deletion_timestamp is None)
    states = Counter(_state(pod) for pod in pods)
    shown = ", ".join(f"{state} {count}" for state, count in sorted(states.items()))
    return f"{ready}/{replicas} ready · {shown or 'no pods yet'}"


def worker_rows(
    workers: Mapping[str, Sequence[Worker]], pods: Sequence[client.V1Pod], forks: Mapping[str, str]
) -> list[tuple[str, ...]]:
    """One row per worker. A forked role (forks: role -> target role) runs in its target's pods, on its own
    ports; its READY is its target pod's, since Kubernetes knows nothing of the process."""
    by_role_index = {(pod_role(p), pod_index(p)): p for p in pods}
    rows = []
    for role, role_workers in workers.items():
        for index, worker in enumerate(role_workers):
            pod = by_role_index.get((forks.get(role, role), index))
            if pod is None:
                rows.append((worker.id, "(no pod)", "-", worker.ip, ",".join(worker.worker_ports), "-", "-"))
                continue
            name = pod.metadata.name if role not in forks else f"{pod.metadata.name} (forked process)"
            rows.append(
                (
                    worker.id,
                    name,
                    pod.spec.node_name or "-",
                    worker.ip,
                    ",".join(worker.worker_ports),
                    str(is_ready(pod)).lower(),
                    str(restarts(pod)),
                )
            )
    return rows


def answering(addresses: Iterable[tuple[str, int]], timeout: float = 0.5) -> list[str]:
    """The addresses where something still accepts a TCP connection."""
    alive = []
    for host, port in addresses:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            if sock.connect_ex((host, port)) == 0:
                alive.append(f"{host}:{port}")
    return alive


def wait_until_silent(addresses: Sequence[tuple[str, int]], timeout: float) -> list[str]:
    """Waits until nothing answers on `addresses` (a deleted pod's process gets its grace period to exit);
    returns those still answering at the time-out."""
    deadline = time.monotonic() + timeout
    alive = answering(addresses)
    while alive and time.monotonic() < deadline:
        time.sleep(0.5)
        alive = answering(addresses)
    return alive
