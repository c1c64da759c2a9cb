"""The release's revisions and the rollback policy.

Every change is one helm revision; after it the model is read back from the release (`helm get values` and the
chart's topology ConfigMap), exactly as a scheduler adopting the release reads it. The last revision whose
workers were all ready is recorded on the topology ConfigMap (so a restarted controller rolls back to the same
place); what is pending is derived by comparing the current revision's values with that one's. The checks before
a revision are orchestration/preflight.py's; the pod and StatefulSet work helm leaves undone is
orchestration/pod_cleanup.py's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from typing import Any

from kubernetes import client

from .. import naming
from ..config import KubernetesSchedulerConfig
from ..errors import InvalidSchedulerSetupError, SchedulerError, WorkerCreationError, add_note
from ..observer import NO_OBSERVER, Observer
from ..pods.held_record import HeldRecord
from ..pods.held_workers import Epochs
from ..pods.inspector import FAILED_NOTE, ReadyRevision, ReleaseInspector, failure_reason
from ..pods.watch import PodWatch
from ..release import ownership
from ..release.client import HelmError, ReleaseRevision, Releases, Snapshot, helm_error_text
from ..release.model import ReleaseModel
from ..runtime.backend import StatefulSets
from ..runtime.loop_thread import LoopThread
from . import preflight
from .authorship import Authorship, is_own_failed_upgrade
from .decision_events import DecisionEvents
from .gated_upgrade import ChangeRequest, Checks, upgrade
from .pod_cleanup import PodCleanup

logger = logging.getLogger(__name__)
# A log record's attribute: the shared-storage warning, with the paths it names (doctor's probe leaves it out).
UNSHARED_PATHS = "unshared_paths"


class ReleaseDriver:
    """Owns the release of one trial: its current model, its last all-ready revision, and every helm change."""

    def __init__(
        self,
        name: str,
        config: KubernetesSchedulerConfig,
        releases: Releases,
        inspector: ReleaseInspector,
        pods: PodWatch,
        statefulsets: StatefulSets,
        loop: LoopThread,
    ) -> None:
        self.name, self.config, self.namespace = name, config, config.namespace
        self.releases, self.inspector, self.pods, self.loop = releases, inspector, pods, loop
        self.cleanup = PodCleanup(config, pods, statefulsets, inspector)
        self.model = ReleaseModel()
        self.good_revision: int | None = None
        self.held_record = HeldRecord(inspector)  # the worker pods AReaL holds, as recorded on the ConfigMap
        self.authorship = Authorship()  # which revisions this driver may undo
        self.events = DecisionEvents(None, name)  # the decisions as Events, when the scheduler records them
        self.observer: Observer = NO_OBSERVER  # the scheduler's metrics, when it serves them
        self._good_values: dict[int, dict[str, Any]] = {}  # a revision's values never change
        self._epochs = Epochs()

    # --- reading the release ---------------------------------------------------------------------

    def helm(self, coroutine: Coroutine[Any, Any, Any], key: str | None = None) -> Any:
        """Runs a release operation; helm's failure becomes AReaL's error with helm's own message."""
        try:
            return self.loop.run(coroutine)
        except HelmError as error:
            text = helm_error_text(error)
            if key is not None:
                raise WorkerCreationError(key, "helm failed", text) from error
            raise SchedulerError(
                f"helm failed for release {self.name} in namespace {self.namespace}: {text}"
            ) from error

    def adopt(self, before_recovery: Callable[[], None] = lambda: None) -> ReleaseModel:
        """A controller that restarts finds its release as it left it (a pending operation is recovered); the
        last all-ready revision is the recorded one, else the adopted revision when it is deployed. A release of
        another chart under this name is refused before anything touches it (recovering may roll it back).
        `before_recovery` runs when helm has a release of this name, before a pending operation is recovered."""
        revision = None  # no release of this name: nothing to recover, and no second `helm status` to say so
        if self.require_own_chart():
            before_recovery()
            revision = self.helm(self.releases.recover(self.name))
        self.authorship.adopt(None if revision is None else revision.revision)
        if revision is None:
            if self.config.ownership == "external":
                return self._adopt_rendered()
            return self.model
        self.reload(current=revision)
        self.held_record.read()
        logger.info("adopted release %s revision %s (%s)", self.name, revision.revision, revision.status.value)
        recorded = self.inspector.ready_revision()
        deployed = revision.status.value == "deployed"
        self.good_revision = recorded if recorded is not None else (revision.revision if deployed else None)
        return self.model

    def require_own_chart(self) -> bool:
        """Raises InvalidSchedulerSetupError when helm's release of this name is of another chart; whether helm
        has a release of this name."""
        chart = self.helm(self.releases.chart_name(self.name))
        problem = ownership.foreign_chart_problem(self.name, self.namespace, chart)
        if problem is not None:
            raise InvalidSchedulerSetupError(
                f"{problem}; nothing was changed. Set release_name (AREAL_K8S_RELEASE_NAME) to a name no other "
                f"release of the namespace uses (helm list -n {self.namespace}), or leave it unset: the release is "
                f"then named after the experiment and trial"
            )
        return chart is not None

    def _adopt_rendered(self) -> ReleaseModel:
        """An external install without a helm record: Argo CD (or any `helm template | kubectl apply`) applies what
        the chart renders, and the chart's topology ConfigMap is then the whole model (it names every role, fork
        and port); there are no revisions."""
        self.reload()
        if not self.model.installed:
            raise SchedulerError(
                f"release {self.name!r} not found in namespace {self.namespace!r}: neither a helm release nor the "
                f"chart's topology ConfigMap (labels {naming.release_selector(self.name)},"
                f"{naming.LABEL_COMPONENT}=topology) is there. Install it first (helm install {self.name} ..., or an "
                f"Argo CD Application with spec.source.helm.releaseName: {self.name} synced to this namespace), or "
                f"fix release_name / namespace"
            )
        logger.info(
            "adopted release %s from its rendered topology (no helm record: applied by a GitOps tool)", self.name
        )
        return self.model

    def reload(self, written: Snapshot | None = None, current: ReleaseRevision | None = None) -> ReleaseModel:
        """The model of the release's current revision, read as an adopter reads it (`written`: helm's record of
        the revision an upgrade just wrote, which spares a `helm status` and a `helm get values`; `current`: the
        current revision just read, which spares the `helm status`)."""
        snapshot = written or self.helm(self.releases.snapshot(self.name, current))
        previous = self.model
        if snapshot is None:
            rendered = self.inspector.topology() if self.config.ownership == "external" else {}
            self.model = ReleaseModel(topology=rendered)
        else:
            revision, values = snapshot
            self.model = ReleaseModel(values=values, topology=self.inspector.topology(), revision=revision)
        unshared = self.model.topology.get("unshared_paths") or []
        # Once per release: with the change that installs or changes the paths (as helm shows NOTES.txt's warning at
        # install and upgrade), never at a first read: whoever adopts the release (status, rollback, down, a trainer
        # restarted) reads one whose maker was warned. AReaL's validate_shared_path warns the same way: a trial on
        # per-pod disks runs, its records do not meet.
        changed_here = written is not None or previous.revision is not None
        if unshared and changed_here and unshared != previous.topology.get("unshared_paths"):
            logger.warning(
                "release %s: %s on no volume every worker mounts, but name_resolve type nfs needs them on storage the "
                "workers and the trainer share: set the chart's sharedStorage (a ReadWriteMany claim) and put them "
                "under its mountPath, or use name_resolve type etcd3",
                self.name,
                ", ".join(unshared),
                extra={UNSHARED_PATHS: unshared},
            )
        self._epochs.advance(self.model.workloads(), lambda w: self.model.fingerprint(w) == previous.fingerprint(w))
        return self.model

    def epoch(self, workload: str) -> int | None:
        """A number that changes whenever `workload`'s pods may have been replaced (a change of its entry, a
        rollback, a delete and re-create): facts learnt about its workers (their addresses, the pods AReaL holds)
        stay true while it stays the same."""
        return self._epochs.get(workload)

    def renew_epoch(self, workload: str) -> None:
        """`workload`'s pods kept their identity but not their processes (restarted in place): what was learnt
        about its workers no longer holds."""
        self._epochs.renew(workload)

    def pending(self) -> set[str]:
        """Workloads whose pods changed since the last revision whose workers were all ready."""
        if not self.model.installed:
            return set()
        return self.model.changed_since(self._good_model())

    def _good_model(self) -> ReleaseModel | None:
        good = self.good_revision
        if good is None:
            return None
        if good == self.model.revision:
            return self.model
        if good not in self._good_values:
            values = self.helm(self.releases.values(self.name, good))
            if values is None:  # pruned from the history (history_max): every workload counts as changed
                return None
            self._good_values[good] = values
        return ReleaseModel(values=self._good_values[good], revision=good)

    # --- changing the release --------------------------------------------------------------------

    def apply(
        self, values: dict[str, Any], description: str, key: str, workloads: tuple[str, ...] = ()
    ) -> ReleaseModel:
        """One helm revision with `values`; on failure the release is left at its previous revision (the model's:
        it is read back after every change). The pods of `workloads` (roles or pod-mode forks created or changed)
        are checked against the nodes on the revision's render before helm applies it, and a first install clears the
        trial's stale name_resolve records (as AReaL's schedulers do at start): orchestration/gated_upgrade.py."""
        before = self.model.revision
        nodes = self.inspector.nodes() if workloads and self.config.capacity_check != "off" else []
        checks: Checks | None = None
        if nodes or before is None or (workloads and self.config.kueue_queue):

            def checks(manifests: list[dict[str, Any]]) -> None:
                with self.events.refusal(self.model, key, manifests):
                    preflight.check_capacity(manifests, workloads, nodes, self.config.capacity_check, key)
                    preflight.check_queues(manifests, workloads, self.inspector, self.namespace, key)
                if before is None:
                    preflight.clear_name_records(manifests, key)

        try:
            written = upgrade(
                self.loop, self.releases, ChangeRequest(self.name, values, description, key), checks, self.requeue
            )
        except HelmError as error:
            failure = WorkerCreationError(key, "helm upgrade failed", helm_error_text(error))
            self._restore(before, failure)
            self.events.refused(self.model, key, failure)
            raise failure from error
        self.authorship.wrote(written[0])
        previous = self.model
        self.events.revision_written(previous, self._forget_changed(previous, self.reload(written)), key, description)
        return self.model

    def requeue(self, values: dict[str, Any]) -> list[str]:
        """Kueue fixes a queued workload's size and pod shape while its StatefulSet exists (its webhook refuses the
        change), so the StatefulSets of queued workloads that `values` change are deleted, and their pods waited
        gone, before the revision that re-creates them: Kueue then admits each as a new group. Returns them."""
        changed = self.model.requeued_by(ReleaseModel(values=values), self.config.kueue_queue)
        for workload in changed:
            selector = self.model.own_selector(workload)
            if selector is None:
                continue
            names = self.cleanup.delete_statefulsets(selector)
            logger.info("re-creating the Kueue-queued StatefulSet(s) %s: Kueue admits them again", ", ".join(names))
        return changed

    def _restore(self, before: int | None, failure: BaseException) -> None:
        """After a failed upgrade: back to the revision before it (or no release at all after a failed install),
        when the latest revision is the failed one that upgrade wrote; another controller's is left as it is."""
        current = self.helm(self.releases.current(self.name))
        if current is None or current.revision == before:
            return
        if not is_own_failed_upgrade(before, current.revision, current.status.value):
            add_note(
                failure,
                f"release {self.name} is at revision {current.revision} ({current.status.value}), written after "
                f"revision {before} by another controller: not undone",
            )
            return
        if current.status.value.startswith("pending"):  # helm refuses a rollback of it: recovered as adopt does
            self.helm(self.releases.recover(self.name))
        elif before is None:
            self.helm(self.releases.uninstall(self.name))
        else:
            self.helm(self.releases.rollback(self.name, before))
        if before is None:
            self.authorship.forget()
        else:
            self.authorship.wrote(current.revision + 1)

    def uninstall(self, why: str = "delete_workers() deleted the trial's workers") -> None:
        own = self.model.own_selector()
        self.events.uninstalling(why)
        self.helm(self.releases.uninstall(self.name))
        if own:  # the chart's own labels: another chart's pods may carry the same instance label (Argo CD's too)
            self.cleanup.delete_test_pods(own)
        self.cleanup.wait_gone(own or naming.release_selector(self.name))  # no topology: a reaper-only release's pods
        self.authorship.forget()
        self.reload()
        self.good_revision = None
        self.held_record.clear()

    def scale_down_to_rank_zero(self, role: str) -> None:
        """Rank 0 owns the TCPStore: stop every other worker first, then rank 0 with the role."""
        own = self.model.own_selector(role)
        if own is None:  # no topology: nothing of the chart's to scale
            return
        self.cleanup.scale_down_to_rank_zero(own)

    # --- the last all-ready revision and the rollback to it ------------------------------------

    def confirm_ready(self, workload: str, held: list[client.V1Pod]) -> None:
        """`workload`'s workers all answered (`held`: its pods as they answered, recorded as AReaL holds them): the
        revision is good once every other pending workload's pods are Ready too and run its StatefulSet's update
        revision (one pod listing, a StatefulSet listing each). Under the scheduler's lock: it never waits, and a
        StatefulSet whose controller has yet to see its spec counts as not ready."""
        if self.config.ownership != "managed":
            return
        holding = self.held_record.holding(workload, held, self.model.fingerprint(workload))
        others = self.pending() - {workload}
        pods = self.cleanup.ready_on_update(self.name, {o: self.model.replicas(o) for o in others}) if others else held
        revision, ready = self.model.revision, None
        if pods is not None and revision is not None and revision != self.good_revision:
            ready = ReadyRevision(revision, pods, self.config.history_max)
        self.held_record.write(holding, ready)  # one patch: it is the last step before AReaL gets its workers
        if ready is not None:
            self.good_revision = revision

    def record_held(self, workload: str, pods: list[client.V1Pod]) -> None:
        """`pods` are the pods of `workload` whose workers AReaL holds now: recorded on the topology ConfigMap (only
        when that changes it), so any reader sees a later restart or replacement of one of them."""
        self.held_record.hold(workload, pods, self.model.fingerprint(workload))

    def held_baseline(self, pod: client.V1Pod) -> client.V1Pod | None:
        """`pod` as the record says AReaL got it (None: nothing recorded for it at its workload's entry)."""
        workload = (pod.metadata.labels or {}).get(naming.LABEL_ROLE) or ""
        return self.held_record.baseline(pod, self.model.fingerprint(workload))

    def _forget_changed(self, before: ReleaseModel, after: ReleaseModel) -> ReleaseModel:
        """After a revision: the recorded pods of workloads whose entry it changed are no longer held."""
        self.held_record.forget(lambda w: before.fingerprint(w) != after.fingerprint(w))
        return after

    def settle(self) -> None:
        """After a change that only removed or mapped workloads: as good as its predecessor, if nothing waits."""
        if self.config.ownership == "managed" and not self.pending():
            self.mark_good()

    def mark_good(self, pods: list[client.V1Pod] | None = None) -> None:
        """The current revision is the last all-ready one; `pods` (default: listed) ran it, and their images are
        recorded with it."""
        revision = self.model.revision
        if revision is None or revision == self.good_revision:
            return
        if pods is None:
            pods, _ = self.pods.list(naming.release_selector(self.name))
        self.held_record.write(None, ReadyRevision(revision, pods, self.config.history_max))
        self.good_revision = revision

    def roll_back(self, error: BaseException) -> None:
        """After a change whose workers failed: back to the last revision whose workers were all ready, with the
        pods stuck on the failed revision replaced (a StatefulSet rollback alone leaves them broken). Revisions of
        another controller since then are not undone: the release is left as it is, and the error says why."""
        target, failed_model = self.good_revision, self.model
        current = self.helm(self.releases.current(self.name))
        foreign = self.authorship.foreign(target, current.revision) if current is not None else []
        if foreign:
            note = (
                f"release {self.name} not rolled back to revision {target}: revision(s) "
                f"{', '.join(map(str, foreign))} since then were written by another controller"
            )
        elif target is None:
            self.uninstall("no revision ever had all workers ready")
            note = f"uninstalled release {self.name}: no revision ever had all workers ready"
        else:
            failed, why = self.model.revision, failure_reason(error)
            replaced = self.restore(target)
            self.mark_good()
            note = f"rolled back release {self.name} to revision {target}" + (
                f"; replaced pods stuck on the failed revision: {', '.join(replaced)}" if replaced else ""
            )
            rolled_back = self.model.revision
            assert rolled_back is not None, "helm rollback wrote a revision"
            notes = {rolled_back: f"after revision {failed} failed: {why}"}
            if failed:
                notes[failed] = FAILED_NOTE + why
            self.inspector.record_revision_notes(notes, self.config.history_max)
        # The error's first line only: its diagnosis reaches the caller with the error (`in_raised_error`: a caller
        # that prints the error, as areal-workers up does, leaves this record out).
        headline = str(error).splitlines()[0] if str(error) else type(error).__name__
        logger.warning("%s after: %s", note, headline, extra={"in_raised_error": True})
        # Counted once done: a helm failure above raises and is no rollback.
        self.observer.rolled_back("left" if foreign else "uninstalled" if target is None else "rolled_back", error)
        self.events.rolled_back(failed_model, error, note, rolled=not foreign)
        add_note(error, note)

    def restore(self, target: int) -> list[str]:
        """`helm rollback` to `target`, then what a StatefulSet rollback leaves undone: the pods of workloads the
        target lacks are waited gone, and pods stuck on the abandoned revision are replaced (their names returned)."""
        before_model = self.model
        before = before_model.workloads()
        self._requeue_for(target)
        self.helm(self.releases.rollback(self.name, target))
        self._forget_changed(before_model, self.reload())
        self.authorship.wrote(self.model.revision)
        for workload in before - self.model.workloads():
            self.cleanup.wait_gone(naming.role_selector(self.name, workload))
        return self.replace_stuck_pods()

    def _requeue_for(self, revision: int) -> None:
        """Before a rollback to `revision`: its queued workloads that differ are re-created (see requeue)."""
        if not self.model.installed:
            return
        values = self._good_values.get(revision) or self.helm(self.releases.values(self.name, revision))
        if values is not None:
            self.requeue(values)

    def replace_stuck_pods(self) -> list[str]:
        """Replaces the pods stuck on an abandoned revision (PodCleanup.replace_stuck_pods), of the chart's own
        StatefulSets of this release only, by the selector labels it rendered: another chart's objects may carry the
        same instance label (Argo CD labels what it syncs with it)."""
        own = self.model.own_selector()
        if own is None:
            logger.warning("release %s has no topology naming its selector labels: no pod replaced", self.name)
            return []
        replaced = self.cleanup.replace_stuck_pods(own)
        self.events.stuck_pods_replaced(replaced)
        return replaced
