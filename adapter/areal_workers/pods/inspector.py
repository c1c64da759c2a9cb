"""What the cluster says about one release (reads only, besides recording the last all-ready revision and what
became of failed ones): diagnosis
inputs (events, logs, nodes), the failure of a pod as AReaL's error, the chart's rendered topology, and the
revision last seen all ready with the images its pods ran. The rollback policy that uses them is
orchestration/driver.py's."""

from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from .. import diagnosis, naming
from ..errors import WorkerFailedError, attach_diagnosis, diagnosed_reason
from ..reasons import Reason
from .admission import Admission, AdmissionReader, is_gated, workload_name
from .images import IMAGES_ANNOTATION, RevisionImages, parse_recorded, ran_images, with_revision
from .ready_pods import READY_PODS_ANNOTATION, Record, parse as parse_ready_pods, render as render_ready_pods
from .watch import is_ready, pod_index

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RevisionRecords:
    """The topology ConfigMap's records of the revisions: the last all-ready one, the images (by digest) each
    workload ran in the all-ready revisions, and what became of revisions (a failure, a rollback)."""

    ready_revision: int | None
    images: RevisionImages
    notes: dict[int, str]


@dataclass(frozen=True)
class ReadyRevision:
    """A revision found all ready, the pods that ran it, and how many revisions' images the record keeps."""

    revision: int
    pods: list[client.V1Pod]
    keep: int


LOG_TAIL_LINES = 20
# Pods whose log tail a time-out's diagnosis reads: the first few say why; a thousand would be a thousand requests.
TIMEOUT_LOGS = 3
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")  # AReaL's colorlog colours its log lines
READY_REVISION_ANNOTATION = "areal.io/ready-revision"
# revision -> what became of it, for people (history): "workers failed: OOMKilled (actor/0)", "rolled back ..."
REVISION_NOTES_ANNOTATION = "areal.io/revision-notes"
NOTE_CHARS = 160
FAILED_NOTE = "workers failed: "  # a revision whose workers failed (and was rolled back)


def failure_reason(error: BaseException) -> str:
    """A failure in a few words, for a revision's note: the diagnosis' reason ("ErrImagePull", "OOMKilled") and the
    worker, from the first line of the diagnosis ("<pod> (container worker) on node <n>: OOMKilled [fatal]")."""
    reason = diagnosed_reason(error)
    if reason is None:  # a time-out's, or an error without a verdict: its first line's last part
        text = str(getattr(error, "diagnosis", "") or error or type(error).__name__)
        reason = text.splitlines()[0].rsplit(": ", 1)[-1].strip().removesuffix(" [fatal]")
    worker = getattr(error, "worker_id", None)
    return (f"{reason} ({worker})" if worker else reason)[:NOTE_CHARS]


def parse_notes(annotations: dict[str, str] | None) -> dict[int, str]:
    """The recorded notes of each revision; an annotation someone edited into something else reads as none."""
    try:
        recorded = json.loads((annotations or {}).get(REVISION_NOTES_ANNOTATION, "{}"))
    except json.JSONDecodeError:
        return {}
    if not isinstance(recorded, dict):
        return {}
    return {int(revision): str(note) for revision, note in recorded.items() if str(revision).isdigit()}


def with_notes(recorded: dict[int, str], notes: dict[int, str], keep: int) -> str:
    """The annotation's new value: `notes` over `recorded`, the newest `keep` revisions (helm's history_max)."""
    merged = {**recorded, **{revision: note[:NOTE_CHARS] for revision, note in notes.items()}}
    newest = sorted(merged)[-max(keep, 1) :]
    return json.dumps({str(r): merged[r] for r in newest}, sort_keys=True, separators=(",", ":"))


class ReleaseInspector:
    def __init__(
        self, core: client.CoreV1Api, namespace: str, release: str, admission: AdmissionReader | None = None
    ) -> None:
        self.core = core
        self.namespace, self.release = namespace, release
        self.admission = admission  # Kueue Workloads (None: not read)
        self._may_list_nodes = True
        # The topology ConfigMap as last read or written: record_ready patches it on this copy's resourceVersion, so
        # it writes without a read first, and the apiserver refuses (409) what another writer changed since.
        self._topology_seen: client.V1ConfigMap | None = None

    # --- diagnosis -------------------------------------------------------------------------------

    def failure(
        self,
        role: str,
        pod: client.V1Pod,
        ready_pod: client.V1Pod | None,
        nodes: list[client.V1Node],
        restarted_pod: client.V1Pod | None = None,
    ) -> WorkerFailedError | None:
        """AReaL's error for a pod with a fatal problem (judged from status and nodes; events and logs are read
        only then), or None while the pod is healthy or still progressing (`restarted_pod`: see diagnose_pod)."""
        problem = diagnosis.diagnose_pod(
            pod, was_ready=ready_pod is not None, ready_pod=ready_pod, nodes=nodes, restarted_pod=restarted_pod
        )
        if problem is not None and (problem.fatal or is_gated(pod)) and workload_name(pod):
            admission = self.admission_of(pod)  # Kueue's word: preempted or never admissible, not a crash
            if admission is not None and admission.fatal:
                return self._admission_failure(role, pod, admission)
        if problem is None or not problem.fatal:
            return None
        problem = (
            diagnosis.diagnose_pod(
                pod,
                was_ready=ready_pod is not None,
                ready_pod=ready_pod,
                restarted_pod=restarted_pod,
                nodes=nodes,
                events=self.events(pod),
                log_tail=self.log_tail(pod),
            )
            or problem
        )
        if not problem.fatal:  # the events tell of a retry that may still succeed
            return None
        index = pod_index(pod)
        error = WorkerFailedError(
            naming.worker_id(role, index if index is not None else 0), problem.exit_code_or(-1), problem.render()
        )
        return attach_diagnosis(error, problem.render(), problem.reason)

    def admission_of(self, pod: client.V1Pod) -> Admission | None:
        """Where the Kueue Workload of `pod` stands (None: not queued by Kueue, or unknown)."""
        return self.admission.of_pod(pod) if self.admission is not None else None

    def local_queue_exists(self, queue: str) -> bool | None:
        return self.admission.local_queue_exists(queue) if self.admission is not None else None

    def admission_failure(self, role: str, pods: dict[str, client.V1Pod]) -> WorkerFailedError | None:
        """AReaL's error when the Kueue Workload of a role's pods can never be admitted or was preempted."""
        grouped = sorted((pod for pod in pods.values() if workload_name(pod)), key=lambda pod: not is_gated(pod))
        admission = self.admission_of(grouped[0]) if grouped else None
        return self._admission_failure(role, grouped[0], admission) if admission and admission.fatal else None

    @staticmethod
    def _admission_failure(role: str, pod: client.V1Pod, admission: Admission) -> WorkerFailedError:
        index = pod_index(pod)
        error = WorkerFailedError(
            naming.worker_id(role, index if index is not None else 0), -1, f"{role}: {admission.describe()}"
        )
        verdict = {"preempted": Reason.PREEMPTED, "evicted": Reason.EVICTED}.get(admission.state)
        return attach_diagnosis(error, f"{role}: {admission.describe()}", verdict)

    def timeout_diagnosis(self, role: str, replicas: int, pods: dict[int, client.V1Pod]) -> str:
        lines = [f"{role}: {sum(map(is_ready, pods.values()))}/{replicas} workers ready"]
        gated = [pod for pod in pods.values() if is_gated(pod) and workload_name(pod)]
        admission = self.admission_of(gated[0]) if gated else None
        if admission is not None:  # one line for the whole group instead of one per gated pod
            lines[0] += f"; {admission.describe()}"
            pods = {index: pod for index, pod in pods.items() if pod not in gated}
        logs_left = TIMEOUT_LOGS
        for index in range(replicas):
            pod = pods.get(index)
            if pod is None and admission is not None:
                continue
            if pod is None:
                lines.append(
                    f"  {role}/{index}: no pod (StatefulSet events: kubectl -n {self.namespace} describe "
                    f"statefulset -l {naming.role_selector(self.release, role)})"
                )
            elif not is_ready(pod):
                read_log = bool(pod.spec.node_name) and logs_left > 0
                logs_left -= read_log
                log_tail = self.log_lines(pod, LOG_TAIL_LINES) if read_log else []
                problem = diagnosis.diagnose_pod(pod, events=self.events(pod), log_tail=log_tail)
                lines.append(
                    problem.render()
                    if problem is not None
                    else f"  {pod.metadata.name}: phase {pod.status.phase}, not Ready yet"
                )
        return "\n".join(lines)

    def events(self, pod: client.V1Pod) -> list[client.CoreV1Event]:
        try:
            return self.core.list_namespaced_event(
                self.namespace, field_selector=f"involvedObject.uid={pod.metadata.uid}"
            ).items
        except ApiException as error:
            logger.warning("cannot read events of %s: %s", pod.metadata.name, error.reason)
            return []

    def log_tail(self, pod: client.V1Pod) -> list[str]:
        """The last lines of the previous container (after a restart) or else the current one."""
        for previous in (True, False):
            try:
                text = self.core.read_namespaced_pod_log(
                    pod.metadata.name, self.namespace, tail_lines=LOG_TAIL_LINES, previous=previous
                )
            except ApiException:
                continue
            if text:
                return ANSI_ESCAPE.sub("", text).splitlines()[-LOG_TAIL_LINES:]
        return []

    def log_lines(self, pod: client.V1Pod, tail: int) -> list[str]:
        """The current container's last `tail` log lines ([] when the log cannot be read)."""
        try:
            text = self.core.read_namespaced_pod_log(pod.metadata.name, self.namespace, tail_lines=tail)
        except ApiException as error:
            logger.debug("cannot read the log of %s: %s", pod.metadata.name, error.reason)
            return []
        return ANSI_ESCAPE.sub("", text).splitlines()

    def nodes(self) -> list[client.V1Node]:
        """Nodes sharpen the advice (capacity, NotReady); reading them needs a ClusterRole the namespaced
        controller Role does not grant, so without it the diagnosis goes on from pod status and events."""
        if not self._may_list_nodes:
            return []
        try:
            return self.core.list_node().items
        except ApiException as error:
            if error.status == 403:
                self._may_list_nodes = False
            else:
                logger.warning("cannot list nodes: %s", error.reason)
            return []

    def disruption_budgets(self, selector: str) -> list[client.V1PodDisruptionBudget]:
        """The PodDisruptionBudgets matching `selector`, to explain a drain; without read access, none."""
        try:
            return (
                client.PolicyV1Api(self.core.api_client)
                .list_namespaced_pod_disruption_budget(self.namespace, label_selector=selector)
                .items
            )
        except ApiException as error:
            logger.warning("cannot list PodDisruptionBudgets: %s %s", error.status, error.reason)
            return []

    # --- revisions -------------------------------------------------------------------------------

    def _topology_configmap(self) -> client.V1ConfigMap | None:
        selector = f"{naming.release_selector(self.release)},{naming.LABEL_COMPONENT}=topology"
        items = self.core.list_namespaced_config_map(self.namespace, label_selector=selector).items
        self._topology_seen = items[0] if items else None
        return self._topology_seen

    def topology(self) -> dict[str, Any]:
        """What the chart rendered into the release's topology ConfigMap ({} before the first install)."""
        configmap = self._topology_configmap()
        return json.loads((configmap.data or {}).get("topology.json", "{}")) if configmap is not None else {}

    def ready_revision(self) -> int | None:
        """The last revision whose workers were all ready, as recorded on the release's topology ConfigMap
        (so a restarted controller rolls back to the same place)."""
        return self.revision_records().ready_revision

    def ready_pods(self) -> Record:
        """The worker pods AReaL holds, as recorded (pods/ready_pods.py)."""
        configmap = self._topology_configmap()
        return parse_ready_pods(configmap.metadata.annotations if configmap is not None else None)

    def revision_records(self) -> RevisionRecords:
        """What the topology ConfigMap records of the revisions (`history` shows it), from one listing."""
        configmap = self._topology_configmap()
        annotations = configmap.metadata.annotations if configmap is not None else None
        recorded = (annotations or {}).get(READY_REVISION_ANNOTATION)
        return RevisionRecords(
            int(recorded) if recorded and recorded.isdigit() else None,
            parse_recorded(annotations),
            parse_notes(annotations),
        )

    def record_revision_notes(self, notes: dict[int, str], keep: int) -> None:
        configmap = self._topology_configmap()
        if configmap is not None:
            value = with_notes(parse_notes(configmap.metadata.annotations), notes, keep)
            self._topology_seen = self.core.patch_namespaced_config_map(
                configmap.metadata.name,
                self.namespace,
                {"metadata": {"annotations": {REVISION_NOTES_ANNOTATION: value}}},
            )

    def record_ready(self, held: Record | None = None, ready: ReadyRevision | None = None) -> None:
        """One patch of the topology ConfigMap: `held`, the pods AReaL holds now (None: unchanged), and `ready`, the
        revision now the last all-ready one with the images its pods ran (None: unchanged). It is get_workers' last
        step, so it patches the copy last seen; when that is stale (409) or gone (404) it reads and patches again."""
        if held is None and ready is None:
            return
        configmap = self._topology_seen or self._topology_configmap()
        for last in (False, True):
            if configmap is None:
                return
            annotations = {}
            if held is not None:
                annotations[READY_PODS_ANNOTATION] = render_ready_pods(held)
            if ready is not None:
                recorded = parse_recorded(configmap.metadata.annotations)
                annotations[READY_REVISION_ANNOTATION] = str(ready.revision)
                annotations[IMAGES_ANNOTATION] = with_revision(
                    recorded, ready.revision, ran_images(ready.pods), ready.keep
                )
            metadata = {"annotations": annotations, "resourceVersion": configmap.metadata.resource_version}
            try:
                self._topology_seen = self.core.patch_namespaced_config_map(
                    configmap.metadata.name, self.namespace, {"metadata": metadata}
                )
                return
            except ApiException as error:
                if last or error.status not in (404, 409):
                    raise
            configmap = self._topology_configmap()
