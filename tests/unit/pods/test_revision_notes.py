"""pods/inspector.py: what became of a revision (its workers failed, a rollback after that), recorded on the
topology ConfigMap for `areal-workers history`, so a
revision's line says why it was superseded; and the ready records get_workers writes there, in one patch."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from areal_workers.errors import WorkerFailedError, WorkerTimeoutError, attach_diagnosis
from areal_workers.pods.images import IMAGES_ANNOTATION
from areal_workers.pods.inspector import (
    NOTE_CHARS,
    READY_REVISION_ANNOTATION,
    REVISION_NOTES_ANNOTATION,
    ReadyRevision,
    ReleaseInspector,
    failure_reason,
    parse_notes,
    with_notes,
)
from areal_workers.pods.ready_pods import READY_PODS_ANNOTATION, HeldPod


def test_the_reason_is_the_diagnosis_verdict_and_the_worker():
    pull = WorkerFailedError("rollout/1", -1, "x")
    attach_diagnosis(pull, "aw-x-rollout-1 (container worker) on node n0: ErrImagePull [fatal]\n  advice: ...")
    assert failure_reason(pull) == "ErrImagePull (rollout/1)"
    oom = WorkerFailedError("actor/0", 137, "x")
    attach_diagnosis(oom, "aw-x-actor-0 (container worker) on node n1: OOMKilled [fatal]\n  exit code: 137")
    assert failure_reason(oom) == "OOMKilled (actor/0)"
    assert failure_reason(WorkerTimeoutError("actor", 5.0)).startswith("Timeout waiting for worker 'actor'")


def test_notes_merge_keep_the_newest_revisions_and_clip_each():
    recorded = parse_notes({REVISION_NOTES_ANNOTATION: json.dumps({"1": "workers failed: OOMKilled (actor/0)"})})
    value = with_notes(recorded, {2: "after revision 1 failed: OOMKilled (actor/0)", 3: "x" * 500}, keep=2)
    assert sorted(json.loads(value)) == ["2", "3"] and len(json.loads(value)["3"]) == NOTE_CHARS
    assert parse_notes({REVISION_NOTES_ANNOTATION: value})[2] == "after revision 1 failed: OOMKilled (actor/0)"


def test_an_annotation_someone_edited_into_something_else_reads_as_none():
    assert parse_notes({REVISION_NOTES_ANNOTATION: "not json"}) == {}
    assert parse_notes({REVISION_NOTES_ANNOTATION: "[1, 2]"}) == {}
    assert parse_notes(None) == {}


def test_the_revisions_records_come_from_one_listing_of_the_topology_configmap():
    annotations = {
        READY_REVISION_ANNOTATION: "3",
        REVISION_NOTES_ANNOTATION: json.dumps({"2": "workers failed: OOMKilled (actor/0)"}),
        IMAGES_ANNOTATION: json.dumps({"3": {"actor": ["reg/areal@sha256:" + "a" * 64]}}),
    }
    listings: list[str] = []

    def list_namespaced_config_map(namespace: str, label_selector: str) -> SimpleNamespace:
        listings.append(label_selector)
        return SimpleNamespace(items=[SimpleNamespace(metadata=SimpleNamespace(name="cm", annotations=annotations))])

    core = SimpleNamespace(list_namespaced_config_map=list_namespaced_config_map)
    records = ReleaseInspector(core, "rl", "aw-x").revision_records()  # type: ignore[arg-type]
    assert records.ready_revision == 3 and records.notes == {2: "workers failed: OOMKilled (actor/0)"}
    assert records.images == {3: {"actor": ["reg/areal@sha256:" + "a" * 64]}}
    assert len(listings) == 1


class TopologyConfigMaps:
    """CoreV1Api's ConfigMap calls on the one topology ConfigMap: a list, and merge patches of its annotations that
    hold to a resourceVersion in the patch, as the apiserver does (409 when it changed since)."""

    def __init__(self, annotations: dict[str, str]) -> None:
        self.annotations, self.version = dict(annotations), 1
        self.calls: list[tuple[str, Any]] = []

    def current(self) -> Any:
        meta = SimpleNamespace(name="cm", annotations=dict(self.annotations), resource_version=str(self.version))
        return SimpleNamespace(metadata=meta, data={"topology.json": "{}"})

    def list_namespaced_config_map(self, namespace: str, label_selector: str) -> Any:
        self.calls.append(("list", label_selector))
        return SimpleNamespace(items=[self.current()])

    def patch_namespaced_config_map(self, name: str, namespace: str, body: dict[str, Any]) -> Any:
        self.calls.append(("patch", body["metadata"]))
        if body["metadata"].get("resourceVersion") not in (None, str(self.version)):
            raise ApiException(status=409, reason="Conflict")
        self.annotations.update(body["metadata"]["annotations"])
        self.version += 1
        return self.current()

    def edit(self, **annotations: str) -> None:
        """Another writer's change."""
        self.annotations.update(annotations)
        self.version += 1

    def kinds(self) -> list[str]:
        kinds = [kind for kind, _ in self.calls]
        self.calls.clear()
        return kinds


def ran_pod(digest: str) -> Any:
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name="a0", labels={"areal.io/role": "actor"}),
        status=client.V1PodStatus(
            container_statuses=[
                client.V1ContainerStatus(
                    name="worker",
                    image="reg/areal:1",
                    image_id=f"reg/areal@sha256:{digest * 64}",
                    ready=True,
                    restart_count=0,
                )
            ]
        ),
    )


def test_the_held_pods_and_the_ready_revision_are_written_in_one_patch():
    configmaps = TopologyConfigMaps({IMAGES_ANNOTATION: json.dumps({"1": {"actor": ["reg/areal@sha256:" + "a" * 64]}})})
    held = {"actor": {"a0": HeldPod("uid-1", (("worker", 0),), "entry")}}
    inspector = ReleaseInspector(configmaps, "rl", "aw-x")  # type: ignore[arg-type]
    inspector.topology()  # what the driver reads after every revision
    assert configmaps.kinds() == ["list"]
    inspector.record_ready(held, ReadyRevision(2, [ran_pod("b")], keep=10))
    assert configmaps.kinds() == ["patch"]  # no read first: the copy read after the revision
    assert configmaps.annotations[READY_REVISION_ANNOTATION] == "2" and READY_PODS_ANNOTATION in configmaps.annotations
    assert sorted(json.loads(configmaps.annotations[IMAGES_ANNOTATION])) == ["1", "2"]  # revision 1's images stay
    inspector.record_ready(held)
    assert configmaps.kinds() == ["patch"]  # on the copy the last patch returned


def test_a_ready_record_patched_since_it_was_read_is_read_again_and_merged():
    configmaps = TopologyConfigMaps({})
    inspector = ReleaseInspector(configmaps, "rl", "aw-x")  # type: ignore[arg-type]
    inspector.topology()
    configmaps.edit(**{IMAGES_ANNOTATION: json.dumps({"1": {"actor": ["reg/areal@sha256:" + "a" * 64]}})})
    configmaps.kinds()
    inspector.record_ready(None, ReadyRevision(2, [ran_pod("b")], keep=10))
    assert configmaps.kinds() == ["patch", "list", "patch"]  # refused (409) on the stale copy, then read again
    assert sorted(json.loads(configmaps.annotations[IMAGES_ANNOTATION])) == ["1", "2"]  # the other write kept
