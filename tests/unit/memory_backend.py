"""An in-memory cluster for the scheduler's state machine: releases with revisions, pods that follow the values of
the current revision like StatefulSets, the chart's topology, and a guard that answers. No helm, no apiserver.

A role's image decides how its pods behave: an image containing "broken" crashes (a fatal diagnosis), one
containing "slow" never becomes Ready (a time-out); anything else is Ready at once. A pod's worker container restarts
in place (restartCount + 1, same uid) when the guard is sent the in-place restart's /fork, unless the cluster's
`stuck_guards` names the pod.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from email.utils import format_datetime
from types import SimpleNamespace
from typing import Any

import aiohttp
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from areal_workers import naming
from areal_workers.errors import RPCConnectionError, WorkerFailedError
from areal_workers.guard.restart import RESTART_FORK_ROLE
from areal_workers.pods.inspector import ReadyRevision, RevisionRecords
from areal_workers.pods.watch import WaitTimedOut, pod_index
from areal_workers.release.client import HelmError
from areal_workers.runtime.backend import Backend

GUARD_PORT = 8000


@dataclass
class Revision:
    revision: int
    values: dict[str, Any]
    description: str
    status: SimpleNamespace = field(default_factory=lambda: SimpleNamespace(value="deployed"))


class MemoryCluster:
    """One namespace: the release's revisions and the pods of its current revision."""

    def __init__(self, release: str) -> None:
        self.release = release
        self.revisions: list[Revision] = []
        self.installed = False
        self.pods: dict[str, client.V1Pod] = {}
        self.ready_revision: int | None = None
        self.ready_pods: dict[str, Any] = {}  # the topology ConfigMap's record of the pods AReaL holds
        self.revision_notes: dict[int, str] = {}  # its record of what became of revisions (failed, rolled back)
        self.record_writes = 0  # patches of the topology ConfigMap's ready records
        self.waits: list[str] = []  # selectors waited on
        self.helm_record = True  # False: the objects stay but helm has no record (what Argo CD's sync leaves)
        self.chart = naming.CHART_NAME  # the chart helm records for the release
        self.applied: list[dict[str, Any]] = []
        self.fail_next_apply: str | None = None  # helm's stderr for the next install/upgrade, which then fails
        self.interrupt_next_apply = False  # the next install/upgrade writes its revision, then helm is killed
        self.recoveries: list[int] = []  # revisions left pending that a recovery rolled back or uninstalled
        self.stuck_guards: set[str] = set()  # pods whose guard ignores the in-place restart's SIGTERM
        self.deleted: list[str] = []  # pods deleted by the scheduler, in order
        self._uids = itertools.count(1)

    # --- the release ----------------------------------------------------------------------------

    def current(self) -> Revision | None:
        return self.revisions[-1] if self.installed else None

    def write(self, values: dict[str, Any], description: str) -> Revision:
        number = self.revisions[-1].revision + 1 if self.revisions else 1
        for earlier in self.revisions:
            earlier.status = SimpleNamespace(value="superseded")
        revision = Revision(number, copy.deepcopy(values), description)
        self.revisions.append(revision)
        self.installed = True
        self._reconcile()
        return revision

    def uninstall(self) -> None:
        self.installed, self.revisions, self.ready_revision, self.ready_pods = False, [], None, {}
        self.revision_notes = {}
        self.pods.clear()

    def topology(self) -> dict[str, Any]:
        current = self.current()
        if current is None:
            return {}
        values = current.values
        roles = {
            name: {
                "replicas": int(entry["replicas"]),
                "guard_port": GUARD_PORT,
                "extra_ports": [GUARD_PORT + 1 + i for i in range(int(entry.get("extraPorts", 0)))],
            }
            for name, entry in (values.get("roles") or {}).items()
        }
        forks = {}
        for name, fork in (values.get("forks") or {}).items():
            entry = {
                "target": fork["target"],
                "mode": fork.get("mode", "process"),
                "replicas": roles[fork["target"]]["replicas"],
                "ports": fork.get("ports", []),
            }
            if entry["mode"] == "pod":
                entry.update(guard_port=GUARD_PORT, extra_ports=[])
            forks[name] = entry
        return {
            "selector": self.selector_labels(),
            "roles": roles,
            "forks": forks,
            "colocations": dict(values.get("colocations") or {}),
            "worker_flags": ["--name_resolve.type", "nfs"],
            "experiment": values.get("experiment"),
            "trial": values.get("trial"),
        }

    def selector_labels(self) -> dict[str, str]:
        return {naming.LABEL_NAME: naming.CHART_NAME, naming.LABEL_INSTANCE: self.release}

    # --- the pods -------------------------------------------------------------------------------

    def _workloads(self) -> dict[str, tuple[int, str]]:
        """workload -> (replicas, the spec its pods run), from the current revision's values."""
        current = self.current()
        values = current.values if current else {}
        roles = values.get("roles") or {}
        specs = {name: repr({k: v for k, v in entry.items() if k != "replicas"}) for name, entry in roles.items()}
        workloads = {name: (int(entry["replicas"]), specs[name]) for name, entry in roles.items()}
        for name, fork in (values.get("forks") or {}).items():
            if fork.get("mode") == "pod":
                workloads[name] = (int(roles[fork["target"]]["replicas"]), repr((fork, specs[fork["target"]])))
        return workloads

    def _reconcile(self) -> None:
        """What the StatefulSet controllers do: pods for every index, replaced when their spec changed."""
        wanted = {
            f"{self.release}-{name}-{i}": (name, i, spec)
            for name, (replicas, spec) in self._workloads().items()
            for i in range(replicas)
        }
        for pod_name in list(self.pods):
            pod = self.pods[pod_name]
            if pod_name not in wanted or pod.metadata.annotations["spec"] != wanted[pod_name][2]:
                del self.pods[pod_name]
        for pod_name, (workload, index, spec) in wanted.items():
            if pod_name not in self.pods:
                self.pods[pod_name] = self._pod(pod_name, workload, index, spec)

    def _pod(self, name: str, workload: str, index: int, spec: str) -> client.V1Pod:
        uid = next(self._uids)
        ready = "slow" not in spec and "broken" not in spec
        return client.V1Pod(
            spec=client.V1PodSpec(containers=[client.V1Container(name="worker")], termination_grace_period_seconds=1),
            metadata=client.V1ObjectMeta(
                name=name,
                uid=f"uid-{uid}",
                annotations={"spec": spec},
                labels={
                    **self.selector_labels(),
                    naming.LABEL_ROLE: workload,
                    naming.LABEL_POD_INDEX: str(index),
                },
            ),
            status=client.V1PodStatus(
                phase="Running",
                pod_ip=f"10.0.{uid // 250}.{uid % 250}",
                conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
                container_statuses=[
                    client.V1ContainerStatus(
                        name="worker",
                        image="",
                        image_id="",
                        ready=ready,
                        restart_count=0,
                        state=client.V1ContainerState(running=client.V1ContainerStateRunning()),
                    )
                ],
            ),
        )

    def restart_worker(self, ip: str) -> None:
        """The worker container of the pod at `ip` exits and the kubelet starts it again in the same pod."""
        pod = next(pod for pod in self.pods.values() if pod.status.pod_ip == ip)
        if pod.metadata.name not in self.stuck_guards:
            pod = self.pods[pod.metadata.name] = copy.deepcopy(pod)  # a new state of the pod, as a watch shows it
            pod.status.container_statuses[0].restart_count += 1

    def select(self, selector: str) -> list[client.V1Pod]:
        wanted = dict(term.split("=", 1) for term in selector.split(","))
        return [
            pod
            for pod in self.pods.values()
            if all(pod.metadata.labels.get(key) == value for key, value in wanted.items())
        ]


class MemoryReleases:
    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster
        self.reads = 0  # of helm's record of the release (one `helm status` each)

    async def current(self, name: str) -> Revision | None:
        self.reads += 1
        return self.cluster.current() if self.cluster.helm_record else None

    async def chart_name(self, name: str) -> str | None:
        return None if await self.current(name) is None else self.cluster.chart

    async def recover(self, name: str) -> Revision | None:
        """A pending revision rolled back to the one before it (uninstalled when there is none), as helm's is."""
        current = await self.current(name)
        if current is None or not current.status.value.startswith("pending"):
            return current
        self.cluster.recoveries.append(current.revision)
        earlier = [r for r in self.cluster.revisions if r.revision < current.revision]
        if not earlier:
            self.cluster.uninstall()
            return None
        return self.cluster.write(earlier[-1].values, f"Rollback to {earlier[-1].revision}")

    async def snapshot(self, name: str, current: Revision | None = None) -> tuple[int, dict[str, Any]] | None:
        current = current or await self.current(name)
        return None if current is None else (current.revision, copy.deepcopy(current.values))

    async def values(self, name: str, revision: int) -> dict[str, Any] | None:
        found = [r for r in self.cluster.revisions if r.revision == revision]
        return copy.deepcopy(found[0].values) if found else None

    async def render(self, name: str, values: dict[str, Any]) -> list[dict[str, Any]]:
        return []

    async def post_renders(self) -> bool:
        return False  # the checks see render()'s manifests (helm 4's way); RenderGate is tested with real helm

    async def apply(self, name: str, values: dict[str, Any], description: str) -> tuple[int, dict[str, Any]]:
        if self.cluster.fail_next_apply is not None:
            stderr, self.cluster.fail_next_apply = self.cluster.fail_next_apply, None
            raise HelmError(1, b"", stderr.encode())
        self.cluster.applied.append(copy.deepcopy(values))
        written = self.cluster.write(values, description)
        if self.cluster.interrupt_next_apply:
            self.cluster.interrupt_next_apply = False
            written.status = SimpleNamespace(value="pending-upgrade" if written.revision > 1 else "pending-install")
            raise HelmError(-9, b"", b"signal: killed")
        return written.revision, copy.deepcopy(written.values)

    async def rollback(self, name: str, revision: int) -> Revision:
        target = next(r for r in self.cluster.revisions if r.revision == revision)
        return self.cluster.write(target.values, f"Rollback to {revision}")

    async def uninstall(self, name: str) -> bool:
        existed = self.cluster.installed
        self.cluster.uninstall()
        return existed

    async def history(self, name: str) -> list[Revision]:
        return list(self.cluster.revisions) if self.cluster.installed else []


class MemoryPods:
    """PodWatch over the memory cluster: a wait sees the pods as they are (nothing changes while it waits)."""

    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster

    def list(self, selector: str) -> tuple[list[client.V1Pod], str]:
        return self.cluster.select(selector), "1"

    def delete(self, name: str) -> None:
        """The StatefulSet starts the pod again at once (another uid)."""
        self.cluster.deleted.append(name)
        gone = self.cluster.pods.pop(name, None)
        if gone is not None and self.cluster.installed:
            workload, index = gone.metadata.labels[naming.LABEL_ROLE], pod_index(gone)
            spec = self.cluster._workloads().get(workload, (0, None))[1]
            if spec is not None and index is not None:
                self.cluster.pods[name] = self.cluster._pod(name, workload, index, spec)

    def wait(
        self, selector: str, done: Any, timeout: float, on_pod: Any = None, on_idle: Any = None
    ) -> dict[str, client.V1Pod]:
        self.cluster.waits.append(selector)
        pods = {pod.metadata.name: pod for pod in self.cluster.select(selector)}
        for pod in pods.values():
            if on_pod:
                on_pod(pod)
        if done(pods):
            return pods
        raise WaitTimedOut({pod_index(pod): pod for pod in pods.values()})


class MemoryInspector:
    def __init__(self, cluster: MemoryCluster) -> None:
        self.cluster = cluster

    def topology(self) -> dict[str, Any]:
        return self.cluster.topology()

    def nodes(self) -> list[client.V1Node]:
        return []

    def failure(
        self,
        role: str,
        pod: client.V1Pod,
        ready_pod: client.V1Pod | None,
        nodes: list[client.V1Node],
        restarted_pod: client.V1Pod | None = None,
    ) -> WorkerFailedError | None:
        if "broken" in pod.metadata.annotations["spec"]:
            return WorkerFailedError(naming.worker_id(role, pod_index(pod)), 1, f"{pod.metadata.name} crashed")
        if ready_pod is not None and ready_pod.metadata.uid != pod.metadata.uid:
            return WorkerFailedError(naming.worker_id(role, pod_index(pod)), -1, f"{pod.metadata.name} replaced")
        return None

    def timeout_diagnosis(self, role: str, replicas: int, pods: dict[int, client.V1Pod]) -> str:
        return f"{role}: not ready"

    def admission_failure(self, role: str, pods: dict[str, client.V1Pod]) -> WorkerFailedError | None:
        return None  # no Kueue here

    def local_queue_exists(self, queue: str) -> bool | None:
        return True

    def ready_revision(self) -> int | None:
        return self.cluster.ready_revision

    def record_ready(self, held: dict[str, Any] | None = None, ready: ReadyRevision | None = None) -> None:
        self.cluster.record_writes += 1
        if held is not None:
            self.cluster.ready_pods = held
        if ready is not None:
            self.cluster.ready_revision = ready.revision

    def revision_records(self) -> RevisionRecords:
        return RevisionRecords(self.cluster.ready_revision, {}, self.cluster.revision_notes)

    def record_revision_notes(self, notes: dict[int, str], keep: int) -> None:
        self.cluster.revision_notes = {**self.cluster.revision_notes, **notes}

    def ready_pods(self) -> dict[str, Any]:
        return self.cluster.ready_pods

    def log_lines(self, pod: client.V1Pod, tail: int) -> list[str]:
        return []


class MemoryStatefulSets:
    def list_namespaced_stateful_set(self, namespace: str, **kwargs: Any) -> Any:
        return SimpleNamespace(items=[])

    def read_namespaced_stateful_set(self, name: str, namespace: str, **kwargs: Any) -> Any:
        raise AssertionError("no StatefulSets here")

    def patch_namespaced_stateful_set_scale(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        raise AssertionError("no StatefulSets here")

    def delete_namespaced_stateful_set(self, name: str, namespace: str, **kwargs: Any) -> Any:
        raise AssertionError("no StatefulSets here")


class MemoryGuard:
    """Answers every worker; records what the scheduler sent. A fork whose argv names a module containing
    "broken" never becomes healthy (its wait times out)."""

    def __init__(self, cluster: MemoryCluster | None = None) -> None:
        self.cluster = cluster  # where the in-place restart's /fork restarts a worker (None: it is only recorded)
        self.refusing: set[str] = set()  # worker IPs whose guard does not answer /fork
        self.disconnecting: set[str] = set()  # worker IPs whose guard stops before it replies to the restart's /fork
        self.destroyed: list[str] = []
        self.configured: list[str] = []
        self.forked: dict[tuple[str, int], list[str]] = {}  # (role, index) -> argv of the running forks
        self.killed: list[tuple[str, int]] = []
        self.restarted: list[str] = []  # workers restarted in place, in order
        self._ports = itertools.count(20000)

    async def alloc_ports(self, worker: Any, count: int, **kwargs: Any) -> tuple[str, list[int]]:
        return worker.ip, [next(self._ports) for _ in range(count)]

    async def fork(
        self,
        worker: Any,
        role: str,
        worker_index: int,
        raw_cmd: list[str],
        env: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        if worker.ip in self.refusing:
            raise RPCConnectionError(worker.id, worker.ip, 8000, "connection refused")
        self.forked[(role, worker_index)] = list(raw_cmd)
        if role == RESTART_FORK_ROLE and self.cluster is not None:
            self.restarted.append(worker.id)
            self.cluster.restart_worker(worker.ip)
            if worker.ip in self.disconnecting:
                disconnected = aiohttp.ServerDisconnectedError()
                raise RPCConnectionError(worker.id, worker.ip, 8000, f"/fork: {disconnected}") from disconnected

    async def wait_healthy(self, host: str, port: int, timeout: float, interval: float = 0.5) -> None:
        argv = next(argv for argv in self.forked.values() if str(port) in " ".join(argv))
        if any("broken" in part for part in argv):
            raise TimeoutError(f"{host}:{port} did not answer /health")

    async def kill_forked(self, worker: Any, role: str, worker_index: int, **kwargs: Any) -> int:
        self.killed.append((role, worker_index))
        self.forked.pop((role, worker_index), None)
        return 200

    async def destroy_engines(self, workers: list[Any], timeout: float) -> dict[str, str]:
        self.destroyed.extend(worker.id for worker in workers)
        return {}

    def configure(self, worker: Any, payload: Any, timeout: float = 300.0) -> None:
        self.configured.append(worker.id)

    def close(self) -> None:
        pass

    async def aclose(self) -> None:
        pass


class MemoryLeases:
    """create/read/replace/list/delete of Leases with resourceVersions, as the apiserver does them (a replace with
    the wrong resourceVersion: 409). `timeouts` holds each request's _request_timeout; `before_write(name)` runs
    before every replace and delete (another party acting in between)."""

    def __init__(self) -> None:
        self.leases: dict[str, client.V1Lease] = {}
        self.version = 0
        self.timeouts: list[Any] = []
        self.before_write: Any = lambda name: None
        self.server_time: datetime | None = None  # the apiserver's clock, sent as the Date of a listing
        self.live: set[str] = set()  # Leases whose holder renews between any two reads (a live trainer)

    def _stored(self, lease: client.V1Lease) -> client.V1Lease:
        self.version += 1
        lease = copy.deepcopy(lease)
        lease.metadata.resource_version = str(self.version)
        self.leases[lease.metadata.name] = lease
        return lease

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease, **kwargs: Any) -> client.V1Lease:
        self.timeouts.append(kwargs.get("_request_timeout"))
        if body.metadata.name in self.leases:
            raise ApiException(status=409, reason="AlreadyExists")
        return self._stored(body)

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> client.V1Lease:
        self.timeouts.append(kwargs.get("_request_timeout"))
        if name not in self.leases:
            raise ApiException(status=404, reason="NotFound")
        if name in self.live:
            renewed = copy.deepcopy(self.leases[name])
            renewed.spec.renew_time = renewed.spec.renew_time + timedelta(seconds=1)
            self._stored(renewed)
        return copy.deepcopy(self.leases[name])

    def replace_namespaced_lease(
        self, name: str, namespace: str, body: client.V1Lease, **kwargs: Any
    ) -> client.V1Lease:
        self.timeouts.append(kwargs.get("_request_timeout"))
        self.before_write(name)
        if name not in self.leases:
            raise ApiException(status=404, reason="NotFound")
        if self.leases[name].metadata.resource_version != body.metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        return self._stored(body)

    def list_namespaced_lease_with_http_info(
        self, namespace: str, label_selector: str, **kwargs: Any
    ) -> tuple[client.V1LeaseList, int, dict[str, str]]:
        """The listing with the apiserver's Date header (`server_time`, when set)."""
        headers = {"Date": format_datetime(self.server_time, usegmt=True)} if self.server_time else {}
        return self.list_namespaced_lease(namespace, label_selector, **kwargs), 200, headers

    def list_namespaced_lease(self, namespace: str, label_selector: str, **kwargs: Any) -> client.V1LeaseList:
        self.timeouts.append(kwargs.get("_request_timeout"))
        return client.V1LeaseList(
            items=[
                copy.deepcopy(lease)
                for lease in self.leases.values()
                if label_selector in (lease.metadata.labels or {})
            ]
        )

    def delete_namespaced_lease(
        self, name: str, namespace: str, body: client.V1DeleteOptions | None = None, **kwargs: Any
    ) -> None:
        self.timeouts.append(kwargs.get("_request_timeout"))
        self.before_write(name)
        if name not in self.leases:
            raise ApiException(status=404, reason="NotFound")
        wanted = body.preconditions.resource_version if body and body.preconditions else None
        if wanted is not None and wanted != self.leases[name].metadata.resource_version:
            raise ApiException(status=409, reason="Conflict")
        del self.leases[name]


class FailingLeases(MemoryLeases):
    """Every read and create of a Lease answered with `error` (an ApiException as the apiserver at `host` sends it,
    or a refused connection): a Lease the scheduler cannot take."""

    def __init__(self, error: BaseException, host: str = "https://127.0.0.1:6443") -> None:
        super().__init__()
        self.error = error
        self.api_client = SimpleNamespace(configuration=SimpleNamespace(host=host))

    def read_namespaced_lease(self, name: str, namespace: str, **kwargs: Any) -> client.V1Lease:
        raise self.error

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease, **kwargs: Any) -> client.V1Lease:
        raise self.error


def memory_connect(
    cluster: MemoryCluster,
    guard: MemoryGuard | None = None,
    lease: Any = None,
    access_error: BaseException | None = None,
) -> Any:
    """A `connect` for KubernetesScheduler that wires it to `cluster` (`lease`: a ReleaseLease to hold;
    `access_error`: what the namespace check raises)."""

    def check_access() -> None:
        if access_error is not None:
            raise access_error

    def connect(config: Any, release: str, liveness: Any) -> Backend:
        return Backend(
            releases=MemoryReleases(cluster),
            pods=MemoryPods(cluster),  # type: ignore[arg-type]
            inspector=MemoryInspector(cluster),
            statefulsets=MemoryStatefulSets(),  # type: ignore[arg-type]
            guard=guard or MemoryGuard(cluster),
            lease=lease,
            check_access=check_access,
        )  # type: ignore[arg-type]

    return connect


class MemoryEvents:
    """events.k8s.io/v1 as the apiserver keeps it: created bodies by name, merge-patched series."""

    def __init__(self, fail: ApiException | Exception | None = None) -> None:
        self.stored: dict[str, dict[str, Any]] = {}
        self.calls: list[str] = []
        self.fail = fail

    def create_namespaced_event(self, namespace: str, body: Any, **kwargs: Any) -> Any:
        self.calls.append("create")
        if self.fail is not None:
            raise self.fail
        assert kwargs.get("_request_timeout")
        self.stored[body["metadata"]["name"]] = body
        return body

    def patch_namespaced_event(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
        self.calls.append("patch")
        if name not in self.stored:
            raise ApiException(status=404, reason="Not Found")
        self.stored[name] = {**self.stored[name], **body}
        return self.stored[name]
