"""pods/inspector.py: what became of a revision (its workers failed, a rollback after that), recorded on the
topology ConfigMap for `areal-workers history`, so a
revision's line says why it was superseded."""

from __future__ import annotations

import json

from areal_workers.errors import WorkerFailedError, WorkerTimeoutError, attach_diagnosis
from areal_workers.pods.inspector import (
    NOTE_CHARS,
    REVISION_NOTES_ANNOTATION,
    failure_reason,
    parse_notes,
    with_notes,
)


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
    from types import SimpleNamespace

    from areal_workers.pods.images import IMAGES_ANNOTATION
    from areal_workers.pods.inspector import READY_REVISION_ANNOTATION, ReleaseInspector

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
