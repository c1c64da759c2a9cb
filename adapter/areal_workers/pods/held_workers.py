"""What AReaL holds: the workers get_workers returned and their pods as last seen Ready.

Each fact is learnt in an epoch (a number that changes whenever its workload's pods may have been replaced: Epochs,
which the release's driver keeps) and is valid only while the epoch stays the same, so no change has to remember to
forget it: a scale, update, rollback or delete starts a new epoch for exactly the workloads it touches.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable

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


class Epochs:
    """Each workload's epoch, since which its pods are unchanged. Not revision numbers: helm numbers revisions from 1
    again after an uninstall, epochs never repeat."""

    def __init__(self) -> None:
        self._epochs: dict[str, int] = {}  # workload -> the epoch since which its pods are unchanged
        self._counter = itertools.count(1)

    def get(self, workload: str) -> int | None:
        return self._epochs.get(workload)

    def renew(self, workload: str) -> None:
        """`workload`'s pods kept their identity but not their processes (restarted in place)."""
        self._epochs[workload] = next(self._counter)

    def advance(self, workloads: Iterable[str], unchanged: Callable[[str], bool]) -> None:
        """After the release was read: `workloads` are all it has now; each keeps its epoch when it had one and
        `unchanged` says its entry is the same, else starts a new one."""
        self._epochs = {
            workload: self._epochs[workload]
            if workload in self._epochs and unchanged(workload)
            else next(self._counter)
            for workload in workloads
        }
