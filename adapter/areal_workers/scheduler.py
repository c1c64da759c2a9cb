"""KubernetesScheduler: AReaL's scheduler contract over Helm releases of charts/areal-workers.

One release per (experiment, trial); every create / scale / fork / delete is one `helm upgrade`, so
`helm history` is the log of the topology and `helm rollback` its undo. Workers are discovered from their pods
(IP, ordinal, Ready) with one watch per wait, and failures are diagnosed from pod status, events and logs.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import threading
from typing import Any

from kubernetes import client, config as kube_config

from . import capacity, forks, job_values, name_records, naming
from .config import KubernetesSchedulerConfig
from .wire_format import deserialize_value, serialize_value
from .errors import (
    InvalidRequestError,
    InvalidSchedulerSetupError,
    SchedulerError,
    WorkerCreationError,
    WorkerFailedError,
    WorkerNotFoundError,
    WorkerTimeoutError,
    attach_diagnosis,
)
from .guard_client import GuardClient
from .inspector import ReleaseInspector
from .podwatch import PodWatch, WaitTimedOut, all_ready, none_left, pod_index
from .release import HelmError, Releases, helm_error_text, merge_values
from .loop_thread import LoopThread
from .areal_types import AREAL_SCHEDULER_BASE, Job, SchedulingSpec, Worker

logger = logging.getLogger(__name__)

FORK_LOG_LINES = 400  # of the parent pod's log searched for a fork's exit marker



class KubernetesScheduler(AREAL_SCHEDULER_BASE):  # type: ignore[misc, valid-type]
    """AReaL's Scheduler on Kubernetes. Construct it like AReaL's schedulers: `KubernetesScheduler(exp_config=cfg)`
    (experiment, trial, fileroot and name_resolve come from it), plus an optional KubernetesSchedulerConfig
    (default: from the AREAL_K8S_* environment variables)."""

    def __init__(self, exp_config: Any = None, *, config: KubernetesSchedulerConfig | None = None,
                 experiment_name: str | None = None, trial_name: str | None = None) -> None:
        self.config = config or KubernetesSchedulerConfig.from_env()
        self.exp_config = exp_config
        # As in AReaL's schedulers, the experiment config wins over the explicit names.
        self.experiment_name = getattr(exp_config, "experiment_name", None) or experiment_name
        self.trial_name = getattr(exp_config, "trial_name", None) or trial_name
        if not self.experiment_name or not self.trial_name:
            raise InvalidSchedulerSetupError(
                "experiment_name and trial_name must be provided: pass exp_config (with experiment_name and "
                "trial_name) or experiment_name= and trial_name=")
        self.release = self.config.release_name or naming.release_name(self.experiment_name, self.trial_name)
        self.namespace = self.config.namespace
        api_client = self._kube_client()
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.pods = PodWatch(self.core, self.namespace)
        self.loop = LoopThread(f"areal-workers-{self.release}")
        self.releases = Releases(self.config)
        # A pod check costs an API request: made before retries and after connection errors, not per call.
        self.guard = GuardClient(liveness=self._check_alive, check_first_attempt=False)
        self.inspector = ReleaseInspector(self.core, self.apps, self.namespace, self.release)
        self._lock = threading.RLock()
        self._workers: dict[str, list[Worker]] = {}
        self._ready_pods: dict[str, client.V1Pod] = {}  # pod name -> the pod as last seen Ready
        self._pending: set[str] = set()  # roles changed since the last revision whose workers were all ready
        self._values = self._adopt()
        self._good_revision = self._read_good_revision()

    # --- construction ----------------------------------------------------------------------------

    def _kube_client(self) -> client.ApiClient:
        if self.config.kubeconfig or self.config.context:
            return kube_config.new_client_from_config(config_file=self.config.kubeconfig, context=self.config.context)
        try:
            kube_config.load_incluster_config()
        except kube_config.ConfigException:
            kube_config.load_kube_config()
        return client.ApiClient()

    def _adopt(self) -> dict[str, Any]:
        """A controller that restarts finds its release as it left it (a pending operation is recovered)."""
        revision = self._helm(self.releases.recover(self.release))
        if revision is None:
            if self.config.ownership == "external":
                raise SchedulerError(f"release {self.release!r} not found in namespace {self.namespace!r}: "
                                     f"install it first (helm install {self.release} ...) or fix release_name")
            return {}
        values = self._helm(self.releases.values(self.release))
        logger.info("adopted release %s revision %s (%s)", self.release, revision.revision, revision.status.value)
        return values

    def _helm(self, coroutine: Any, key: str | None = None) -> Any:
        """Runs a release operation; helm's failure becomes AReaL's error with helm's own message."""
        try:
            return self.loop.run(coroutine)
        except HelmError as error:
            text = helm_error_text(error)
            if key is not None:
                raise WorkerCreationError(key, "helm failed", text) from error
            raise SchedulerError(f"helm failed for release {self.release} in namespace {self.namespace}: {text}") \
                from error

    def _read_good_revision(self) -> int | None:
        """The recorded last-ready revision; else the adopted revision when it is deployed."""
        recorded = self.inspector.ready_revision()
        if recorded is not None:
            return recorded
        current = self._helm(self.releases.current(self.release))
        return current.revision if current is not None and current.status.value == "deployed" else None

    def _mark_good(self) -> None:
        current = self._helm(self.releases.current(self.release))
        if current is None or current.revision == self._good_revision:
            return
        self._good_revision = current.revision
        self.inspector.record_ready_revision(current.revision)

    def _forget_pods(self, role: str | None = None) -> None:
        """Pods the scheduler replaces on purpose (delete, scale, update, rollback) are no longer 'held'."""
        self._ready_pods = {name: pod for name, pod in self._ready_pods.items()
                            if role is not None and (pod.metadata.labels or {}).get(naming.LABEL_ROLE) != role}

    def _mark_good_if_settled(self) -> None:
        """A revision that only removed or mapped roles is as good as its predecessor, if nothing waits."""
        if not self._pending:
            self._mark_good()

    def _roll_back(self, error: BaseException) -> None:
        """After a change whose workers failed: back to the last revision whose workers were all ready, with the
        pods stuck on the failed revision replaced (a StatefulSet rollback alone leaves them broken)."""
        target = self._good_revision
        if target is None:
            self._helm(self.releases.uninstall(self.release))
            self._wait_gone(naming.release_selector(self.release))
            self._values, note = {}, f"uninstalled release {self.release}: no revision ever had all workers ready"
        else:
            gone = set(self._roles()) | set(self._forks())
            self._helm(self.releases.rollback(self.release, target))
            self._values = self._helm(self.releases.values(self.release))
            for role in gone - set(self._roles()) - set(self._forks()):
                self._wait_gone(naming.role_selector(self.release, role))
            replaced = self.inspector.replace_stuck_pods()
            self._mark_good()
            note = f"rolled back release {self.release} to revision {target}" + (
                f"; replaced pods stuck on the failed revision: {', '.join(replaced)}" if replaced else "")
        for role in self._pending:
            self._workers.pop(role, None)
            self._forget_pods(role)
        self._pending.clear()
        logger.warning("%s after: %s", note, error)
        if hasattr(error, "add_note"):
            error.add_note(note)

    @property
    def n_gpus_per_node(self) -> int:
        cluster = getattr(self.exp_config, "cluster", None)
        return int(getattr(cluster, "n_gpus_per_node", None) or self.config.n_gpus_per_node)

    # --- the topology ----------------------------------------------------------------------------

    def _roles(self) -> dict[str, Any]:
        return self._values.get("roles", {}) or {}

    def _forks(self) -> dict[str, Any]:
        return self._values.get("forks", {}) or {}

    def _colocations(self) -> dict[str, str]:
        return self._values.get("colocations", {}) or {}

    def _exists(self, role: str) -> bool:
        return role in self._roles() or role in self._forks() or role in self._colocations()

    def _replicas(self, role: str) -> int:
        if role in self._roles():
            return int(self._roles()[role]["replicas"])
        if role in self._forks():
            return self._replicas(self._forks()[role]["target"])
        return self._replicas(self._colocations()[role])

    def _require_managed(self, operation: str) -> None:
        if self.config.ownership == "external":
            raise WorkerCreationError(
                self.release, f"{operation} is not allowed on an external release",
                f"release {self.release!r} is managed by someone else (helm/Argo CD): change roles in its values "
                f"there; this scheduler only discovers and calls its workers")

    def _base_values(self) -> dict[str, Any]:
        try:
            return job_values.base_values(self.config, self.experiment_name, self.trial_name,
                                        job_values.cluster_values(self.exp_config),
                                        offload=bool(getattr(self.exp_config, "enable_offload", False)))
        except topology.TopologyError as error:
            raise WorkerCreationError(error.worker_key, error.reason, error.details) from None

    def _apply(self, values: dict[str, Any], description: str, key: str, workloads: tuple[str, ...] = ()) -> int:
        """One helm revision with `values`; on failure the release is left at its previous revision. The pods of
        `workloads` (roles or pod-mode forks created or changed) are checked against the nodes first, and a first
        install clears the trial's stale name_resolve records (as AReaL's schedulers do at start)."""
        before = self._helm(self.releases.current(self.release))
        if workloads or before is None:
            manifests = self._helm(self.releases.render(self.release, values), key)
            self._check_capacity(manifests, workloads, key)
            if before is None:
                self._clear_name_records(manifests)
        try:
            revision = self.loop.run(self.releases.apply(self.release, values, description))
        except HelmError as error:
            self._restore(before)
            raise WorkerCreationError(key, "helm upgrade failed", helm_error_text(error)) from error
        self._values = values
        return revision.revision

    def _check_capacity(self, manifests: list[dict[str, Any]], workloads: tuple[str, ...], key: str) -> None:
        if self.config.capacity_check == "off" or not workloads:
            return
        problems = capacity.preflight(manifests, workloads, self.inspector.nodes())
        if problems and self.config.capacity_check == "reject":
            raise WorkerCreationError(key, "No node can hold a worker", "\n".join(problems) +
                                      "\n(capacity_check='warn' or 'off' lets a cluster autoscaler add nodes)")
        for problem in problems:
            logger.warning("capacity check: %s", problem)

    def _clear_name_records(self, manifests: list[dict[str, Any]]) -> None:
        topology_maps = [m for m in manifests if m.get("kind") == "ConfigMap"
                         and m["metadata"].get("labels", {}).get(naming.LABEL_COMPONENT) == "topology"]
        if not topology_maps:
            return
        flags = json.loads(topology_maps[0]["data"]["topology.json"]).get("worker_flags", [])
        cleared = name_records.clear_trial(flags, self.experiment_name, self.trial_name,
                                           name_records.pod_users(manifests))
        if cleared:
            logger.info("cleared stale name_resolve records of the trial: %s", ", ".join(cleared))

    def _restore(self, before: Any) -> None:
        """After a failed upgrade: back to the revision before it (or no release at all after a failed install)."""
        current = self._helm(self.releases.current(self.release))
        if current is None or (before is not None and current.revision == before.revision):
            return
        if before is None:
            self._helm(self.releases.uninstall(self.release))
        else:
            self._helm(self.releases.rollback(self.release, before.revision))

    def dry_run(self, job: Job) -> list[dict[str, Any]]:
        """The manifests create_workers(job) would apply, without touching the cluster."""
        with self._lock:
            spec = self._spec(job)
            values = self._with_role(job.role, spec, job.replicas)
            return self._helm(self.releases.render(self.release, values))

    def _spec(self, job: Job) -> SchedulingSpec:
        try:
            spec = job_values.resolve_spec(job)
            job_values.check_spec(job.role, spec)
        except topology.TopologyError as error:
            raise WorkerCreationError(error.worker_key, error.reason, error.details) from None
        return spec

    def _with_role(self, role: str, spec: SchedulingSpec, replicas: int) -> dict[str, Any]:
        values = merge_values(self._values, self._base_values()) if self._values else self._base_values()
        values = copy.deepcopy(values)
        values.setdefault("roles", {})[role] = job_values.role_values(spec, replicas, self.config)
        return values

    # --- create ----------------------------------------------------------------------------------

    def create_workers(self, job: Job, *args: Any, **kwargs: Any) -> list[str]:
        with self._lock:
            self._require_managed("create_workers")
            spec = self._spec(job)
            role, replicas = job.role, job.replicas
            if self._exists(role):
                raise WorkerCreationError(role, "Worker group already exists",
                                          f"Use delete_workers('{role}') first to remove existing workers")
            strategy = job.scheduling_strategy
            if strategy.type == "colocation":
                return self._colocate(role, replicas, strategy.target, strategy.fork)
            if strategy.type != "separation":
                raise InvalidRequestError(role, "Invalid strategy",
                                          f"scheduling_strategy.type must be 'separation' or 'colocation', "
                                          f"got {strategy.type!r}")
            values = self._with_role(role, spec, replicas)
            self._apply(values, f"create {role}: {replicas} worker(s)", role, (role,))
            self._pending.add(role)
            ids = [naming.worker_id(role, i) for i in range(replicas)]
            if self.exp_config is not None:  # AReaL's schedulers wait for the workers and configure them here
                self._configure(self.get_workers(role))
            return ids

    def scale_workers(self, role: str, replicas: int) -> list[str]:
        """Changes a role's replica count in one helm revision; existing workers keep running untouched."""
        with self._lock:
            self._require_managed("scale_workers")
            if role not in self._roles():
                raise WorkerNotFoundError(role)
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
                raise WorkerCreationError(role, "Invalid configuration",
                                          f"replicas must be an integer greater than 0, got {replicas!r}; "
                                          f"delete_workers('{role}') removes a role")
            dependents = sorted(r for r, t in self._colocations().items() if t == role)
            dependents += sorted(r for r, f in self._forks().items() if f["target"] == role)
            if dependents:
                raise WorkerCreationError(role, "Replica count mismatch",
                                          f"roles {dependents} are colocated with {role} and must keep its replica "
                                          f"count; delete them first, scale, then colocate them again")
            current = self._replicas(role)
            if replicas != current:
                values = copy.deepcopy(self._values)
                values["roles"][role]["replicas"] = replicas
                self._apply(values, f"scale {role}: {current} -> {replicas} worker(s)", role, (role,))
                self._workers.pop(role, None)
                self._forget_pods(role)
                self._pending.add(role)
            return [naming.worker_id(role, i) for i in range(replicas)]

    def update_workers(self, job: Job) -> list[str]:
        """Replaces an existing role's SchedulingSpec (image, command, resources, env, replicas) in one helm
        revision; the StatefulSet rolls its pods. If the new pods fail, get_workers rolls the release back."""
        with self._lock:
            self._require_managed("update_workers")
            if job.role not in self._roles():
                raise WorkerNotFoundError(job.role)
            spec = self._spec(job)
            if job.replicas != self._replicas(job.role) and any(
                    t == job.role for t in [*self._colocations().values(), *(f["target"] for f in self._forks().values())]):
                raise WorkerCreationError(job.role, "Replica count mismatch",
                                          "colocated roles must keep the target's replica count; delete them first")
            values = self._with_role(job.role, spec, job.replicas)
            self._apply(values, f"update {job.role}: {job.replicas} worker(s)", job.role, (job.role,))
            self._workers.pop(job.role, None)
            self._forget_pods(job.role)
            self._pending.add(job.role)
            return [naming.worker_id(job.role, i) for i in range(job.replicas)]

    def _colocate(self, role: str, replicas: int, target: str | None, fork: bool) -> list[str]:
        if not target:
            raise WorkerCreationError(role, "Invalid strategy", "Colocation strategy requires target role to be specified")
        if target not in self._roles() and target not in self._forks():
            raise WorkerNotFoundError(f"Cannot colocate with role '{target}' - role not found")
        target_replicas = self._replicas(target)
        if replicas != target_replicas:
            raise WorkerCreationError(role, "Replica count mismatch",
                                      f"Colocated role must have same replica count as target "
                                      f"({replicas} != {target_replicas})")
        if fork:
            return self.fork_workers(role, target)
        values = copy.deepcopy(self._values)
        values.setdefault("colocations", {})[role] = target
        self._apply(values, f"colocate {role} on {target}", role)
        self._mark_good_if_settled()
        return [naming.worker_id(target, i) for i in range(target_replicas)]

    def _configure(self, workers: list[Worker]) -> None:
        """What AReaL's schedulers do once workers answer: send each its experiment config, role and rank."""
        for rank, worker in enumerate(workers):
            role = worker.id.rpartition("/")[0]
            self.guard.configure(worker, serialize_value({"config": self.exp_config, "role": role, "rank": rank}))

    # --- discover and wait -----------------------------------------------------------------------

    def get_workers(self, role: str, timeout: float | None = None) -> list[Worker]:
        """Waits until every worker of `role` answers. The wait holds no lock: engine calls, and waits for other
        roles, go on meanwhile. A fatal diagnosis (WorkerFailedError) rolls a pending change back; a time-out
        changes nothing, so a retry with a longer timeout finds the role as it was (AReaL's behaviour)."""
        timeout = self.config.ready_timeout if timeout is None else timeout
        with self._lock:
            target = self._colocations().get(role) if role not in self._roles() else None
            if target is None and not self._exists(role):
                raise WorkerNotFoundError(role)
            fork = self._forks().get(role)
            replicas = self._replicas(role)
        if target is not None:
            return self.get_workers(target, timeout)
        try:
            if fork is not None and fork.get("mode", "process") == "process":
                workers = self._process_fork_workers(role, fork, timeout)
            else:
                workers = self._wait_for_pods(role, replicas, self._role_ports(role), timeout)
        except WorkerFailedError as error:
            with self._lock:
                if role in self._pending and self.config.ownership == "managed":
                    self._roll_back(error)
            raise
        with self._lock:
            if self._exists(role) and self._replicas(role) == replicas:  # not changed while we waited
                self._workers[role] = workers
                if role in self._pending:  # the change that created or resized this role is complete
                    self._pending.discard(role)
                    if not self._pending and self.config.ownership == "managed":
                        self._mark_good()
        return workers

    def _role_ports(self, role: str) -> list[str]:
        """The guard port and extra ports the chart gave the role's pods (its topology ConfigMap), so a scheduler
        that created the release and one that adopted it report the same ports whatever the values files say."""
        topology = self.inspector.topology()
        entry = (topology.get("roles") or {}).get(role) or (topology.get("forks") or {}).get(role)
        if entry is None:
            raise WorkerNotFoundError(role)
        return [str(port) for port in (entry["guard_port"], *entry["extra_ports"])]

    def _wait_for_pods(self, role: str, replicas: int, ports: list[str], timeout: float) -> list[Worker]:
        selector = naming.role_selector(self.release, role)

        nodes = self.inspector.nodes()  # once per wait: a NotReady node fails pods that still look Ready

        def check(pod: client.V1Pod) -> None:
            self._raise_if_failed(role, pod, nodes)

        try:
            pods = self.pods.wait(selector, all_ready(replicas), timeout, on_pod=check)
        except WaitTimedOut as timed_out:
            error = WorkerTimeoutError(role, timeout)
            raise attach_diagnosis(error, self.inspector.timeout_diagnosis(role, replicas, timed_out.pods)) from None
        by_index = {pod_index(p): p for p in pods.values() if p.metadata.deletion_timestamp is None}
        # From here on AReaL holds these workers: a restart or replacement of their pods loses its engines.
        self._ready_pods.update({p.metadata.name: p for p in by_index.values()})
        return [Worker(id=naming.worker_id(role, i), ip=by_index[i].status.pod_ip, worker_ports=list(ports))
                for i in range(replicas)]

    def _process_fork_workers(self, role: str, fork: dict[str, Any], timeout: float) -> list[Worker]:
        targets = self.get_workers(fork["target"], timeout)
        workers = []
        for index, (target, ports) in enumerate(zip(targets, fork.get("ports", []))):
            workers.append(Worker(id=naming.worker_id(role, index), ip=target.ip, worker_ports=[str(p) for p in ports]))
        if len(workers) != len(targets):
            raise WorkerFailedError(naming.worker_id(role, len(workers)), -1,
                                    f"forked role {role} records {len(workers)} forks for {len(targets)} target "
                                    f"workers of {fork['target']}: delete_workers('{role}') and fork again")
        return workers

    def _raise_if_failed(self, role: str, pod: client.V1Pod, nodes: list[client.V1Node] | None = None) -> None:
        """Fails the role at once when one of its pods has a fatal problem."""
        nodes = self.inspector.nodes() if nodes is None else nodes
        error = self.inspector.failure(role, pod, self._ready_pods.get(pod.metadata.name), nodes)
        if error is not None:
            raise error

    def _check_alive(self, worker: Worker) -> None:
        """Raises WorkerFailedError when the worker's pod is gone or has failed (used before RPC retries)."""
        role, index = naming.parse_worker_id(worker.id) or (worker.id, 0)
        pod_role = self._pod_role(role)
        pods, _ = self.pods.list(naming.role_selector(self.release, pod_role))
        pod = next((p for p in pods if pod_index(p) == index), None)
        if pod is None or pod.status.pod_ip != worker.ip:
            raise WorkerFailedError(worker.id, -1, f"the pod of worker {worker.id} ({worker.ip}) is gone "
                                                   f"or was replaced; its engines are lost")
        self._raise_if_failed(role, pod)

    def _pod_role(self, role: str) -> str:
        """The role whose pods run `role`'s workers (a process fork lives in its target's pods)."""
        fork = self._forks().get(role)
        if fork is not None and fork.get("mode", "process") == "process":
            return self._pod_role(fork["target"])
        return self._colocations().get(role, role)

    # --- delete ----------------------------------------------------------------------------------

    def delete_workers(self, role: str | None = None, reverse_order: bool = False) -> None:
        with self._lock:
            if role is None:
                self._delete_all(reverse_order)
                return
            if not self._exists(role):
                logger.warning("delete_workers(%r): no such role; nothing to delete", role)
                return
            self._require_managed("delete_workers")
            values = copy.deepcopy(self._values)
            dependents = [r for r, t in self._colocations().items() if t == role]
            dependents += [r for r, f in self._forks().items() if f["target"] == role]
            for dependent in dependents:  # forks and colocations go first, like AReaL's delete-all
                self.delete_workers(dependent, reverse_order)
                values = copy.deepcopy(self._values)
            if role in self._colocations():
                del values["colocations"][role]
                self._apply(values, f"remove colocation {role}", role)
            elif role in self._forks():
                self._destroy_engines([role])
                self._kill_process_forks(role, reverse_order)
                del values["forks"][role]
                self._apply(values, f"delete fork {role}", role)
            else:
                self._destroy_engines([role])
                if reverse_order:
                    self._scale_down_to_rank_zero(role)
                del values["roles"][role]
                self._apply(values, f"delete {role}", role)
                self._wait_gone(naming.role_selector(self.release, role))
            self._workers.pop(role, None)
            self._forget_pods(role)
            self._pending.discard(role)
            self._mark_good_if_settled()

    def _delete_all(self, reverse_order: bool) -> None:
        if not self._values and self._helm(self.releases.current(self.release)) is None:
            return
        self._require_managed("delete_workers")
        self._destroy_engines([*self._forks(), *self._roles()])
        for role in list(self._forks()):
            if self._forks()[role].get("mode", "process") == "process":
                self._kill_process_forks(role, reverse_order)
        if reverse_order:
            for role in list(self._roles()):
                self._scale_down_to_rank_zero(role)
        self._helm(self.releases.uninstall(self.release))
        self._wait_gone(naming.release_selector(self.release))
        self._values, self._workers, self._good_revision = {}, {}, None
        self._pending.clear()
        self._forget_pods()

    def _destroy_engines(self, roles: list[str]) -> None:
        """engine.destroy() on the known workers of `roles` before they go, bounded by destroy_timeout; a worker
        that does not answer is deleted anyway."""
        workers = [worker for role in roles for worker in self._workers.get(role, [])]
        failures = self.loop.run(self.guard.destroy_engines(workers, self.config.destroy_timeout))
        for worker_id, failure in failures.items():
            logger.info("destroy on %s before deletion: %s", worker_id, failure)

    def _scale_down_to_rank_zero(self, role: str) -> None:
        """Rank 0 owns the TCPStore: stop every other worker first, then rank 0 with the role."""
        statefulsets = self.apps.list_namespaced_stateful_set(
            self.namespace, label_selector=naming.role_selector(self.release, role)).items
        for statefulset in statefulsets:
            if (statefulset.spec.replicas or 0) > 1:
                self.apps.patch_namespaced_stateful_set_scale(statefulset.metadata.name, self.namespace,
                                                              {"spec": {"replicas": 1}})
        self.pods.wait(naming.role_selector(self.release, role),
                       lambda pods: all(pod_index(p) == 0 for p in pods.values()), self.config.helm_timeout)

    def _wait_gone(self, selector: str) -> None:
        try:
            self.pods.wait(selector, none_left, self.config.helm_timeout)
        except WaitTimedOut as timed_out:
            names = ", ".join(p.metadata.name for p in timed_out.pods.values())
            logger.warning("pods still terminating after %ss: %s", self.config.helm_timeout, names)

    def _kill_process_forks(self, role: str, reverse_order: bool) -> None:
        fork = self._forks()[role]
        try:
            targets = self._workers.get(fork["target"]) or self.get_workers(fork["target"], timeout=5.0)
        except (WorkerTimeoutError, WorkerFailedError):
            return  # the target's pods are gone or down, and their forked children with them
        indices = list(range(len(targets)))
        if reverse_order:
            indices.reverse()
        self.loop.run(forks.kill_forks(self.guard, role, targets, indices, sequential=reverse_order))

    # --- fork ------------------------------------------------------------------------------------

    def fork_workers(self, role: str, target_role: str, command: str | None = None) -> list[str]:
        with self._lock:
            self._require_managed("fork_workers")
            if target_role not in self._roles():
                raise WorkerNotFoundError(f"Target role '{target_role}' not found for fork")
            if self._exists(role):
                raise WorkerCreationError(role, "Worker group already exists",
                                          f"Use delete_workers('{role}') first to remove existing workers")
            problem = naming.role_problem(role)
            if problem:
                raise WorkerCreationError(role, "Invalid role name", problem)
            if self.config.fork_mode == "pod":
                return self._fork_pods(role, target_role, command)
            return self._fork_processes(role, target_role, command)

    def _fork_processes(self, role: str, target_role: str, command: str | None) -> list[str]:
        targets = self.get_workers(target_role)
        module = command or self.config.fork_module
        plan = forks.ForkPlan(role=role, module=module, python=self.config.python_executable,
                              experiment=self.experiment_name, trial=self.trial_name,
                              worker_flags=self._worker_flags(role),
                              port_count=len(targets[0].worker_ports) if targets else 1,
                              ready_timeout=self.config.fork_ready_timeout)
        results = self.loop.run(forks.fork_all(self.guard, plan, targets, self._fork_exit_probe(target_role)))
        failed = [i for i, result in enumerate(results) if isinstance(result, BaseException)]
        if failed:
            started = [i for i in range(len(targets)) if i not in failed]
            self.loop.run(forks.kill_forks(self.guard, role, targets, started))
            reasons = "\n".join(f"worker {i}: {results[i]}" for i in failed[:4])
            raise WorkerCreationError(role, f"Failed to fork {len(failed)} out of {len(targets)} workers",
                                      f"Failed indices: {failed}\n{reasons}") from results[failed[0]]
        values = copy.deepcopy(self._values)
        values.setdefault("forks", {})[role] = {"target": target_role, "mode": "process", "command": [module],
                                                "ports": list(results)}
        try:
            self._apply(values, f"fork {role} from {target_role} ({len(targets)} processes)", role)
        except WorkerCreationError:
            self.loop.run(forks.kill_forks(self.guard, role, targets, range(len(targets))))
            raise
        workers = [Worker(id=naming.worker_id(role, i), ip=t.ip, worker_ports=[str(p) for p in results[i]])
                   for i, t in enumerate(targets)]
        self._workers[role] = workers
        self._mark_good_if_settled()
        if self.exp_config is not None:
            self._configure(workers)
        return [w.id for w in workers]

    def _worker_flags(self, role: str) -> tuple[str, ...]:
        """The name-resolve and fileroot flags the chart gave the release's pods (from its topology ConfigMap)."""
        flags = self.inspector.topology().get("worker_flags")
        if flags is None:
            raise WorkerCreationError(role, "Cannot fork: the release's chart records no worker flags",
                                      f"release {self.release} was installed by an older areal-workers chart; "
                                      f"upgrade it to this version's chart")
        return tuple(str(flag) for flag in flags)

    def _fork_exit_probe(self, target_role: str) -> forks.ForkExitProbe:
        """Finds a fork's exit marker in the log of the target pod that runs it."""
        pods, _ = self.pods.list(naming.role_selector(self.release, self._pod_role(target_role)))
        by_index = {pod_index(pod): pod for pod in pods}

        async def probe(index: int, marker: str) -> forks.ForkExit | None:
            pod = by_index.get(index)
            if pod is None:
                return None
            lines = await asyncio.to_thread(self.inspector.log_lines, pod, FORK_LOG_LINES)
            return forks.parse_exit(lines, marker)

        return probe

    def _fork_pods(self, role: str, target_role: str, command: str | None) -> list[str]:
        values = copy.deepcopy(self._values)
        fork: dict[str, Any] = {"target": target_role, "mode": "pod"}
        if command:
            fork["command"] = [self.config.python_executable, "-m", command]
        values.setdefault("forks", {})[role] = fork
        self._apply(values, f"fork {role} from {target_role} (pods)", role, (role,))
        self._pending.add(role)
        try:
            workers = self.get_workers(role)  # rolls the release back on a failure
        except WorkerTimeoutError as error:  # a fork that does not come up is undone, as AReaL's forks are
            self._roll_back(error)
            raise WorkerCreationError(role, f"Failed to fork {role} from {target_role}", str(error)) from error
        except WorkerFailedError as error:
            raise WorkerCreationError(role, f"Failed to fork {role} from {target_role}", str(error)) from error
        return [w.id for w in workers]

    # --- engines ---------------------------------------------------------------------------------

    def _worker(self, worker_id: str) -> Worker:
        parsed = naming.parse_worker_id(worker_id)
        if parsed is None:
            raise WorkerNotFoundError(worker_id)
        role, index = parsed
        workers = self._workers.get(role)  # known workers are answered without the lock a change holds
        if workers is None and self._exists(role):
            workers = self.get_workers(role, timeout=self.config.ready_timeout)
        if not workers or index >= len(workers):
            raise WorkerNotFoundError(worker_id)
        return workers[index]

    async def create_engine(self, worker_id: str, engine: str, engine_name: str | None = None,
                            *args: Any, **kwargs: Any) -> Any:
        worker = await asyncio.to_thread(self._worker, worker_id)
        await asyncio.to_thread(self._check_alive, worker)
        name = worker_id if engine_name is None else engine_name
        return await self.guard.create_engine(worker, engine, name, serialize_value(list(args)),
                                              serialize_value(kwargs))

    async def set_worker_env(self, worker_id: str, env: dict[str, str]) -> None:
        worker = await asyncio.to_thread(self._worker, worker_id)
        await self.guard.set_env(worker, env)

    def call_engine(self, worker_id: str, method: str, engine_name: str | None = None, *args: Any,
                    rpc_meta: dict[str, Any] | None = None, http_timeout: float = 7200.0, max_retries: int = 3,
                    retry_delay: float = 1.0, **kwargs: Any) -> Any:
        worker = self._worker(worker_id)
        name = worker_id if engine_name is None else engine_name  # AReaL's default: the worker's own engine
        result = self.guard.call(worker, method, name, serialize_value(list(args)), serialize_value(kwargs),
                                 rpc_meta, http_timeout=http_timeout, max_retries=max_retries, retry_delay=retry_delay)
        return deserialize_value(result)

    async def async_call_engine(self, worker_id: str, method: str, engine_name: str | None = None, *args: Any,
                                rpc_meta: dict[str, Any] | None = None, http_timeout: float = 7200.0,
                                max_retries: int = 3, retry_delay: float = 1.0, **kwargs: Any) -> Any:
        worker = await asyncio.to_thread(self._worker, worker_id)
        name = worker_id if engine_name is None else engine_name
        result = await self.guard.async_call(worker, method, name, serialize_value(list(args)),
                                             serialize_value(kwargs), rpc_meta, http_timeout=http_timeout,
                                             max_retries=max_retries, retry_delay=retry_delay)
        return deserialize_value(result)

    # --- introspection ---------------------------------------------------------------------------

    def history(self) -> list[dict[str, Any]]:
        """The release's revisions (number, status, description), oldest first."""
        return [{"revision": r.revision, "status": r.status.value, "description": r.description}
                for r in self._helm(self.releases.history(self.release))]

    @property
    def closed(self) -> bool:
        return self.loop.loop.is_closed()

    def close(self) -> None:
        """Releases HTTP sessions and the helper loop; the workers keep running. Idempotent."""
        if self.closed:
            return
        self.guard.close()
        self.loop.run(self.guard.aclose())  # the async session of the helper loop (used by forks)
        self.loop.close()

