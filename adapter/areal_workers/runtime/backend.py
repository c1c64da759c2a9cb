"""What a KubernetesScheduler talks to, built by one factory: the release (helm), the pods (one watch per wait),
the cluster reads, the StatefulSets and the workers' guard API. Tests pass in-memory ones instead."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client, config as kube_config

from .. import cluster_access
from ..config import KubernetesSchedulerConfig
from ..guard.client import GuardClient, Liveness
from ..pods.admission import AdmissionReader
from ..pods.inspector import ReleaseInspector
from ..pods.watch import PodWatch
from ..release.client import Releases
from .events import EventRecorder
from .lease import ReleaseLease


class StatefulSets(Protocol):
    """The StatefulSet reads and writes a rollback needs (the kubernetes client's AppsV1Api)."""

    def list_namespaced_stateful_set(self, namespace: str, **kwargs: Any) -> Any: ...

    def read_namespaced_stateful_set(self, name: str, namespace: str, **kwargs: Any) -> Any: ...

    def patch_namespaced_stateful_set_scale(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any: ...

    def delete_namespaced_stateful_set(self, name: str, namespace: str, **kwargs: Any) -> Any: ...


@dataclass
class Backend:
    releases: Releases
    pods: PodWatch
    inspector: ReleaseInspector
    statefulsets: StatefulSets
    guard: GuardClient
    lease: ReleaseLease | None = None  # the trainer's heartbeat for the release (None: not kept)
    events: EventRecorder | None = None  # the scheduler's decisions as Events (None: not recorded)
    # Raises ClusterAccessError unless the namespace exists and this identity may work in it.
    check_access: Callable[[], None] = lambda: None


Connect = Callable[[KubernetesSchedulerConfig, str, Liveness], Backend]
"""(config, release name, liveness check of a worker) -> the Backend; `liveness` is what the guard client calls
before retrying an RPC (it raises WorkerFailedError for a dead pod)."""


def kube_client(config: KubernetesSchedulerConfig) -> client.ApiClient:
    if config.kubeconfig or config.context:
        return kube_config.new_client_from_config(config_file=config.kubeconfig, context=config.context)
    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        kube_config.load_kube_config()
    return client.ApiClient()


def connect(
    config: KubernetesSchedulerConfig, release: str, liveness: Liveness, api_client: client.ApiClient | None = None
) -> Backend:
    """`api_client`: an existing client of the same cluster (None: one from the config's kubeconfig)."""
    api_client = api_client or kube_client(config)
    core = client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    events = EventRecorder(client.EventsV1Api(api_client), config.namespace, release, core, apps)
    return Backend(
        releases=Releases(config),
        pods=PodWatch(core, config.namespace),
        inspector=ReleaseInspector(
            core, config.namespace, release, AdmissionReader(client.CustomObjectsApi(api_client), config.namespace)
        ),
        statefulsets=apps,
        # A pod check costs an API request: made before retries and after connection errors, not per call.
        guard=GuardClient(liveness=liveness, check_first_attempt=False),
        lease=ReleaseLease(
            client.CoordinationV1Api(api_client),
            config.namespace,
            release,
            config.lease_grace_seconds,
            takeover=config.lease_takeover,
            events=events,
        )
        if config.lease_grace_seconds > 0 and config.ownership == "managed"
        else None,
        check_access=lambda: cluster_access.check_namespace(core, config.namespace),
        events=events,
    )
