"""The trainer's Lease and the reaper's judgement, against an in-memory coordination API: renewal, take-over,
expiry after the grace period, and a Lease renewed between the reaper's list and its delete."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

from kubernetes import client

from areal_workers.runtime.lease import LEASE_LABEL, ReleaseLease, lease_body, lease_name, renew_interval
from areal_workers.runtime.reaper import lease_states, reap
from memory_backend import MemoryLeases

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def test_renew_interval_leaves_room_for_missed_renewals():
    assert renew_interval(300) == 10 and renew_interval(8) == 2 and renew_interval(0.1) == 0.2


def test_a_lease_is_created_renewed_and_taken_over_by_a_successor():
    api = MemoryLeases()
    first = ReleaseLease(api, "rl", "aw-a", grace_seconds=60)  # type: ignore[arg-type]
    first.renew()
    stored = api.leases[lease_name("aw-a")]
    assert stored.metadata.labels[LEASE_LABEL] == "aw-a" and stored.spec.lease_duration_seconds == 60
    acquired = stored.spec.acquire_time
    first.renew()
    assert api.leases[lease_name("aw-a")].spec.acquire_time == acquired  # a renewal keeps the acquire time
    successor = ReleaseLease(api, "rl", "aw-a", grace_seconds=60)  # type: ignore[arg-type]
    successor.holder = "other-host/7"
    successor.renew()
    taken = api.leases[lease_name("aw-a")]
    assert taken.spec.holder_identity == "other-host/7" and taken.spec.lease_transitions == 1
    successor.delete()
    successor.delete()  # already gone: fine
    assert api.leases == {}


def lease(api: MemoryLeases, release: str, renewed: datetime, grace: int) -> None:
    api.create_namespaced_lease("rl", lease_body(release, "h/1", grace, renewed))


def test_only_leases_past_their_grace_are_reaped_and_their_releases_uninstalled():
    api = MemoryLeases()
    lease(api, "aw-dead", NOW - timedelta(seconds=100), grace=30)
    lease(api, "aw-alive", NOW - timedelta(seconds=10), grace=30)
    uninstalled: list[str] = []
    dry = reap(api, "rl", uninstalled.append, dry_run=True, now=NOW)  # type: ignore[arg-type]
    assert [(o.lease.release, o.action) for o in dry] == [("aw-alive", "alive"), ("aw-dead", "would reap")]
    assert uninstalled == [] and len(api.leases) == 2
    outcomes = reap(api, "rl", uninstalled.append, now=NOW)  # type: ignore[arg-type]
    assert [(o.lease.release, o.action, round(o.overdue_seconds)) for o in outcomes] == [
        ("aw-alive", "alive", -20),
        ("aw-dead", "reaped", 70),
    ]
    assert uninstalled == ["aw-dead"] and list(api.leases) == [lease_name("aw-alive")]


def test_a_lease_renewed_after_the_reapers_list_keeps_its_release():
    api = MemoryLeases()
    lease(api, "aw-back", NOW - timedelta(seconds=100), grace=30)
    trainer = ReleaseLease(api, "rl", "aw-back", grace_seconds=30)  # type: ignore[arg-type]
    api.before_delete = lambda name: trainer.renew()  # the trainer comes back between list and delete
    uninstalled: list[str] = []
    outcomes = reap(api, "rl", uninstalled.append, now=NOW)  # type: ignore[arg-type]
    assert [o.action for o in outcomes] == ["renewed meanwhile"] and uninstalled == []


def test_leases_of_others_are_ignored():
    other = client.V1Lease(
        metadata=client.V1ObjectMeta(name="kube-scheduler", labels={}),
        spec=client.V1LeaseSpec(holder_identity="x", renew_time=NOW),
    )
    assert lease_states([other]) == []


def test_renewals_go_on_after_the_apiserver_was_unreachable():
    from urllib3.exceptions import MaxRetryError

    api = MemoryLeases()
    lease = ReleaseLease(api, "rl", "aw-a", grace_seconds=0.8)  # type: ignore[arg-type]  # renews every 0.2 s
    lease.start()
    read = api.read_namespaced_lease
    failures = {"left": 3}

    def flaky(name: str, namespace: str) -> client.V1Lease:
        if failures["left"]:
            failures["left"] -= 1
            raise MaxRetryError(None, "/apis/coordination.k8s.io", "connection refused")  # type: ignore[arg-type]
        return read(name, namespace)

    api.read_namespaced_lease = flaky  # type: ignore[method-assign]
    version = api.leases[lease_name("aw-a")].metadata.resource_version
    deadline = time.monotonic() + 60
    while api.leases[lease_name("aw-a")].metadata.resource_version == version or failures["left"]:
        assert time.monotonic() < deadline, "no renewal after the apiserver came back"
        time.sleep(0.05)
    assert lease.running
    lease.stop()
    assert not lease.running
