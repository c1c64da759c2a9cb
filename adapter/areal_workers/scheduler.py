"""KubernetesScheduler: AReaL's scheduler contract over Helm releases of charts/areal-workers.

One release per (experiment, trial); every create / scale / fork / delete is one `helm upgrade`, so
`helm history` is the log of the topology and `helm rollback` its undo. The scheduler validates a request, takes
its lock and delegates: the next values come from the release model (release/model.py), the revision and the
rollback policy are the driver's (orchestration/driver.py), waits and liveness are the worker finder's
(orchestration/finder.py), forks are orchestration/fork_operations.py's, the calls on workers
orchestration/worker_calls.py's and the order of deletions orchestration/deletion.py's; what a request must satisfy
is release/request_checks.py's.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from . import log_format, naming
from .areal_types import AREAL_SCHEDULER_BASE, Job, SchedulingSpec, Worker
from .config import KubernetesSchedulerConfig
from .errors import (
    InvalidSchedulerSetupError,
    WorkerCreationError,
    WorkerFailedError,
    WorkerNotFoundError,
    WorkerTimeoutError,
)
from .guard.client import CallOptions
from .observer import NO_OBSERVER, Observer, timed
from .orchestration.decision_events import DecisionEvents
from .orchestration.deletion import Deletion
from .orchestration.driver import ReleaseDriver
from .orchestration.finder import WorkerFinder
from .orchestration.fork_operations import ForkOperations
from .orchestration.reclaim import Reclaim
from .orchestration.worker_calls import WorkerCalls
from .pods.held_workers import HeldWorkers
from .release import request_checks, values as job_values
from .release.model import image_text, role_changes
from .runtime import backend as backend_module
from .runtime.loop_thread import LoopThread
from .trainer_address import advertise

logger = logging.getLogger(__name__)


class KubernetesScheduler(AREAL_SCHEDULER_BASE):
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
        experiment_name = getattr(exp_config, "experiment_name", None) or experiment_name
        trial_name = getattr(exp_config, "trial_name", None) or trial_name
        if not experiment_name or not trial_name:
            raise InvalidSchedulerSetupError(
                "experiment_name and trial_name must be provided: pass exp_config (with experiment_name and "
                "trial_name) or experiment_name= and trial_name="
            )
        self.experiment_name: str = experiment_name
        self.trial_name: str = trial_name
        for what, name in (("experiment_name", self.experiment_name), ("trial_name", self.trial_name)):
            problem = naming.path_component_problem(what, str(name))
            if problem is not None:  # before the cluster is contacted: nothing is written
                raise InvalidSchedulerSetupError(
                    f"{problem} (it names directories of name_resolve's records and the fileroot, as in AReaL's "
                    f"schedulers)"
                )
        if self.config.trainer_address is not None:  # before the cluster is contacted: a refusal changes nothing
            advertise(self.config.trainer_address)
        self.release = self.config.release_name or naming.release_name(self.experiment_name, self.trial_name)
        self.namespace = self.config.namespace
        log_format.apply(self.config.log_format, {"release": self.release, "namespace": self.namespace})
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
            self.driver.events = DecisionEvents(parts.events, self.release)
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
            self.calls = WorkerCalls(self.driver, self.finder, self.guard, self.loop, self.config, self._get_workers)
            self.deletion = Deletion(self.driver, self.forks, self.calls)
            self.reclaim = Reclaim(self.driver, self.guard, self.loop, self.held)
            self._lock = threading.RLock()
            self.lease = parts.lease
            self.observer = self._observe()
            # A restarted trainer holds its release's Lease from the start, taken before a pending operation is
            # recovered: a live controller's operation in flight is not rolled back by a newcomer it refuses.
            self.driver.adopt(before_recovery=self._hold_lease)
            if not self.driver.model.installed and self.lease is not None and self.lease.running:
                self._drop_lease()  # the recovery uninstalled a release whose first install never finished
            self.reclaim.adopted()
        except BaseException:
            if parts is not None:
                parts.guard.close()
            getattr(self, "observer", NO_OBSERVER).close()
            self.loop.close()
            raise

    def _observe(self) -> Observer:
        """The metrics this scheduler serves (metrics_address), counted from the driver's and the guard's hooks."""
        if self.config.metrics_address is None:
            return NO_OBSERVER
        from .runtime import metrics  # prometheus-client (the metrics extra): imported only when asked for

        observer = metrics.start(self.config.metrics_address, self.release, self.driver, self.lease)
        self.driver.observer = self.guard.observer = observer
        return observer

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

    def _confirm_lease(self) -> None:
        """Before a change of the release: the Lease confirmed with the apiserver when its last renewal is stale."""
        if self.lease is not None:
            self.lease.confirm()

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
        request_checks.require_managed(self.config.ownership, self.release, operation)

    def _role_values(self, role: str, spec: SchedulingSpec, replicas: int) -> dict[str, Any]:
        with request_checks.as_creation_error():
            base = job_values.base_values(
                self.config,
                self.experiment_name,
                self.trial_name,
                job_values.cluster_values(self.exp_config),
                offload=bool(getattr(self.exp_config, "enable_offload", False)),
            )
        return self.driver.model.with_role(role, job_values.role_values(spec, replicas, self.config), base)

    def dry_run(self, job: Job) -> list[dict[str, Any]]:
        """The manifests create_workers(job) would apply, without touching the cluster."""
        with self._lock:
            values = self._role_values(job.role, request_checks.spec(job), job.replicas)
            return self.driver.helm(self.driver.releases.render(self.release, values))

    # --- create, scale, update -------------------------------------------------------------------

    @timed("create_workers")
    def create_workers(self, job: Job, *args: Any, **kwargs: Any) -> list[str]:
        with self._lock:
            self._confirm_lease()
            self._require_managed("create_workers")
            spec = request_checks.spec(job)
            role, replicas = job.role, job.replicas
            strategy = job.scheduling_strategy
            fork_kind = f"{self.config.fork_mode} fork"
            wanted = "role" if strategy.type == "separation" else fork_kind if strategy.fork else "colocation"
            inherited = self.reclaim.claim(role, wanted, self.delete_workers)
            if not inherited:
                request_checks.require_new(self.driver.model, role)
            request_checks.require_strategy(role, strategy.type)
            if strategy.type == "colocation":
                return self._colocate(role, replicas, strategy.target, strategy.fork)
            values = self._role_values(role, spec, replicas)
            if inherited:
                self.reclaim.recreate(role, values, f"re-create {role} for a new controller: {replicas} worker(s)")
            else:
                self._install_role(role, replicas, values)
            if self.exp_config is not None:  # AReaL's schedulers wait for the workers and configure them here
                self.calls.configure(self._get_workers(role), self.exp_config)
            return [naming.worker_id(role, i) for i in range(replicas)]

    def _install_role(self, role: str, replicas: int, values: dict[str, Any]) -> None:
        first = not self.driver.model.installed
        if first:
            self._hold_lease()
        try:
            self.driver.apply(values, f"create {role}: {replicas} worker(s)", role, (role,))
        except BaseException:
            if first and not self.driver.model.installed:
                self._drop_lease()
            raise

    @timed("scale_workers")
    def scale_workers(self, role: str, replicas: int) -> list[str]:
        """Changes a role's replica count in one helm revision; existing workers keep running untouched."""
        with self._lock:
            self._confirm_lease()
            self._require_managed("scale_workers")
            model = self.driver.model
            request_checks.require_role(model, role)
            request_checks.require_replica_count(role, replicas)
            request_checks.require_same_replicas(model, role, replicas)
            current = model.replicas(role)
            if replicas != current:
                self.driver.apply(
                    model.with_replicas(role, replicas),
                    f"scale {role}: {current} -> {replicas} worker(s)",
                    role,
                    (role,),
                )
            return [naming.worker_id(role, i) for i in range(replicas)]

    @timed("update_workers")
    def update_workers(self, job: Job) -> list[str]:
        """Replaces an existing role's SchedulingSpec (image, command, resources, env, replicas) in one helm
        revision; the StatefulSet rolls its pods. If the new pods fail, get_workers rolls the release back."""
        with self._lock:
            self._confirm_lease()
            self._require_managed("update_workers")
            request_checks.require_role(self.driver.model, job.role)
            spec = request_checks.spec(job)
            request_checks.require_same_replicas(self.driver.model, job.role, job.replicas)
            values = self._role_values(job.role, spec, job.replicas)
            before = (self.driver.model.values.get("roles") or {}).get(job.role) or {}
            release_image = image_text(values.get("image"))
            changes = role_changes(before, values["roles"][job.role], release_image) or ["no change"]
            self.driver.apply(values, f"update {job.role}: {', '.join(changes)}", job.role, (job.role,))
            return [naming.worker_id(job.role, i) for i in range(job.replicas)]

    def _colocate(self, role: str, replicas: int, target: str | None, fork: bool) -> list[str]:
        model = self.driver.model
        target = request_checks.require_colocation_target(model, role, replicas, target)
        if fork:
            return self.fork_workers(role, target)
        if model.colocations.get(role) != target:  # an earlier controller's same colocation is kept as it is
            self.driver.apply(model.with_colocation(role, target), f"colocate {role} on {target}", role)
            self.driver.settle()
        self.reclaim.inherited.discard(role)
        return [naming.worker_id(target, i) for i in range(replicas)]

    # --- discover and wait -----------------------------------------------------------------------

    @timed("get_workers")
    def get_workers(self, role: str, timeout: float | None = None) -> list[Worker]:
        """Waits until every worker of `role` answers. The wait holds no lock: engine calls, and waits for other
        roles, go on meanwhile. A fatal diagnosis (WorkerFailedError) rolls a pending change back; a time-out
        changes nothing, so a retry with a longer timeout finds the role as it was (AReaL's behaviour)."""
        return self._get_workers(role, timeout)

    def _get_workers(self, role: str, timeout: float | None = None) -> list[Worker]:
        """get_workers without its metrics: the scheduler's own waits are not AReaL's (a colocated role's one
        call is one sample, under the role AReaL asked for)."""
        self._require_lease()
        timeout = self.config.ready_timeout if timeout is None else timeout
        model = self.driver.model
        if not model.exists(role):
            raise WorkerNotFoundError(role)
        if role in model.colocations:
            return self._get_workers(model.colocations[role], timeout)
        if model.is_process_fork(role):
            return self.finder.process_fork_workers(role, self._get_workers(model.forks[role]["target"], timeout))
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
                self.driver.confirm_ready(role, self.held.ready_pods(role, self.driver.epoch(role)))
        return workers

    def _check_alive(self, worker: Worker) -> None:
        self.finder.check_alive(worker)

    # --- delete ----------------------------------------------------------------------------------

    def delete_workers(self, role: str | None = None, reverse_order: bool = False) -> None:
        with self._lock:
            self._confirm_lease()
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
            self.reclaim.inherited.discard(role)
            if self.driver.model.workloads() == {role}:
                # The release's last workers. AReaL's trainers end by deleting each role (TrainController.destroy),
                # never with delete_workers(): the release, its history and the Lease go with the last one, as
                # nothing of a LocalScheduler's trial outlives its workers.
                self._delete_all(reverse_order)
                return
            self.deletion.delete_role(role, reverse_order)

    def _delete_all(self, reverse_order: bool) -> None:
        if not self.driver.model.installed and self.driver.reload().revision is None:
            return
        self._require_managed("delete_workers")
        self.deletion.delete_release(reverse_order)
        self.reclaim.inherited.clear()
        self._drop_lease()

    # --- fork ------------------------------------------------------------------------------------

    def fork_workers(self, role: str, target_role: str, command: str | None = None) -> list[str]:
        with self._lock:
            self._confirm_lease()
            self._require_managed("fork_workers")
            inherited = self.reclaim.claim(role, f"{self.config.fork_mode} fork", self.delete_workers)
            request_checks.require_fork(self.driver.model, role, target_role, replacing=inherited)
            if self.config.fork_mode == "pod":
                values = self.forks.pod_fork_values(role, target_role, command)
                if inherited:
                    self.reclaim.recreate(
                        role, values, f"re-fork {role} from {target_role} (pods) for a new controller"
                    )
                else:
                    self.driver.apply(values, f"fork {role} from {target_role} (pods)", role, (role,))
                return [w.id for w in self._wait_for_fork_pods(role, target_role)]
            if inherited:  # the earlier controller's children, where their guards did not restart
                self.forks.kill(role, reverse_order=False)
            workers = self.forks.fork_processes(role, target_role, self._get_workers(target_role), command)
            self.reclaim.inherited.discard(role)
            if self.exp_config is not None:
                self.calls.configure(workers, self.exp_config)
            return [w.id for w in workers]

    def _wait_for_fork_pods(self, role: str, target_role: str) -> list[Worker]:
        """A pod-mode fork's workers; one that does not come up is undone, as AReaL's forks are."""
        try:
            return self._get_workers(role)  # a fatal failure rolls the release back
        except WorkerFailedError as error:
            raise WorkerCreationError(role, f"Failed to fork {role} from {target_role}", str(error)) from error
        except WorkerTimeoutError as error:
            self.driver.roll_back(error)
            raise WorkerCreationError(role, f"Failed to fork {role} from {target_role}", str(error)) from error

    # --- engines ---------------------------------------------------------------------------------

    async def create_engine(
        self, worker_id: str, engine: str, engine_name: str | None = None, *args: Any, **kwargs: Any
    ) -> Any:
        self._require_lease()
        return await self.calls.create_engine(worker_id, engine, engine_name, args, kwargs)

    async def set_worker_env(self, worker_id: str, env: dict[str, str]) -> None:
        self._require_lease()
        await self.calls.set_env(worker_id, env)

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
        self._require_lease()
        return self.calls.call(
            worker_id,
            method,
            engine_name,
            args,
            kwargs,
            CallOptions(rpc_meta, http_timeout, max_retries, retry_delay),
        )

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
        self._require_lease()
        return await self.calls.async_call(
            worker_id,
            method,
            engine_name,
            args,
            kwargs,
            CallOptions(rpc_meta, http_timeout, max_retries, retry_delay),
        )

    # --- introspection ---------------------------------------------------------------------------

    def history(self) -> list[dict[str, Any]]:
        """The release's revisions (number, status, description), oldest first; `images`: for a revision whose
        workers were all ready, each role's image digests as its pods ran them (a tag that moved shows here);
        `note`: what became of it, as `areal-workers history` shows it (its workers failed and why, or the rollback
        that followed a failure), empty when nothing went wrong."""
        records = self.driver.inspector.revision_records()
        images, notes = records.images, records.notes
        return [
            {
                "revision": r.revision,
                "status": r.status.value,
                "description": r.description,
                "images": images.get(r.revision, {}),
                "note": notes.get(r.revision, ""),
            }
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
        self.observer.close()
        self.guard.close()
        self.loop.run(self.guard.aclose())  # the async session of the helper loop (used by forks)
        self.loop.close()
