"""A restarted trainer's workers: what a scheduler found in its release when it adopted it belongs to a controller
that is gone (a trainer killed, OOM-killed, preempted, or re-run for AReaL's recover). Its worker processes still
hold that controller's engines and forks, which AReaL cannot attach to; AReaL's own schedulers would give the new
trainer fresh workers. Here the trainer gets fresh worker processes in the same pods: when it creates such a workload
again with the same shape, each pod's worker is restarted in place (guard/restart.py: through AReaL's /fork, no
`pods/exec`), keeping the pod's node, GPUs, IP and Kueue admission, with no scheduling and no image pull. A shape that
differs is one helm revision, as an update is: the StatefulSet replaces the pods whose template changed, and the
pods it keeps (a scale) are restarted in place. A pod whose guard does not answer or does not stop in time is
deleted, and its StatefulSet starts it again (fresh, possibly elsewhere).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from kubernetes import client

from .. import naming
from ..areal_types import Worker
from ..guard.client import GuardClient
from ..guard.restart import stop_guard
from ..pods.held_workers import HeldWorkers
from ..pods.watch import WaitTimedOut, pod_index
from ..release.model import ReleaseModel
from ..runtime.loop_thread import LoopThread
from .driver import ReleaseDriver

logger = logging.getLogger(__name__)

# Beyond the pod's termination grace (what a kubelet allows a SIGTERM'd worker): the kubelet's notice of the exit,
# its first restart (without back-off) and the container's start.
RESTART_MARGIN_SECONDS = 30.0


def workload_kind(model: ReleaseModel, workload: str) -> str:
    """ "colocation", "process fork", "pod fork" or "role": how a workload of the release lives."""
    if workload in model.colocations:
        return "colocation"
    if workload in model.forks:
        return "process fork" if model.is_process_fork(workload) else "pod fork"
    return "role"


def _worker_status(pod: client.V1Pod) -> client.V1ContainerStatus | None:
    name = pod.spec.containers[0].name if pod.spec is not None and pod.spec.containers else None
    statuses = pod.status.container_statuses if pod.status is not None else None
    return next((s for s in statuses or [] if s.name == name), None)


def _running(pod: client.V1Pod) -> bool:
    status = _worker_status(pod)
    return status is not None and status.state is not None and status.state.running is not None


def _restarts(pod: client.V1Pod) -> int:
    status = _worker_status(pod)
    return (status.restart_count or 0) if status is not None else 0


def restarted(now: client.V1Pod | None, before: client.V1Pod) -> bool:
    """Whether the worker `before` ran is gone: the pod replaced or deleted, or its worker running again."""
    if now is None or now.metadata.uid != before.metadata.uid:
        return True
    return _running(now) and _restarts(now) > _restarts(before)


class Reclaim:
    def __init__(self, driver: ReleaseDriver, guard: GuardClient, loop: LoopThread, held: HeldWorkers) -> None:
        self.driver, self.guard, self.loop, self.held = driver, guard, loop, held
        self.inherited: set[str] = set()  # workloads a controller that is gone created, not yet re-created

    def adopted(self) -> None:
        """Called once the driver adopted the release: everything in it is a predecessor's."""
        model = self.driver.model
        if self.driver.config.ownership != "managed" or not model.installed:
            return
        self.inherited = model.workloads()
        if self.inherited:
            logger.info(
                "release %s holds %s of an earlier controller: each is restarted in place when this one creates it",
                self.driver.name,
                ", ".join(sorted(self.inherited)),
            )

    def claim(self, workload: str, kind: str, delete: Callable[[str], None]) -> bool:
        """Whether `workload` is an earlier controller's of this kind, to be re-created in place; one of another
        kind is deleted first (`delete`: the scheduler's delete_workers), and is then created anew."""
        if workload not in self.inherited:
            return False
        if workload_kind(self.driver.model, workload) == kind:
            return True
        delete(workload)
        return False

    def recreate(self, workload: str, values: dict[str, Any], description: str) -> None:
        """An inherited role or pod-mode fork, created again with `values`: one revision if they differ, then the
        worker of every pod the revision keeps (without one, every pod) is restarted in place."""
        selector = naming.role_selector(self.driver.name, workload)
        kept, _ = self.driver.pods.list(selector)
        if values != self.driver.model.values:
            before = {pod.metadata.name: pod.metadata.uid for pod in kept}
            self.driver.apply(values, description, workload, (workload,))
            own = self.driver.model.own_selector(workload) or selector
            kept = [
                pod
                for pod in self.driver.cleanup.pods_at_update_revision(own)
                if before.get(pod.metadata.name) == pod.metadata.uid
            ]
        self.restart_in_place(workload, kept)
        self.inherited.discard(workload)

    def restart_in_place(self, workload: str, pods: list[client.V1Pod]) -> None:
        """Restarts the worker of each of `pods` (of `workload`) in place and waits until it runs again; a pod whose
        guard refuses or does not stop in time is deleted instead."""
        ports = self.driver.model.ports(workload)
        live = [p for p in pods if p.status.pod_ip and p.metadata.deletion_timestamp is None and _running(p)]
        targets = [Worker(naming.worker_id(workload, pod_index(p) or 0), p.status.pod_ip, list(ports)) for p in live]
        results = self.loop.run(self._stop_guards(targets))
        asked = {pod.metadata.name: pod for pod, result in zip(live, results) if not isinstance(result, BaseException)}
        failed = {pod.metadata.name: str(r) for pod, r in zip(live, results) if isinstance(r, BaseException)}
        seen = self._wait_restarted(naming.role_selector(self.driver.name, workload), asked)
        self.driver.renew_epoch(workload)  # workers returned before (get_workers) ran the old processes
        self.held.restarted(
            seen[name] for name, pod in asked.items() if name in seen and seen[name].metadata.uid == pod.metadata.uid
        )
        for name, pod in asked.items():
            if not restarted(seen.get(name), pod):
                failed[name] = "its worker did not restart in time"
        for name, why in sorted(failed.items()):
            logger.warning("pod %s of %s: %s; deleting it, its StatefulSet starts it again", name, workload, why)
            self.driver.cleanup.delete_pod(name)
        # Restarts the scheduler asked for are not restarts after ready: the record holds the pods as running again.
        same = [
            seen[name] for name, pod in asked.items() if name in seen and seen[name].metadata.uid == pod.metadata.uid
        ]
        self.driver.record_held(workload, [pod for pod in same if pod.metadata.name not in failed])
        in_place = sum(1 for name in asked if name not in failed)
        logger.info("%s: restarted %d worker(s) in place, replaced %d pod(s)", workload, in_place, len(failed))

    async def _stop_guards(self, targets: list[Worker]) -> list[Any]:
        return await asyncio.gather(
            *(stop_guard(self.guard, t, i) for i, t in enumerate(targets)),
            return_exceptions=True,
        )

    def _wait_restarted(self, selector: str, asked: dict[str, client.V1Pod]) -> dict[str, client.V1Pod]:
        """The pods as last seen, once every asked pod's worker runs again or its time ran out."""
        if not asked:
            return {}
        grace = max((p.spec.termination_grace_period_seconds or 30) for p in asked.values())
        try:
            return self.driver.pods.wait(
                selector,
                lambda pods: all(restarted(pods.get(name), pod) for name, pod in asked.items()),
                grace + RESTART_MARGIN_SECONDS,
            )
        except WaitTimedOut as timed_out:
            return {pod.metadata.name: pod for pod in timed_out.pods.values()}
