"""The reaper's judgement, against an in-memory coordination API: a trainer is dead only once the reaper has seen
its Lease unchanged for longer than the grace on the reaper's own clock, over two looks (the trainer's clock is never
compared with it); the release is uninstalled before its Lease is deleted, and one release's failure does not stop
the others."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from kubernetes import client

from areal_workers.runtime.lease import ReleaseLease, lease_body, lease_name
from areal_workers.runtime.lease_record import OBSERVED_ANNOTATION, REAPING_ANNOTATION, Observation, judge
from areal_workers.runtime.reaper import UninstallFailed, lease_state, reap
from memory_backend import MemoryLeases

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)  # the reaper's clock
GRACE = 30


def trainer_writes(api: MemoryLeases, release: str, renewed: datetime, grace: int = GRACE) -> None:
    """A renewal as a trainer makes it: the Lease replaced, stamped with the trainer's clock."""
    body = lease_body(release, "laptop/1", grace, renewed)
    name = lease_name(release)
    if name in api.leases:
        body.metadata.resource_version = api.leases[name].metadata.resource_version
        api.replace_namespaced_lease(name, "rl", body)
    else:
        api.create_namespaced_lease("rl", body)


def actions(outcomes) -> list[tuple[str, str]]:
    return [(o.lease.release, o.action) for o in outcomes]


def test_a_lease_whose_renew_time_is_an_hour_old_but_which_changes_between_looks_is_alive():
    api = MemoryLeases()
    behind = NOW - timedelta(hours=1)  # the trainer's clock is an hour behind the reaper's
    trainer_writes(api, "aw-behind", behind)
    uninstalled: list[str] = []
    assert actions(reap(api, "rl", uninstalled.append, now=NOW)) == [("aw-behind", "alive")]
    trainer_writes(api, "aw-behind", behind + timedelta(seconds=10))
    later = NOW + timedelta(seconds=GRACE * 10)
    [outcome] = reap(api, "rl", uninstalled.append, now=later)
    assert (outcome.action, outcome.silent_seconds) == ("alive", 0.0) and uninstalled == []
    assert lease_name("aw-behind") in api.leases


def test_an_unchanged_lease_is_reaped_only_after_the_grace_on_the_reapers_clock():
    api = MemoryLeases()
    trainer_writes(api, "aw-dead", NOW + timedelta(hours=2))  # a trainer clock ahead changes nothing either
    uninstalled: list[str] = []
    looks = [NOW, NOW + timedelta(seconds=GRACE - 1), NOW + timedelta(seconds=GRACE + 1)]
    outcomes = [reap(api, "rl", uninstalled.append, now=at)[0] for at in looks]
    assert [(o.action, round(o.silent_seconds)) for o in outcomes] == [
        ("alive", 0),
        ("alive", GRACE - 1),
        ("reaped", GRACE + 1),
    ]
    assert uninstalled == ["aw-dead"] and api.leases == {}


def test_a_lease_long_unrenewed_is_never_reaped_at_the_first_look():
    api = MemoryLeases()
    trainer_writes(api, "aw-old", NOW - timedelta(days=10))
    uninstalled: list[str] = []
    assert actions(reap(api, "rl", uninstalled.append, now=NOW)) == [("aw-old", "alive")]
    assert uninstalled == [] and OBSERVED_ANNOTATION in api.leases[lease_name("aw-old")].metadata.annotations


def test_a_dry_run_judges_from_the_last_look_and_writes_nothing():
    api = MemoryLeases()
    trainer_writes(api, "aw-dead", NOW)
    reap(api, "rl", lambda release: None, now=NOW)
    kept = api.leases[lease_name("aw-dead")].metadata.resource_version
    later = NOW + timedelta(seconds=GRACE + 1)
    assert actions(reap(api, "rl", pytest.fail, dry_run=True, now=later)) == [("aw-dead", "would reap")]
    assert api.leases[lease_name("aw-dead")].metadata.resource_version == kept


def test_a_lease_renewed_after_the_reapers_list_keeps_its_release():
    api = MemoryLeases()
    trainer_writes(api, "aw-back", NOW)
    reap(api, "rl", pytest.fail, now=NOW)
    trainer = ReleaseLease(api, "rl", "aw-back", grace_seconds=GRACE)  # type: ignore[arg-type]
    trainer.holder = "laptop/1"

    def comes_back(name: str) -> None:  # between the reaper's list and its mark
        api.before_write = lambda name: None
        trainer.renew()

    api.before_write = comes_back
    later = NOW + timedelta(seconds=GRACE + 1)
    assert actions(reap(api, "rl", pytest.fail, now=later)) == [("aw-back", "renewed meanwhile")]
    assert REAPING_ANNOTATION not in (api.leases[lease_name("aw-back")].metadata.annotations or {})


def dead(api: MemoryLeases, *releases: str) -> datetime:
    """Leases the reaper has seen unchanged past the grace at the returned time."""
    for release in releases:
        trainer_writes(api, release, NOW)
    reap(api, "rl", pytest.fail, now=NOW)
    return NOW + timedelta(seconds=GRACE + 1)


def test_the_release_is_uninstalled_before_its_lease_is_deleted():
    api = MemoryLeases()
    later = dead(api, "aw-dead")

    def uninstall(release: str) -> None:
        lease = api.leases[lease_name(release)]  # still there, and marked: a failure here leaves it for the next reap
        assert REAPING_ANNOTATION in lease.metadata.annotations

    assert actions(reap(api, "rl", uninstall, now=later)) == [("aw-dead", "reaped")] and api.leases == {}


def test_a_failed_uninstall_is_reported_the_others_are_reaped_and_the_next_reap_finishes_it():
    api = MemoryLeases()
    trainer = ReleaseLease(api, "rl", "aw-a", grace_seconds=GRACE)  # type: ignore[arg-type]
    trainer.holder = "laptop/1"
    trainer.renew()  # a trainer that held its Lease, then stalled
    later = dead(api, "aw-a", "aw-b")
    uninstalled: list[str] = []

    def uninstall(release: str) -> None:
        if release == "aw-a":
            raise UninstallFailed("helm uninstall: context deadline exceeded")
        uninstalled.append(release)

    outcomes = reap(api, "rl", uninstall, now=later)
    assert actions(outcomes) == [("aw-a", "failed"), ("aw-b", "reaped")] and uninstalled == ["aw-b"]
    assert "context deadline exceeded" in outcomes[0].error and list(api.leases) == [lease_name("aw-a")]
    trainer.renew()  # its trainer, come back, learns that its workers are going and writes nothing
    assert trainer.lost is not None and "reaper" in trainer.lost
    assert actions(reap(api, "rl", uninstalled.append, now=later)) == [("aw-a", "reaped")]
    assert uninstalled == ["aw-b", "aw-a"] and api.leases == {}


def test_every_lease_request_has_a_time_out():
    api = MemoryLeases()
    later = dead(api, "aw-dead")
    reap(api, "rl", lambda release: None, now=later)
    assert api.timeouts and None not in api.timeouts[1:]  # [0]: the test's own create


def test_leases_of_others_are_ignored():
    other = client.V1Lease(
        metadata=client.V1ObjectMeta(name="kube-scheduler", labels={}),
        spec=client.V1LeaseSpec(holder_identity="x", renew_time=NOW),
    )
    assert lease_state(other) is None


def test_the_judgement_counts_from_the_first_sight_and_never_below_zero():
    first = judge("r1", None, GRACE, NOW)
    assert (first.silent_seconds, first.dead, first.observation) == (0.0, False, Observation("r1", NOW, NOW))
    assert judge("r2", first.observation, GRACE, NOW + timedelta(hours=1)).silent_seconds == 0.0  # it changed
    assert judge("r1", first.observation, GRACE, NOW - timedelta(hours=1)).silent_seconds == 0.0  # clock went back
    assert judge("r1", first.observation, GRACE, NOW + timedelta(seconds=GRACE + 1)).dead


def test_a_lease_labelled_for_a_release_it_is_not_named_after_is_ignored():
    """Anyone who may create Leases could otherwise have a live trainer's release uninstalled: a decoy labelled for
    it, never renewed, would be judged dead."""
    api = MemoryLeases()
    decoy = lease_body("aw-victim", "someone/1", GRACE, NOW)
    decoy.metadata.name = "decoy"
    api.create_namespaced_lease("rl", decoy)
    uninstalled: list[str] = []
    for at in (NOW, NOW + timedelta(seconds=GRACE * 10)):
        assert reap(api, "rl", uninstalled.append, now=at) == []
    assert uninstalled == []


def test_every_look_is_timed_by_the_apiserver_never_by_the_reaper_pods_clock():
    """Two reaper runs land on two nodes whose clocks disagree: the silence is measured between the apiserver's
    times of the two looks (the Date of its answers), so a reaper pod whose clock is an hour ahead reaps nothing."""
    api = MemoryLeases()
    trainer_writes(api, "aw-alive", NOW)
    uninstalled: list[str] = []
    api.server_time = NOW
    assert actions(reap(api, "rl", uninstalled.append)) == [("aw-alive", "alive")]
    api.server_time = NOW + timedelta(seconds=GRACE - 5)  # this pod's own clock would say an hour later
    [outcome] = reap(api, "rl", uninstalled.append)
    assert (outcome.action, outcome.silent_seconds) == ("alive", GRACE - 5) and uninstalled == []
    api.server_time = NOW + timedelta(seconds=GRACE + 5)
    assert actions(reap(api, "rl", uninstalled.append)) == [("aw-alive", "reaped")]


def test_a_look_long_after_the_previous_one_starts_the_count_again():
    """The reaper stopped (or the apiserver was away, when no trainer could renew either) for longer than two of
    its periods: that gap is not the trainer's silence."""
    api = MemoryLeases()
    trainer_writes(api, "aw-back", NOW)
    uninstalled: list[str] = []
    period = 60.0
    reap(api, "rl", uninstalled.append, now=NOW, max_gap=2 * period)
    after_outage = NOW + timedelta(seconds=10 * period)
    [outcome] = reap(api, "rl", uninstalled.append, now=after_outage, max_gap=2 * period)
    assert (outcome.action, outcome.silent_seconds) == ("alive", 0.0) and uninstalled == []
    later = after_outage + timedelta(seconds=GRACE + 1)  # looks on schedule again, the Lease still unchanged
    assert actions(reap(api, "rl", uninstalled.append, now=later, max_gap=2 * period)) == [("aw-back", "reaped")]
