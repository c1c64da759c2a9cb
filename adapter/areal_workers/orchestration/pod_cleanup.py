"""What helm leaves undone to a release's pods and StatefulSets: pods waited gone, StatefulSets deleted or scaled
down ahead of a revision, pods stuck on an abandoned revision replaced, the chart's test pods removed. The driver
builds every selector from the release's model; this module only acts on what they select.
"""

from __future__ import annotations

import logging
import math
import time

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from .. import diagnosis, naming
from ..config import KubernetesSchedulerConfig
from ..pods.inspector import ReleaseInspector
from ..pods.watch import PodWatch, WaitTimedOut, all_ready, is_ready, pod_index, template_revision
from ..runtime.backend import StatefulSets

logger = logging.getLogger(__name__)
NODES_REREAD_SECONDS = 5.0  # how often wait_gone looks again for nodes that stopped answering
OBSERVE_TIMEOUT = 30.0  # the longest wait for the StatefulSet controller to see a StatefulSet's latest spec


class PodCleanup:
    """The pod and StatefulSet work of one release's changes, bounded by helm_timeout."""

    def __init__(
        self,
        config: KubernetesSchedulerConfig,
        pods: PodWatch,
        statefulsets: StatefulSets,
        inspector: ReleaseInspector,
    ) -> None:
        self.config, self.namespace = config, config.namespace
        self.pods, self.statefulsets, self.inspector = pods, statefulsets, inspector

    def wait_gone(self, selector: str) -> None:
        """Until the pods are gone, except those terminating on a node that is NotReady or deleted: no kubelet will
        confirm their end (Kubernetes removes them when the node returns or is deleted), so waiting for them would
        only run into the time-out. The nodes are read again every few seconds of the wait: a node that stops
        answering meanwhile strands its pods too. Without read access to nodes every pod is waited for."""
        nodes = self.inspector.nodes()

        def read_nodes_again(_pods: dict[str, client.V1Pod]) -> None:
            nonlocal nodes
            nodes = self.inspector.nodes()

        def stranded(pod: client.V1Pod) -> bool:
            return pod.metadata.deletion_timestamp is not None and diagnosis.node_problem(pod, nodes) is not None

        try:
            left = self.pods.wait(
                selector,
                lambda pods: all(stranded(p) for p in pods.values()),
                self.config.helm_timeout,
                on_idle=(NODES_REREAD_SECONDS, read_nodes_again),
            )
        except WaitTimedOut:
            names = ", ".join(sorted(p.metadata.name for p in self.pods.list(selector)[0]))
            logger.warning("pods still terminating after %ss: %s", self.config.helm_timeout, names)
            return
        if left:
            logger.warning(
                "not waiting for %d pod(s) on unreachable nodes (Kubernetes removes them when the node "
                "returns or is deleted): %s",
                len(left),
                ", ".join(f"{name} on {pod.spec.node_name}" for name, pod in sorted(left.items())),
            )

    def delete_statefulsets(self, selector: str) -> list[str]:
        """Deletes the StatefulSets `selector` selects and waits until they and their pods are gone; returns their
        names."""
        names = [
            s.metadata.name
            for s in self.statefulsets.list_namespaced_stateful_set(self.namespace, label_selector=selector).items
        ]
        for name in names:
            self.statefulsets.delete_namespaced_stateful_set(name, self.namespace, propagation_policy="Background")
        self._wait_statefulsets_gone(names)
        self.wait_gone(selector)
        return names

    def _wait_statefulsets_gone(self, names: list[str]) -> None:
        deadline = time.monotonic() + self.config.helm_timeout
        for name in names:
            while time.monotonic() < deadline:
                try:
                    self.statefulsets.read_namespaced_stateful_set(name, self.namespace)
                except ApiException as error:
                    if error.status == 404:
                        break
                    raise
                time.sleep(0.2)

    def scale_down_to_rank_zero(self, selector: str) -> None:
        """Every StatefulSet `selector` selects down to one replica, waited for: only the pods of index 0 remain."""
        for statefulset in self.statefulsets.list_namespaced_stateful_set(
            self.namespace, label_selector=selector
        ).items:
            if (statefulset.spec.replicas or 0) > 1:
                self.statefulsets.patch_namespaced_stateful_set_scale(
                    statefulset.metadata.name, self.namespace, {"spec": {"replicas": 1}}
                )
        self.pods.wait(selector, lambda pods: all(pod_index(p) == 0 for p in pods.values()), self.config.helm_timeout)

    def delete_test_pods(self, selector: str) -> None:
        """The chart keeps its `helm test` Pod after a run and helm uninstall leaves hooks: without this it would
        outlive the release (and a wait for the release's pods would wait for it until the time-out)."""
        test_pods, _ = self.pods.list(f"{selector},{naming.LABEL_COMPONENT}=test")
        for pod in test_pods:
            try:
                self.pods.delete(pod.metadata.name)
            except ApiException as error:
                if error.status != 404:
                    raise

    def replace_stuck_pods(self, selector: str) -> list[str]:
        """Deletes the pods of the StatefulSets `selector` selects that are not ready and run another revision than
        their StatefulSet's current one (after a rollback a StatefulSet does not replace a broken pod by itself:
        kubernetes#67250); returns their names."""
        replaced: list[str] = []
        statefulsets = self.statefulsets.list_namespaced_stateful_set(self.namespace, label_selector=selector).items
        for statefulset in statefulsets:
            statefulset = self._observed(statefulset)
            own = ",".join(f"{k}={v}" for k, v in statefulset.spec.selector.match_labels.items())
            pods, _ = self.pods.list(own)
            for pod in pods:
                if template_revision(pod) != statefulset.status.update_revision and not is_ready(pod):
                    self.pods.delete(pod.metadata.name)
                    replaced.append(pod.metadata.name)
        return replaced

    def update_revisions(self, selector: str, timeout: float = OBSERVE_TIMEOUT) -> set[str] | None:
        """The update revision of each StatefulSet `selector` selects, once its controller has seen its latest spec
        (waiting at most `timeout`): the template its pods run when a rolling update is done. None: no StatefulSet."""
        statefulsets = self.statefulsets.list_namespaced_stateful_set(self.namespace, label_selector=selector).items
        if not statefulsets:
            return None
        observed = [self._observed(statefulset, min(timeout, OBSERVE_TIMEOUT)) for statefulset in statefulsets]
        return {s.status.update_revision for s in observed if s.status and s.status.update_revision}

    def update_revisions_seen(self, selector: str) -> set[str] | None:
        """update_revisions without waiting: None while a StatefulSet `selector` selects has a spec its controller
        has yet to see (its update revision may still name the template before it); empty without a StatefulSet."""
        statefulsets = self.statefulsets.list_namespaced_stateful_set(self.namespace, label_selector=selector).items
        if not all(_observed_spec(s) for s in statefulsets):
            return None
        return {s.status.update_revision for s in statefulsets if s.status.update_revision}

    def ready_on_update(self, release: str, replicas: dict[str, int]) -> list[client.V1Pod] | None:
        """The release's pods when each workload of `replicas` (workload -> replicas) has all its pods Ready on its
        StatefulSet's update revision (update_revisions_seen: never waits); None when one has not."""
        pods, _ = self.pods.list(naming.release_selector(release))
        for workload, count in replicas.items():
            revisions = self.update_revisions_seen(naming.role_selector(release, workload))
            mine = {p.metadata.name: p for p in pods if (p.metadata.labels or {}).get(naming.LABEL_ROLE) == workload}
            if revisions is None or not all_ready(count, revisions)(mine):
                return None
        return pods

    def pods_at_update_revision(self, selector: str) -> list[client.V1Pod]:
        """The pods of the StatefulSets `selector` selects that run their StatefulSet's latest template (a rolling
        update leaves them as they are); without a StatefulSet, every pod `selector` selects."""
        revisions = self.update_revisions(selector)
        pods, _ = self.pods.list(selector)
        return pods if revisions is None else [pod for pod in pods if template_revision(pod) in revisions]

    def delete_pod(self, name: str) -> None:
        """Deletes a pod (its StatefulSet starts it again); one already gone is fine."""
        try:
            self.pods.delete(name)
        except ApiException as error:
            if error.status != 404:
                raise

    def _observed(self, statefulset: client.V1StatefulSet, timeout: float = OBSERVE_TIMEOUT) -> client.V1StatefulSet:
        """The StatefulSet once its controller has seen its latest spec (so status.updateRevision is current), or as
        it is after `timeout`. One watch from the version read: a controller creating a thousand pods records the
        status only after them, and reading it again every 0.2 s was a request per 0.2 s of that."""
        if _observed_spec(statefulset):
            return statefulset
        name, deadline = statefulset.metadata.name, time.monotonic() + timeout
        follow = watch.Watch(return_type=client.V1StatefulSet)
        try:
            for event in follow.stream(
                self.statefulsets.list_namespaced_stateful_set,
                self.namespace,
                field_selector=f"metadata.name={name}",
                resource_version=statefulset.metadata.resource_version,
                timeout_seconds=max(1, math.ceil(timeout)),
            ):
                if event["type"] in ("ADDED", "MODIFIED"):
                    statefulset = event["object"]
                if event["type"] == "DELETED" or _observed_spec(statefulset) or time.monotonic() > deadline:
                    break
        except ApiException as error:
            if error.status != 410:  # 410: the version read is too old to watch from; read it as it is now
                raise
            statefulset = self.statefulsets.read_namespaced_stateful_set(name, self.namespace)
        finally:
            follow.stop()
        return statefulset


def _observed_spec(statefulset: client.V1StatefulSet) -> bool:
    status = statefulset.status
    return status is not None and (status.observed_generation or 0) >= (statefulset.metadata.generation or 0)
