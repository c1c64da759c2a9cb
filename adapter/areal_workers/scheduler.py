"""KubernetesScheduler: AReaL's scheduler contract over Helm releases of charts/areal-workers.

One release per (experiment, trial); every create / scale / fork / delete is one `helm upgrade`, so
`helm history` is the log of the topology and `helm rollback` its undo. The scheduler validates a request, takes
its lock and delegates: the next values come from the release model (release/model.py), the revision and the
rollback policy are the driver's (orchestration/driver.py), waits and liveness are the worker finder's
(orchestration/finder.py), forks are orchestration/fork_operations.py's.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any

from . import naming
from .areal_types import AREAL_SCHEDULER_BASE, Job, SchedulingSpec, Worker
from .config import KubernetesSchedulerConfig
from .errors import (
    InvalidRequestError,
    InvalidSchedulerSetupError,
    WorkerCreationError,
    WorkerFailedError,
    WorkerNotFoundError,
    WorkerTimeoutError,
)
from .guard.wire_format import deserialize_value, serialize_value
from .orchestration.driver import ReleaseDriver
from .orchestration.finder import WorkerFinder
from .orchestration.fork_operations import ForkOperations
from .pods.held_workers import HeldWorkers
from .release import values as job_values
from .runtime import backend as backend_module
from .runtime.loop_thread import LoopThread

logger = logging.getLogger(__name__)


class KubernetesScheduler(AREAL_SCHEDULER_BASE):  # type: ignore[misc, valid-type]
    """AReaL's Scheduler on Kubernetes. Construct it like AReaL's schedulers: `KubernetesScheduler(exp_config=cfg)`
    (experiment, trial, fileroot and name_resolve come from it), plus an optional KubernetesSchedulerConfig
    (default: from the AREAL_K8S_* environment variables). `connect` builds what it talks to (backend.connect:
    the cluster of the config's kubeconfig)."""

    def __init__(
        self,
        exp_config: Any = None,
        *,
        config: KubernetesSchedulerConfig | None = None,
        experiment_name: str | None = None,
        trial_name: str | None = None,
        connect: backend_module.Connect = backend_module.connect,
    ) -> None:
        self.config = config or KubernetesSchedulerConfig.from_env()
        self.exp_config = exp_config
        # As in AReaL's schedulers, the experiment config wins over the explicit names.
        self.experiment_name = getattr(exp_config, "experiment_name", None) or experiment_name
        self.trial_name = getattr(exp_config, "trial_name", None) or trial_name
        if not self.experiment_name or not self.trial_name:
            raise InvalidSchedulerSetupError(
                "experiment_name and trial_name must be provided: pass exp_config (with experiment_name and "
                "trial_name) or experiment_name= and trial_name="
            )
        for what, name in (("experiment_name", self.experiment_name), ("trial_name", self.trial_name)):
            problem = naming.path_component_problem(what, str(name))
            if problem is not None:  # before the cluster is contacted: nothing is written
                raise InvalidSchedulerSetupError(
                    f"{problem} (it names directories of name_resolve's records and the fileroot, as in AReaL's "
                    f"schedulers)"
                )
        self.release = self.config.release_name or naming.release_name(self.experiment_name, self.trial_name)
        self.namespace = self.config.namespace
        self.loop = LoopThread(f"areal-workers-{self.release}")
        parts = None
        try:
            parts = connect(self.config, self.release, self._check_alive)
            parts.check_access()
            self.guard = parts.guard
            self.held = HeldWorkers()
            self.driver = ReleaseDriver(
                self.release, self.config, parts.releases, parts.inspector, parts.pods, parts.statefulsets, self.loop
            )
            self.finder = WorkerFinder(self.driver, parts.pods, parts.inspector, self.held)
            self.guard.unreachable_note = self.finder.unreachable_note
            self.forks = ForkOperations(
                self.driver,
                self.finder,
                self.guard,
                self.loop,
                self.held,
                parts.inspector,
                self.config,
                self.experiment_name,
                self.trial_name,
            )
            self._lock = threading.RLock()
            self.driver.adopt()
            self.lease = parts.lease
            if self.driver.model.installed:  # a restarted trainer holds its release's Lease from the start
                self._hold_lease()
        except BaseException:
            if parts is not None:
                parts.guard.close()
            self.loop.close()
            raise

    def _hold_lease(self) -> None:
        """Takes the trainer's Lease once there is a release for it to keep alive (adopted, or about to be
        installed): a scheduler that never creates workers leaves nothing behind."""
        if self.lease is not None and not self.lease.running:
            self.lease.start()

    def _require_lease(self) -> None:
        """Once the Lease this scheduler held is lost (reaped, taken over) every call raises LeaseLostError: its
        release is no longer its to change, nor its workers to call."""
        if self.lease is not None:
            self.lease.require_held()

    def _drop_lease(self) -> None:
        """After the release is gone (uninstalled, or a first install that failed)."""
        if self.lease is not None:
            self.lease.stop()
            self.lease.delete()

    @property
    def n_gpus_per_node(self) -> int:
        cluster = getattr(self.exp_config, "cluster", None)
        return int(getattr(cluster, "n_gpus_per_node", None) or self.config.n_gpus_per_node)

    # --- validation ------------------------------------------------------------------------------

    def _require_managed(self, operation: str) -> None:
        if self.config.ownership == "external":
            raise WorkerCreationError(
                self.release,
                f"{operation} is not allowed on an external release",
                f"release {self.release!r} is managed by someone else (helm/Argo CD): change roles in its values "
                f"there; this scheduler only discovers and calls its workers",
            )

    def _require_new(self, role: str) -> None:
        if self.driver.model.exists(role):
            raise WorkerCreationError(
                role, "Worker group already exists", f"Use delete_workers('{role}') first to remove existing workers"
            )

    def _require_same_replicas(self, role: str, replicas: int) -> None:
        """Colocated and forked roles pin their target's replica count."""
        dependents = self.driver.model.dependents(role)
        if dependents and replicas != self.driver.model.replicas(role):
            raise WorkerCreationError(
                role,
                "Replica count mismatch",
                f"roles {dependents} are colocated with {role} and must keep its replica "
                f"count; delete them first, scale, then colocate them again",
            )

    def _spec(self, job: Job) -> SchedulingSpec:
        try:
            spec = job_values.resolve_spec(job)
            job_values.check_spec(job.role, spec)
        except job_values.TopologyError as error:
            raise WorkerCreationError(error.worker_key, error.reason, error.details) from None
        return spec

    def _role_values(self, role: str, spec: SchedulingSpec, replicas: int) -> dict[str, Any]:
        try:
            base = job_values.base_values(
                self.config,
                self.experiment_name,
                self.trial_name,
                job_values.cluster_values(self.exp_config),
                offload=bool(getattr(self.exp_config, "enable_offload", False)),
            )
        except job_values.TopologyError as error:
            raise WorkerCreationError(error.worker_key, error.reason, error.details) from None
        return self.driver.model.with_role(role, job_values.role_values(spec, replicas, self.config), base)

    def dry_run(self, job: Job) -> list[dict[str, Any]]:
        """The manifests create_workers(job) would apply, without touching the cluster."""
        with self._lock:
            values = self._role_values(job.role, self._spec(job), job.replicas)
            return self.driver.helm(self.driver.releases.render(self.release, values))

    # --- create, scale, update -------------------------------------------------------------------

    def create_workers(self, job: Job, *args: Any, **kwargs: Any) -> list[str]:
        with self._lock:
            self._require_lease()
            self._require_managed("create_workers")
            spec = self._spec(job)
            role, replicas = job.role, job.replicas
            self._require_new(role)
            strategy = job.scheduling_strategy
            if strategy.type == "colocation":
                return self._colocate(role, replicas, strategy.target, strategy.fork)
            if strategy.type != "separation":
                raise InvalidRequestError(
                    role,
                    "Invalid strategy",
                    f"scheduling_strategy.type must be 'separation' or 'colocation', got {strategy.type!r}",
                )
            values = self._role_values(role, spec, replicas)
            first = not self.driver.model.installed
            if first:
                self._hold_lease()
            try:
                self.driver.apply(values, f"create {role}: {replicas} worker(s)", role, (role,))
            except BaseException:
                if first and not self.driver.model.installed:
                    self._drop_lease()
                raise
            if self.exp_config is not None:  # AReaL's schedulers wait for the workers and configure them here
                self._configure(self.get_workers(role))
            return [naming.worker_id(role, i) for i in range(replicas)]

    def scale_workers(self, role: str, replicas: int) -> list[str]:
        """Changes a role's replica count in one helm revision; existing workers keep running untouched."""
        with self._lock:
            self._require_lease()
            self._require_managed("scale_workers")
            model = self.driver.model
            if role not in model.roles:
                raise WorkerNotFoundError(role)
            if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
                raise WorkerCreationError(
                    role,
                    "Invalid configuration",
                    f"replicas must be an integer greater than 0, got {replicas!r}; "
                    f"delete_workers('{role}') removes a role",
                )
            self._require_same_replicas(role, replicas)
            current = model.replicas(role)
            if replicas != current:
                self.driver.apply(
                    model.with_replicas(role, replicas),
                    f"scale {role}: {current} -> {replicas} worker(s)",
                    role,
                    (role,),
                )
            return [naming.worker_id(role, i) for i in range(replicas)]

    def update_workers(self, job: Job) -> list[str]:
        """Replaces an existing role's SchedulingSpec (image, command, resources, env, replicas) in one helm
        revision; the StatefulSet rolls its pods. If the new pods fail, get_workers rolls the release back."""
        with self._lock:
            self._require_lease()
            self._require_managed("update_workers")
            if job.role not in self.driver.model.roles:
                raise WorkerNotFoundError(job.role)
            spec = self._spec(job)
            self._require_same_replicas(job.role, job.replicas)
            values = self._role_values(job.role, spec, job.replicas)
            self.driver.apply(values, f"update {job.role}: {job.replicas} worker(s)", job.role, (job.role,))
            return [naming.worker_id(job.role, i) for i in range(job.replicas)]

    def _colocate(self, role: str, replicas: int, target: str | None, fork: bool) -> list[str]:
        model = self.driver.model
        if not target:
            raise WorkerCreationError(
                role, "Invalid strategy", "Colocation strategy requires target role to be specified"
            )
        if target not in model.roles and target not in model.forks:
            raise WorkerNotFoundError(f"Cannot colocate with role '{target}' - role not found")
        target_replicas = model.replicas(target)
        if replicas != target_replicas:
            raise WorkerCreationError(
                role,
                "Replica count mismatch",
                f"Colocated role must have same replica count as target ({replicas} != {target_replicas})",
            )
        if fork:
            return self.fork_workers(role, target)
        self.driver.apply(model.with_colocation(role, target), f"colocate {role} on {target}", role)
        self.driver.settle()
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
        self._require_lease()
        timeout = self.config.ready_timeout if timeout is None else timeout
        model = self.driver.model
        if not model.exists(role):
            raise WorkerNotFoundError(role)
        if role in model.colocations:
            return self.get_workers(model.colocations[role], timeout)
        if model.is_process_fork(role):
            return self.finder.process_fork_workers(role, self.get_workers(model.forks[role]["target"], timeout))
        try:
            workers = self.finder.wait_for_pods(role, model, timeout)
        except WorkerFailedError as error:
            with self._lock:
                # A rollback undoes a change whose workers never came up; workers AReaL already holds that fail
                # later (their node gone, an OOM) are reported, and the release stays.
                held = self.finder.known_workers(role) is not None
                if self.config.ownership == "managed" and not held and role in self.driver.pending():
                    self.driver.roll_back(error)
            raise
        with self._lock:
            if self.driver.model.revision == model.revision:  # nothing changed while we waited
                self.driver.confirm_ready(role)
        return workers

    def _check_alive(self, worker: Worker) -> None:
        self.finder.check_alive(worker)

    # --- delete ----------------------------------------------------------------------------------

    def delete_workers(self, role: str | None = None, reverse_order: bool = False) -> None:
        with self._lock:
            self._require_lease()
            if role is None:
                self._delete_all(reverse_order)
                return
            model = self.driver.model
            if not model.exists(role):
                logger.warning("delete_workers(%r): no such role; nothing to delete", role)
                return
            self._require_managed("delete_workers")
            for dependent in model.dependents(role):  # forks and colocations go first, like AReaL's delete-all
                self.delete_workers(dependent, reverse_order)
            model = self.driver.model
            if role in model.colocations:
                self.driver.apply(model.without(role), f"remove colocation {role}", role)
            elif role in model.forks:
                self._destroy_engines([role])
                if model.is_process_fork(role):
                    self.forks.kill(role, reverse_order)
                self.driver.apply(model.without(role), f"delete fork {role}", role)
            else:
                self._destroy_engines([role])
                if reverse_order:
                    self.driver.scale_down_to_rank_zero(role)
                self.driver.apply(model.without(role), f"delete {role}", role)
                self.driver.wait_gone(naming.role_selector(self.release, role))
            self.driver.settle()

    def _delete_all(self, reverse_order: bool) -> None:
        model = self.driver.model
        if not model.installed and self.driver.reload().revision is None:
            return
        model = self.driver.model
        self._require_managed("delete_workers")
        self._destroy_engines([*model.forks, *model.roles])
        for role in model.forks:
            if model.is_process_fork(role):
                self.forks.kill(role, reverse_order)
        if reverse_order:
            for role in model.roles:
                self.driver.scale_down_to_rank_zero(role)
        self.driver.uninstall()
        self._drop_lease()

    def _destroy_engines(self, roles: list[str]) -> None:
        """engine.destroy() on the known workers of `roles` before they go, bounded by destroy_timeout; a worker
        that does not answer is deleted anyway."""
        workers = [worker for role in roles for worker in self.finder.known_workers(role) or []]
        failures = self.loop.run(self.guard.destroy_engines(workers, self.config.destroy_timeout))
        for worker_id, failure in failures.items():
            logger.info("destroy on %s before deletion: %s", worker_id, failure)

    # --- fork ------------------------------------------------------------------------------------

    def fork_workers(self, role: str, target_role: str, command: str | None = None) -> list[str]:
        with self._lock:
            self._require_lease()
            self._require_managed("fork_workers")
            if target_role not in self.driver.model.roles:
                raise WorkerNotFoundError(f"Target role '{target_role}' not found for fork")
            self._require_new(role)
            problem = naming.role_problem(role)
            if problem:
                raise WorkerCreationError(role, "Invalid role name", problem)
            if self.config.fork_mode == "pod":
                self.forks.fork_pods(role, target_role, command)
                return [w.id for w in self._wait_for_fork_pods(role, target_role)]
            workers = self.forks.fork_processes(role, target_role, self.get_workers(target_role), command)
            if self.exp_config is not None:
                self._configure(workers)
            return [w.id for w in workers]

    def _wait_for_fork_pods(self, role: str, target_role: str) -> list[Worker]:
        """A pod-mode fork's workers; one that does not come up is undone, as AReaL's forks are."""
        try:
            return self.get_workers(role)  # a fatal failure rolls the release back
        except WorkerFailedError as error:
            raise WorkerCreationError(role, f"Failed to fork {role} from {target_role}", str(error)) from error
        except WorkerTimeoutError as error:
            self.driver.roll_back(error)
            raise WorkerCreationError(role, f"Failed to fork {role} from {target_role}", str(error)) from error

    # --- engines ---------------------------------------------------------------------------------

    def _worker(self, worker_id: str) -> Worker:
        self._require_lease()
        parsed = naming.parse_worker_id(worker_id)
        if parsed is None:
            raise WorkerNotFoundError(worker_id)
        role, index = parsed
        workers = self.finder.known_workers(role)  # answered without the lock a change holds
        if workers is None and self.driver.model.exists(role):
            workers = self.get_workers(role, timeout=self.config.ready_timeout)
        if not workers or index >= len(workers):
            raise WorkerNotFoundError(worker_id)
        return workers[index]

    async def _aworker(self, worker_id: str) -> Worker:
        """_worker for coroutines: a known worker is a dictionary read on the caller's loop; only a wait for
        workers not known yet goes to a thread (a thread hop per call costs more than the call's HTTP)."""
        self._require_lease()
        parsed = naming.parse_worker_id(worker_id)
        if parsed is not None:
            workers = self.finder.known_workers(parsed[0])
            if workers is not None and parsed[1] < len(workers):
                return workers[parsed[1]]
        return await asyncio.to_thread(self._worker, worker_id)

    async def create_engine(
        self, worker_id: str, engine: str, engine_name: str | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        worker = await self._aworker(worker_id)
        await asyncio.to_thread(self._check_alive, worker)
        name = worker_id if engine_name is None else engine_name
        return await self.guard.create_engine(
            worker, engine, name, serialize_value(list(args)), serialize_value(kwargs)
        )

    async def set_worker_env(self, worker_id: str, env: dict[str, str]) -> None:
        worker = await self._aworker(worker_id)
        await self.guard.set_env(worker, env)

    def call_engine(
        self,
        worker_id: str,
        method: str,
        engine_name: str | None = None,
        *args: Any,
        rpc_meta: dict[str, Any] | None = None,
        http_timeout: float = 7200.0,
        max_retries: int = 3,
        retry_delay: float = 1.0,
        **kwargs: Any,
    ) -> Any:
        worker = self._worker(worker_id)
        name = worker_id if engine_name is None else engine_name  # AReaL's default: the worker's own engine
        result = self.guard.call(
            worker,
            method,
            name,
            serialize_value(list(args)),
            serialize_value(kwargs),
            rpc_meta,
            http_timeout=http_timeout,
            max_retries=max_retries,
            retry_delay=retry_delay,
        )
        return deserialize_value(result)

    async def async_call_engine(
        self,
        worker_id: str,
        method: str,
        engine_name: str | None = None,
        *args: Any,
        rpc_meta: dict[str, Any] | None = None,
        http_timeout: float = 7200.0,
        max_retries: int = 3,
        retry_delay: float = 1.0,
        **kwargs: Any,
    ) -> Any:
        worker = await self._aworker(worker_id)
        name = worker_id if engine_name is None else engine_name
        result = await self.guard.async_call(
            worker,
            method,
            name,
            serialize_value(list(args)),
            serialize_value(kwargs),
            rpc_meta,
            http_timeout=http_timeout,
            max_retries=max_retries,
            retry_delay=retry_delay,
        )
        return deserialize_value(result)

    # --- introspection ---------------------------------------------------------------------------

    def history(self) -> list[dict[str, Any]]:
        """The release's revisions (number, status, description), oldest first."""
        return [
            {"revision": r.revision, "status": r.status.value, "description": r.description}
            for r in self.driver.helm(self.driver.releases.history(self.release))
        ]

    @property
    def closed(self) -> bool:
        return self.loop.loop.is_closed()

    def close(self) -> None:
        """Releases HTTP sessions and the helper loop; the workers keep running. Idempotent."""
        if self.closed:
            return
        if self.lease is not None:  # a release left installed is reaped once the lease is older than its grace
            self.lease.stop()
        self.guard.close()
        self.loop.run(self.guard.aclose())  # the async session of the helper loop (used by forks)
        self.loop.close()
