"""The driver's decisions as Events (runtime/events.py), each on the object a person would describe: the StatefulSet
of the role it concerns, as the release's rendered topology names it, else the release's topology ConfigMap."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from .. import naming
from ..errors import WorkerCreationError, diagnosed_reason
from ..pods.inspector import failure_reason
from ..reasons import Reason, diagnosis_reason
from ..release.model import ReleaseModel
from ..runtime.events import EventRecorder

# The sections of a rendered diagnosis left out of an Event: other objects' events, and a log that may hold anything.
_LEFT_OUT = ("  events (", "  log tail (")


def statefulset_of(model: ReleaseModel, workload: str) -> str | None:
    """The StatefulSet the chart rendered for `workload` (a role or a pod-mode fork; a colocation or process fork:
    its target's)."""
    target = model.colocations.get(workload) or (model.forks.get(workload) or {}).get("target")
    entry = model.roles.get(workload) or model.forks.get(workload) or {}
    name = entry.get("statefulset")
    if not name and target and target != workload:
        return statefulset_of(model, str(target))
    return str(name) if name else None


def rendered_statefulset(manifests: list[dict[str, Any]], workload: str) -> str | None:
    """The StatefulSet of `workload` in a revision not written yet."""
    for manifest in manifests:
        metadata = manifest.get("metadata") or {}
        if manifest.get("kind") == "StatefulSet" and (metadata.get("labels") or {}).get(naming.LABEL_ROLE) == workload:
            return str(metadata.get("name"))
    return None


def diagnosis_note(error: BaseException) -> str:
    """The error's diagnosis (or text) without the events and log sections."""
    text = str(getattr(error, "diagnosis", "") or error)
    kept: list[str] = []
    for line in text.splitlines():
        if line.startswith(_LEFT_OUT):
            break
        kept.append(line)
    return "\n".join(kept)


def workload_of(error: BaseException) -> str | None:
    parsed = naming.parse_worker_id(str(getattr(error, "worker_id", "") or ""))
    return parsed[0] if parsed else None


class DecisionEvents:
    """The Events of one release's driver (`recorder` None: none recorded)."""

    def __init__(self, recorder: EventRecorder | None, release: str) -> None:
        self.recorder, self.release = recorder, release

    def revision_written(self, before: ReleaseModel, after: ReleaseModel, key: str, description: str) -> None:
        if self.recorder is None:
            return
        action = description.split(" ", 1)[0].capitalize()  # Create, Scale, Update, Fork, Delete, Colocate
        statefulset = statefulset_of(after, key) or statefulset_of(before, key)
        note = f"release {self.release} revision {after.revision}: {description}"
        self.recorder.on_statefulset(statefulset, Reason.REVISION_WRITTEN, action, note)

    def uninstalling(self, why: str) -> None:
        if self.recorder is not None:
            self.recorder.record(Reason.RELEASE_UNINSTALLED, "Uninstall", f"uninstalling release {self.release}: {why}")

    def refused(
        self, model: ReleaseModel, key: str, error: BaseException, manifests: list[dict[str, Any]] | None = None
    ) -> None:
        """A change refused before or by helm: nothing of it was written (or it was undone)."""
        if self.recorder is None:
            return
        statefulset = statefulset_of(model, key) or rendered_statefulset(manifests or [], key)
        note = f"change of {key} refused: {error}"
        self.recorder.on_statefulset(statefulset, Reason.CHANGE_REFUSED, "Refuse", note, warning=True)

    @contextmanager
    def refusal(self, model: ReleaseModel, key: str, manifests: list[dict[str, Any]]) -> Iterator[None]:
        """Checks that refuse the change of `key` with WorkerCreationError (the preflight's)."""
        try:
            yield
        except WorkerCreationError as refused:
            self.refused(model, key, refused, manifests)
            raise

    def worker_failed(self, model: ReleaseModel, role: str, error: BaseException) -> None:
        if self.recorder is None:
            return
        reason = diagnosis_reason(diagnosed_reason(error) or "") or Reason.WORKER_FAILED
        worker = getattr(error, "worker_id", None) or role
        note = f"worker {worker} failed: {diagnosis_note(error)}"
        statefulset = statefulset_of(model, workload_of(error) or role)
        self.recorder.on_statefulset(statefulset, reason, "Diagnose", note, warning=True)

    def rolled_back(self, failed: ReleaseModel, error: BaseException, note: str, rolled: bool) -> None:
        """After `error` made revision `failed` fail; `note`: what was done (rolled back to which revision,
        uninstalled, or why not)."""
        if self.recorder is None:
            return
        workload = workload_of(error)
        statefulset = statefulset_of(failed, workload) if workload else None
        reason = Reason.ROLLED_BACK if rolled else Reason.ROLLBACK_SKIPPED
        note = f"{note}, after revision {failed.revision} failed: {failure_reason(error)}"
        self.recorder.on_statefulset(statefulset, reason, "Rollback", note, warning=True)

    def rolled_back_by_hand(self, before: int | None, written: int | None, target: int) -> None:
        """A person's `areal-workers rollback`: about the release."""
        if self.recorder is not None:
            note = f"rolled back release {self.release} from revision {before} to {target} (revision {written}) by hand"
            self.recorder.record(Reason.ROLLED_BACK, "Rollback", note, warning=True)

    def stuck_pods_replaced(self, pods: list[str]) -> None:
        """`pods` (a StatefulSet's pods are named `<statefulset>-<index>`) were deleted for their StatefulSet to
        start them again on its current revision."""
        if self.recorder is None:
            return
        by_statefulset: dict[str, list[str]] = defaultdict(list)
        for pod in pods:
            by_statefulset[pod.rsplit("-", 1)[0]].append(pod)
        for statefulset, names in sorted(by_statefulset.items()):
            note = f"replaced pods stuck on an abandoned revision: {', '.join(sorted(names))}"
            self.recorder.on_statefulset(statefulset, Reason.STUCK_PODS_REPLACED, "ReplacePods", note)
