"""What AReaL holds: the workers get_workers returned and their pods as last seen Ready.

Each fact is learnt in an epoch (a number that changes whenever its workload's pods may have been replaced; see
orchestration.driver.ReleaseDriver.epoch) and is valid only while the epoch stays the same, so no change has to
remember to forget it: a scale, update, rollback or delete starts a new epoch for exactly the workloads it touches.
"""

from __future__ import annotations

from collections.abc import Iterable

from kubernetes import client

from ..areal_types import Worker
from ..naming import LABEL_ROLE


class HeldWorkers:
    def __init__(self) -> None:
        self._workers: dict[str, tuple[int | None, list[Worker]]] = {}
        self._pods: dict[str, tuple[int | None, client.V1Pod]] = {}
        self._restarted: dict[str, client.V1Pod] = {}  # pod name -> the pod running again after an in-place restart

    def hold(self, workload: str, epoch: int | None, workers: list[Worker], pods: Iterable[client.V1Pod] = ()) -> None:
        self._workers[workload] = (epoch, workers)
        self._pods.update({pod.metadata.name: (epoch, pod) for pod in pods})

    def workers(self, workload: str, epoch: int | None) -> list[Worker] | None:
        learnt, workers = self._workers.get(workload, (None, None))
        return workers if epoch is not None and learnt == epoch else None

    def ready_pods(self, workload: str, epoch: int | None) -> list[client.V1Pod]:
        """The pods of `workload` as AReaL got them in this epoch (none once it changed)."""
        return [
            pod
            for learnt, pod in self._pods.values()
            if epoch is not None and learnt == epoch and (pod.metadata.labels or {}).get(LABEL_ROLE) == workload
        ]

    def ready_pod(self, name: str, epoch: int | None) -> client.V1Pod | None:
        """The pod as AReaL got it, if it is still the pod of the same epoch (a restart of it loses engines)."""
        learnt, pod = self._pods.get(name, (None, None))
        return pod if epoch is not None and learnt == epoch else None

    def restarted(self, pods: Iterable[client.V1Pod]) -> None:
        """The scheduler restarted these pods' workers in place: each pod as seen running again."""
        self._restarted.update({pod.metadata.name: pod for pod in pods})

    def restarted_pod(self, name: str) -> client.V1Pod | None:
        """The pod as seen running again after the scheduler restarted its worker in place (None: never was)."""
        return self._restarted.get(name)
