"""Finding a release's workers: one watch per wait until a workload's pods are Ready, a pod's fatal problem as
AReaL's WorkerFailedError at once, and the liveness check the guard client runs before retrying an RPC."""

from __future__ import annotations

import time

from kubernetes import client

from .. import diagnosis, naming
from ..areal_types import Worker
from ..errors import WorkerFailedError, WorkerNotFoundError, WorkerTimeoutError, attach_diagnosis
from ..pods.held_workers import HeldWorkers
from ..pods.inspector import ReleaseInspector
from ..pods.watch import PodWatch, WaitTimedOut, all_ready, pod_index
from ..release.model import ReleaseModel
from .driver import ReleaseDriver

# How often a wait for a Kueue-queued role re-reads its Workload (an inadmissible verdict changes no pod).
ADMISSION_RECHECK_SECONDS = 2.0


class WorkerFinder:
    def __init__(self, driver: ReleaseDriver, pods: PodWatch, inspector: ReleaseInspector, held: HeldWorkers) -> None:
        self.driver, self.pods, self.inspector, self.held = driver, pods, inspector, held

    def known_workers(self, workload: str) -> list[Worker] | None:
        """The workers get_workers last returned for `workload`, while its pods are still those."""
        return self.held.workers(workload, self.driver.epoch(workload))

    def wait_for_pods(self, workload: str, model: ReleaseModel, timeout: float) -> list[Worker]:
        """The workers of a role or pod-mode fork once all its pods are Ready, at the ports the chart gave them."""
        try:
            ports = model.ports(workload)
        except KeyError:
            raise WorkerNotFoundError(workload) from None
        replicas, epoch = model.replicas(workload), self.driver.epoch(workload)
        nodes = self.inspector.nodes()  # once per wait: a NotReady node fails pods that still look Ready

        def check(pod: client.V1Pod) -> None:
            self.raise_if_failed(workload, pod, epoch, nodes)

        def check_admission(pods: dict[str, client.V1Pod]) -> None:
            error = self.inspector.admission_failure(workload, pods)
            if error is not None:
                raise self._failed(workload, error)

        queued = model.kueue_queue(workload) is not None
        recheck = (ADMISSION_RECHECK_SECONDS, check_admission) if queued else None
        selector = naming.role_selector(self.driver.name, workload)
        started = time.monotonic()
        # After a change of the pod template, the pods of the earlier one stay Ready until the rolling update
        # replaces them: only pods of the StatefulSet's update revision are the change's workers.
        revisions = self.driver.cleanup.update_revisions(selector, timeout)
        try:
            pods = self.pods.wait(
                selector,
                all_ready(replicas, revisions or ()),
                max(0.0, timeout - (time.monotonic() - started)),
                on_pod=check,
                on_idle=recheck,
            )
        except WaitTimedOut as timed_out:
            error = WorkerTimeoutError(workload, timeout)
            raise attach_diagnosis(
                error, self.inspector.timeout_diagnosis(workload, replicas, timed_out.pods)
            ) from None
        by_index = {pod_index(p): p for p in pods.values() if p.metadata.deletion_timestamp is None}
        workers = [
            Worker(id=naming.worker_id(workload, i), ip=by_index[i].status.pod_ip, worker_ports=list(ports))
            for i in range(replicas)
        ]
        # From here on AReaL holds these workers: a restart or replacement of their pods loses its engines.
        self.held.hold(workload, epoch, workers, by_index.values())
        return workers

    def process_fork_workers(self, role: str, targets: list[Worker]) -> list[Worker]:
        """A process fork's workers: in its targets' pods, at the ports recorded when it was forked."""
        recorded = self.driver.model.fork_ports(role)
        workers = [
            Worker(id=naming.worker_id(role, index), ip=target.ip, worker_ports=ports)
            for index, (target, ports) in enumerate(zip(targets, recorded))
        ]
        if len(workers) != len(targets):
            raise self._failed(
                role,
                WorkerFailedError(
                    naming.worker_id(role, len(workers)),
                    -1,
                    f"forked role {role} records {len(workers)} forks for {len(targets)} target "
                    f"workers: delete_workers('{role}') and fork again",
                ),
            )
        self.held.hold(role, self.driver.epoch(role), workers)
        return workers

    def raise_if_failed(self, role: str, pod: client.V1Pod, epoch: int | None, nodes: list[client.V1Node]) -> None:
        """Fails the role at once when one of its pods has a fatal problem."""
        name = pod.metadata.name
        ready_pod, restarted_pod = self.held.ready_pod(name, epoch), self.held.restarted_pod(name)
        if ready_pod is None and (restarted_pod is None or restarted_pod.metadata.uid != pod.metadata.uid):
            # Not held by this scheduler (it adopted the release): as the record says AReaL holds it.
            ready_pod = self.driver.held_baseline(pod)
        error = self.inspector.failure(role, pod, ready_pod, nodes, restarted_pod=restarted_pod)
        if error is not None:
            raise self._failed(role, error)

    def _failed(self, role: str, error: WorkerFailedError) -> WorkerFailedError:
        """`error`, counted (metrics) and recorded (an Event) on its way to AReaL: every failure the finder
        raises passes here."""
        self.driver.observer.worker_failed(role, error)
        self.driver.events.worker_failed(self.driver.model, role, error)
        return error

    def unreachable_note(self, worker: Worker) -> str:
        """What the release's NetworkPolicy admits, for a worker found alive that does not answer."""
        address = f"{worker.ip}:{worker.worker_ports[0]}" if worker.worker_ports else worker.ip
        return diagnosis.unreachable_advice(self.driver.model.network_policy, address)

    def check_alive(self, worker: Worker) -> None:
        """Raises WorkerFailedError when the worker's pod is gone or has failed (used before RPC retries)."""
        role, index = naming.parse_worker_id(worker.id) or (worker.id, 0)
        model = self.driver.model
        pod_role = model.pod_role(role) if model.exists(role) else role
        pods, _ = self.pods.list(naming.role_selector(self.driver.name, pod_role))
        pod = next((p for p in pods if pod_index(p) == index), None)
        if pod is None or pod.status.pod_ip != worker.ip:
            preempted = self.inspector.admission_failure(role, {p.metadata.name: p for p in pods})
            if preempted is not None:  # Kueue took the workers back: say so, not "gone"
                raise self._failed(role, preempted)
            raise self._failed(
                role,
                WorkerFailedError(
                    worker.id,
                    -1,
                    f"the pod of worker {worker.id} ({worker.ip}) is gone or was replaced; its engines are lost",
                ),
            )
        self.raise_if_failed(role, pod, self.driver.epoch(pod_role), self.inspector.nodes())
