"""The worker pods AReaL holds, as the release's topology ConfigMap records them (pods/ready_pods.py), kept in step
with it by the release's driver: read when it adopts the release, a workload's pods recorded when its workers
answered, forgotten when a revision changes their workload's entry. The inspector writes the record only when that
changes it."""

from __future__ import annotations

from collections.abc import Callable

from kubernetes import client

from . import ready_pods
from .inspector import ReadyRevision, ReleaseInspector


class HeldRecord:
    def __init__(self, inspector: ReleaseInspector) -> None:
        self.inspector = inspector
        self.record: ready_pods.Record = {}

    def read(self) -> None:
        self.record = self.inspector.ready_pods()

    def clear(self) -> None:
        """After an uninstall: nothing is held."""
        self.record = {}

    def hold(self, workload: str, pods: list[client.V1Pod], fingerprint: str) -> None:
        """`pods` are the pods of `workload` (at its entry `fingerprint`) whose workers AReaL holds now."""
        self.write(self.holding(workload, pods, fingerprint))

    def holding(self, workload: str, pods: list[client.V1Pod], fingerprint: str) -> ready_pods.Record | None:
        """The record with `pods` held for `workload`, to `write`; None when it is the record already."""
        record = ready_pods.with_workload(self.record, workload, pods, fingerprint)
        return record if record != self.record else None

    def forget(self, changed: Callable[[str], bool]) -> None:
        """The recorded pods of the workloads whose entry `changed` are no longer held."""
        gone = {workload for workload in self.record if changed(workload)}
        if gone:
            self.write(ready_pods.without(self.record, gone))

    def baseline(self, pod: client.V1Pod, fingerprint: str) -> client.V1Pod | None:
        """`pod` as the record says AReaL got it (None: nothing recorded for it at its workload's entry)."""
        return ready_pods.baseline(self.record, pod, fingerprint)

    def write(self, record: ready_pods.Record | None, ready: ReadyRevision | None = None) -> None:
        """Writes `record` (None: unchanged) and, in the same patch, `ready`, the revision now all ready."""
        if record == self.record:
            record = None
        if record is not None or ready is not None:
            self.inspector.record_ready(record, ready)
        if record is not None:
            self.record = record
