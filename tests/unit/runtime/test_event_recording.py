"""The scheduler's Events without a cluster: the body the API takes, notes scrubbed of credentials and cut to the
API's 1 KiB, a repeat counted as the first Event's series (patched, not a new Event), and best-effort recording (a
403 logged once with the fix, then nothing tried; other failures never raised). Against an in-memory events API."""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from areal_workers.errors import WorkerFailedError, attach_diagnosis
from areal_workers.orchestration.decision_events import DecisionEvents, diagnosis_note, statefulset_of
from areal_workers.reasons import DECISIONS, DIAGNOSES, Reason, diagnosis_reason
from areal_workers.release.model import ReleaseModel
from areal_workers.runtime import event_body
from areal_workers.runtime.event_body import NOTE_BYTES, ObjectRef, note_of, scrub
from areal_workers.runtime.events import EventRecorder
from areal_workers.runtime.lease import ReleaseLease
from memory_backend import MemoryEvents, MemoryLeases

START = datetime(2026, 12, 6, 10, 0, 0, 123456, tzinfo=UTC)
STS = "aw-x-areal-workers-actor"
JWT = "eyJhbGciOiJSUzI1NiIsImtpZCI6IngifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6cmw6YSJ9.c2lnbmF0dXJlX3BhcnQ"


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


class StatefulSets:
    reads = 0

    def read_namespaced_stateful_set(self, name: str, namespace: str, **kwargs: Any) -> Any:
        self.reads += 1
        if name != STS:
            raise ApiException(status=404, reason="Not Found")
        return SimpleNamespace(metadata=SimpleNamespace(uid="sts-uid"))


class ConfigMaps:
    def __init__(self) -> None:
        self.items = [SimpleNamespace(metadata=SimpleNamespace(name="aw-x-areal-workers-topology", uid="cm-uid"))]

    def list_namespaced_config_map(self, namespace: str, label_selector: str, **kwargs: Any) -> Any:
        assert "app.kubernetes.io/component=topology" in label_selector
        return SimpleNamespace(items=self.items)


def recorder(api: MemoryEvents, **kwargs: Any) -> EventRecorder:
    return EventRecorder(
        api,
        "rl",
        "aw-x",
        core=ConfigMaps(),  # type: ignore[arg-type]
        apps=StatefulSets(),  # type: ignore[arg-type]
        instance="trainer-pod-0",
        clock=Clock(),
        **kwargs,
    )


# --- the enumeration ---------------------------------------------------------------------------------------------


def test_one_enumeration_holds_the_diagnosis_and_the_decisions_apart_and_unique():
    assert DIAGNOSES | DECISIONS == set(Reason) and not DIAGNOSES & DECISIONS
    assert len({str(r) for r in Reason}) == len(Reason)
    assert str(Reason.OOM_KILLED) == "OOMKilled" == Reason.OOM_KILLED  # a str: compared with the API's strings
    assert diagnosis_reason("CrashLoopBackOff") is Reason.CRASH_LOOP_BACK_OFF and diagnosis_reason("Novel") is None
    assert all(len(str(r)) <= event_body.FIELD_CHARS for r in Reason)


# --- the body ----------------------------------------------------------------------------------------------------


def test_an_event_body_is_what_events_k8s_io_v1_validates():
    regarding = ObjectRef("apps/v1", "StatefulSet", STS, "rl", "sts-uid")
    body = event_body.event_body(regarding, Reason.ROLLED_BACK, "Rollback", "rolled back", "pod-0", START, "r1", True)
    assert body["reportingController"] == "areal-workers" and body["reportingInstance"] == "pod-0"
    assert body["eventTime"] == "2026-12-06T10:00:00.123456Z" and body["type"] == "Warning"
    assert body["reason"] == "RolledBack" and body["action"] == "Rollback"
    assert body["regarding"] == {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": STS, "namespace": "rl",
                                 "uid": "sts-uid"}  # fmt: skip
    assert body["metadata"]["name"].startswith(f"{STS}.") and body["metadata"]["namespace"] == "rl"
    # listed by release (`areal-workers events`), also after the StatefulSet it regards is gone
    assert body["metadata"]["labels"] == {
        "app.kubernetes.io/instance": "r1",
        "app.kubernetes.io/managed-by": "areal-workers",
    }
    for legacy in ("firstTimestamp", "lastTimestamp", "count", "source", "series"):  # refused on create
        assert legacy not in body
    unread = ObjectRef("apps/v1", "StatefulSet", STS, "rl")
    assert "uid" not in event_body.event_body(unread, Reason.ROLLED_BACK, "Rollback", "", "p", START, "r1")["regarding"]


def test_a_long_note_is_cut_to_the_apis_1_kib_in_bytes_never_inside_a_character():
    note = note_of("回滚" * 1000)
    assert len(note.encode()) <= NOTE_BYTES and note.endswith(event_body.CUT)
    note.encode().decode()  # whole characters
    assert note_of("short") == "short"


@pytest.mark.parametrize(
    "text, secret",
    [
        (f"Authorization: Bearer {JWT}", JWT),
        (f"token {JWT} in the log", JWT),
        ("helm failed: Basic dXNlcjpodW50ZXIyaHVudGVy rejected", "dXNlcjpodW50ZXIyaHVudGVy"),
        ("env DB_PASSWORD=hunter2-s3cret from values", "hunter2-s3cret"),
        ('values: {"apiKey": "sk-live-1234567890"}', "sk-live-1234567890"),
        ("WANDB_API_KEY: 0123456789abcdef0123", "0123456789abcdef0123"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG", "wJalrXUtnFEMI/K7MDENG"),
        ("client_secret='quoted value'", "quoted value"),
        ("pulling https://robot:gh-pat-9876@registry.example/x", "gh-pat-9876"),
        ("python train.py --hf-token hf_abcdef123 --lr 1e-5", "hf_abcdef123"),
    ],
)
def test_a_note_never_holds_a_token_or_a_secrets_value(text, secret):
    api = MemoryEvents()
    recorder(api).record(Reason.WORKER_FAILED, "Diagnose", text)
    (stored,) = api.stored.values()
    assert secret not in stored["note"] and event_body.REDACTED in stored["note"], stored["note"]


def test_scrubbing_leaves_what_is_not_a_credential():
    text = "ImagePullBackOff: check image.pullSecrets (the Secret regcred); couldn't find key password in Secret rl/db"
    assert scrub(text) == text


# --- series and best-effort --------------------------------------------------------------------------------------


def test_a_repeat_is_counted_on_the_first_event_and_another_note_is_a_new_event():
    api = MemoryEvents()
    events = recorder(api)
    for _ in range(3):
        events.on_statefulset(STS, Reason.CHANGE_REFUSED, "Refuse", "no node can hold a worker", warning=True)
    (name,) = api.stored
    assert api.calls == ["create", "patch", "patch"]
    assert api.stored[name]["series"]["count"] == 3
    assert api.stored[name]["series"]["lastObservedTime"] > api.stored[name]["eventTime"]
    assert api.stored[name]["regarding"]["uid"] == "sts-uid"
    assert events.apps.reads == 1  # type: ignore[union-attr]  # the uid is read for a new Event, not for a repeat
    events.on_statefulset(STS, Reason.CHANGE_REFUSED, "Refuse", "a LocalQueue is missing", warning=True)
    events.on_statefulset(STS, Reason.REVISION_WRITTEN, "Create", "no node can hold a worker")
    assert len(api.stored) == 3


def test_threads_recording_at_once_count_one_series_without_losing_a_repeat():
    class SlowEvents(MemoryEvents):  # a request takes time: other threads run between a read and its write
        def patch_namespaced_event(self, name: str, namespace: str, body: Any, **kwargs: Any) -> Any:
            time.sleep(0.001)
            return super().patch_namespaced_event(name, namespace, body, **kwargs)

    api = SlowEvents()
    events = recorder(api)
    barrier = threading.Barrier(8)

    def fail() -> None:
        barrier.wait()
        for _ in range(25):
            events.on_statefulset(STS, Reason.OOM_KILLED, "Diagnose", "worker actor/0 failed: OOMKilled", warning=True)

    threads = [threading.Thread(target=fail) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    (stored,) = api.stored.values()
    assert stored["series"]["count"] == 200 and api.calls.count("create") == 1


def test_a_repeat_of_an_expired_event_starts_a_new_one():
    api = MemoryEvents()
    events = recorder(api)
    events.record(Reason.LEASE_TAKEN_OVER, "TakeOver", "taken over")
    api.stored.clear()  # the apiserver's event TTL
    events.record(Reason.LEASE_TAKEN_OVER, "TakeOver", "taken over")
    assert api.calls == ["create", "patch", "create"] and len(api.stored) == 1
    assert "series" not in next(iter(api.stored.values()))


def test_release_wide_events_are_on_the_topology_configmap_remembered_after_an_uninstall():
    api = MemoryEvents()
    events = recorder(api)
    assert events.release_object() == ObjectRef("v1", "ConfigMap", "aw-x-areal-workers-topology", "rl", "cm-uid")
    events.core.items = []  # type: ignore[union-attr]
    events.record(Reason.RELEASE_UNINSTALLED, "Uninstall", "gone")
    assert next(iter(api.stored.values()))["regarding"]["kind"] == "ConfigMap"
    never_seen = recorder(api)
    never_seen.core.items = []  # type: ignore[union-attr]
    assert never_seen.release_object().kind == "Lease" and never_seen.release_object().name == "aw-x-trainer"


def test_a_forbidden_event_is_logged_once_with_the_fix_and_never_tried_again(caplog):
    api = MemoryEvents(fail=ApiException(status=403, reason="Forbidden"))
    events = recorder(api)
    with caplog.at_level(logging.WARNING):
        for reason in (Reason.REVISION_WRITTEN, Reason.ROLLED_BACK, Reason.REVISION_WRITTEN):
            events.on_statefulset(STS, reason, "Create", "x")
    assert api.calls == ["create"] and events.refused
    (line,) = [r.getMessage() for r in caplog.records]
    assert "events.k8s.io" in line and "create and patch" in line and "rbac/role.yaml" in line


@pytest.mark.parametrize(
    "failure", [ApiException(status=500, reason="Internal Server Error"), ProtocolError("connection reset")]
)
def test_other_failures_are_logged_and_never_raised(failure, caplog):
    api = MemoryEvents(fail=failure)
    events = recorder(api)
    with caplog.at_level(logging.WARNING):
        events.record(Reason.RELEASE_REAPED, "Uninstall", "x")
        events.record(Reason.RELEASE_REAPED, "Uninstall", "x")
    assert api.calls == ["create", "create"] and not events.refused
    assert len(caplog.records) == 2


# --- the decisions -----------------------------------------------------------------------------------------------

MODEL = ReleaseModel(
    topology={
        "roles": {"actor": {"statefulset": STS}},
        "forks": {"ref": {"target": "actor", "mode": "process"}},
        "colocations": {"critic": "actor"},
    },
    revision=4,
)


def test_a_workload_is_described_on_its_statefulset_or_its_targets():
    assert statefulset_of(MODEL, "actor") == STS
    assert statefulset_of(MODEL, "ref") == STS and statefulset_of(MODEL, "critic") == STS
    assert statefulset_of(MODEL, "rollout") is None


def oom() -> WorkerFailedError:
    diagnosis = (
        f"{STS}-1 (container worker) on node n1: OOMKilled [fatal]\n"
        "  advice: raise SchedulingSpec.mem\n"
        "  log tail (last 1):\n"
        "    HF_TOKEN=hf_secret_in_a_log_line"
    )
    return attach_diagnosis(WorkerFailedError("actor/1", 137, diagnosis), diagnosis, "OOMKilled")


def test_a_failed_worker_is_an_event_with_its_diagnosis_reason_without_its_log():
    api = MemoryEvents()
    DecisionEvents(recorder(api), "aw-x").worker_failed(MODEL, "actor", oom())
    (stored,) = api.stored.values()
    assert stored["reason"] == "OOMKilled" and stored["type"] == "Warning" and stored["action"] == "Diagnose"
    assert stored["note"].startswith("worker actor/1 failed: ") and "raise SchedulingSpec.mem" in stored["note"]
    assert "log tail" not in stored["note"] and "hf_secret" not in stored["note"]
    assert stored["regarding"]["name"] == STS
    assert "log tail" not in diagnosis_note(oom())


def test_a_failure_without_a_reason_of_its_own_is_worker_failed():
    api = MemoryEvents()
    DecisionEvents(recorder(api), "aw-x").worker_failed(
        MODEL, "actor", WorkerFailedError("actor/0", -1, "actor: never admitted by lq: too big")
    )
    assert next(iter(api.stored.values()))["reason"] == "WorkerFailed"


def test_revisions_rollbacks_and_replaced_pods():
    api = MemoryEvents()
    decisions = DecisionEvents(recorder(api), "aw-x")
    decisions.revision_written(ReleaseModel(), MODEL, "actor", "update actor: image a:1->a:2")
    decisions.rolled_back(MODEL, oom(), "rolled back release aw-x to revision 3, after revision 4 failed: x", True)
    decisions.stuck_pods_replaced([f"{STS}-2", f"{STS}-0"])
    written, rolled, replaced = api.stored.values()
    assert (written["reason"], written["action"]) == ("RevisionWritten", "Update")
    assert written["note"] == "release aw-x revision 4: update actor: image a:1->a:2"
    assert (rolled["reason"], rolled["regarding"]["name"]) == ("RolledBack", STS)
    assert replaced["note"].endswith(f"{STS}-0, {STS}-2") and replaced["regarding"]["name"] == STS
    DecisionEvents(None, "aw-x").rolled_back(MODEL, oom(), "x", True)  # no recorder: nothing, no error


def test_a_refused_first_install_is_on_the_statefulset_it_would_have_created():
    api = MemoryEvents()
    manifests = [{"kind": "StatefulSet", "metadata": {"name": "aw-y-areal-workers-big", "labels": {
        "areal.io/role": "big"}}}]  # fmt: skip
    DecisionEvents(recorder(api), "aw-x").refused(ReleaseModel(), "big", RuntimeError("No node"), manifests)
    stored = next(iter(api.stored.values()))
    assert stored["reason"] == "ChangeRefused" and stored["regarding"]["name"] == "aw-y-areal-workers-big"


def test_a_lease_taken_over_is_an_event_and_a_renewal_is_not():
    leases, api = MemoryLeases(), MemoryEvents()
    dead = ReleaseLease(leases, "rl", "aw-x", grace_seconds=60)  # type: ignore[arg-type]
    dead.renew()
    successor = ReleaseLease(leases, "rl", "aw-x", grace_seconds=60, takeover=True, events=recorder(api))  # type: ignore[arg-type]
    successor.renew()
    successor.renew()
    (stored,) = api.stored.values()
    assert stored["reason"] == "LeaseTakenOver" and stored["regarding"]["kind"] == "ConfigMap"
    assert dead.holder in stored["note"] and successor.holder in stored["note"]
