"""The trainer's side of the Lease, against an in-memory coordination API: renewals with a time-out on every
request, a Lease lost after the first renewal (deleted, marked by a reaper, taken over) never re-created, and one
controller per trial: a live holder refused, a dead one's Lease taken over after watching it, and `lease_takeover`
taking it at once. A Lease that cannot be taken names the cause; running without a Lease is offered only where it
helps (a Role without the leases rule), not for a missing namespace, rejected credentials or an absent server."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from areal_workers.cluster_access import missing_namespace
from areal_workers.errors import ClusterAccessError, LeaseHeldError, LeaseLostError, WorkerCreationError
from areal_workers.runtime.lease import LEASE_LABEL, ReleaseLease, lease_name, renew_interval, request_timeout
from areal_workers.runtime.lease_record import REAPING_ANNOTATION
from memory_backend import FailingLeases, MemoryLeases
from test_cluster_access import FORBIDDEN_LEASE, SERVER, api_error, refused

NAME = lease_name("aw-a")


def trainer(api: MemoryLeases, **kwargs) -> ReleaseLease:
    return ReleaseLease(api, "rl", "aw-a", grace_seconds=60, **kwargs)  # type: ignore[arg-type]


def test_intervals_leave_room_for_missed_renewals_and_hung_requests():
    assert renew_interval(300) == 10 and renew_interval(8) == 2 and renew_interval(0.1) == 0.2
    assert request_timeout(300) == 10 and request_timeout(0.8) == 2


def test_a_lease_is_created_and_renewed_with_a_time_out_on_every_request():
    api = MemoryLeases()
    first = trainer(api)
    first.renew()
    stored = api.leases[NAME]
    assert stored.metadata.labels[LEASE_LABEL] == "aw-a" and stored.spec.lease_duration_seconds == 60
    acquired = stored.spec.acquire_time
    first.renew()
    assert api.leases[NAME].spec.acquire_time == acquired  # a renewal keeps the acquire time
    assert api.timeouts and set(api.timeouts) == {request_timeout(60)}
    first.delete()
    first.delete()  # already gone: fine
    assert api.leases == {}


def test_two_schedulers_of_one_process_are_two_holders():
    api = MemoryLeases()
    assert trainer(api).holder != trainer(api).holder


def test_a_lease_deleted_after_the_first_renewal_is_lost_and_never_re_created():
    api = MemoryLeases()
    held = trainer(api)
    held.start()
    held.stop()
    api.leases.clear()  # a reaper deleted it
    held.renew()
    assert api.leases == {} and held.lost is not None and held.lost.startswith("deleted")
    with pytest.raises(LeaseLostError, match="was deleted") as raised:
        held.require_held()
    assert isinstance(raised.value, WorkerCreationError) and "lease_grace_seconds" in raised.value.diagnosis
    with pytest.raises(LeaseLostError):
        held.start()  # nor taken again by this scheduler


def test_a_lease_marked_by_a_reaper_or_taken_over_is_lost():
    api = MemoryLeases()
    held = trainer(api)
    held.renew()
    api.leases[NAME].metadata.annotations = {REAPING_ANNOTATION: "2026-11-30T12:00:00+00:00"}
    held.renew()
    assert held.lost is not None and "reaper" in held.lost
    assert REAPING_ANNOTATION in api.leases[NAME].metadata.annotations  # left as the reaper marked it

    api = MemoryLeases()
    held, other = trainer(api), trainer(api, takeover=True)
    held.renew()
    other.start()
    other.stop()
    held.renew()
    assert held.lost == f"taken over by {other.holder}"
    assert api.leases[NAME].spec.holder_identity == other.holder and api.leases[NAME].spec.lease_transitions == 1
    held.delete()  # not its Lease any more: left alone
    assert NAME in api.leases


def test_a_takeover_wins_over_a_live_holder_renewing_between_its_read_and_its_write():
    api = MemoryLeases()
    live = trainer(api)
    live.renew()
    renewals = iter(range(2))  # the holder writes between the taker's read and its write, twice, then not
    api.before_write = lambda name: next(renewals, None) is not None and api._stored(api.leases[name])
    taker = trainer(api, takeover=True)
    taker.start()
    taker.stop()
    assert api.leases[NAME].spec.holder_identity == taker.holder

    # Without takeover, a write after the last look is another controller's: refused, the Lease left as it is.
    api = MemoryLeases()
    first = trainer(api)
    first.renew()
    api.before_write = lambda name: api._stored(api.leases[name])
    late = trainer(api, sleep=lambda seconds: None)
    with pytest.raises(LeaseHeldError, match="at the same moment"):
        late.start()
    assert api.leases[NAME].spec.holder_identity == first.holder


def test_a_live_holder_is_refused_and_its_lease_left_alone():
    api = MemoryLeases()
    live = trainer(api)
    live.renew()
    second = trainer(api, sleep=lambda seconds: live.renew())  # the holder renews while the second one watches
    with pytest.raises(LeaseHeldError, match="another controller of this trial is alive") as refused:
        second.start()
    assert "lease_takeover" in str(refused.value) and "AREAL_K8S_LEASE_TAKEOVER" in str(refused.value)
    assert api.leases[NAME].spec.holder_identity == live.holder and not second.running


def test_a_dead_holders_lease_is_taken_over_after_two_of_its_renewal_intervals():
    api = MemoryLeases()
    trainer(api).renew()  # its holder died
    slept: list[float] = []
    successor = trainer(api, sleep=slept.append)
    successor.start()
    successor.stop()
    assert sum(slept) == pytest.approx(2 * renew_interval(60))
    assert api.leases[NAME].spec.holder_identity == successor.holder


def test_a_lease_being_reaped_is_not_taken():
    api = MemoryLeases()
    trainer(api).renew()
    api.leases[NAME].metadata.annotations = {REAPING_ANNOTATION: "2026-11-30T12:00:00+00:00"}
    with pytest.raises(LeaseHeldError, match="a reaper is uninstalling the release"):
        trainer(api, takeover=True).start()


def test_a_takeover_racing_a_reapers_mark_is_refused_and_leaves_the_mark():
    api = MemoryLeases()
    trainer(api).renew()

    def mark(name: str) -> None:  # the reaper marks the Lease between the taker's read and its write
        stored = api.leases[name]
        if not (stored.metadata.annotations or {}).get(REAPING_ANNOTATION):
            stored.metadata.annotations = {REAPING_ANNOTATION: "2026-11-30T12:00:00+00:00"}
            api._stored(stored)

    api.before_write = mark
    with pytest.raises(LeaseHeldError, match="a reaper is uninstalling the release"):
        trainer(api, takeover=True).start()
    assert api.leases[NAME].metadata.annotations[REAPING_ANNOTATION]

    # The same mark made while a successor watches a silent holder's Lease.
    api = MemoryLeases()
    trainer(api).renew()

    def reaper_looks(seconds: float) -> None:
        api.leases[NAME].metadata.annotations = {REAPING_ANNOTATION: "2026-11-30T12:00:00+00:00"}
        api._stored(api.leases[NAME])

    with pytest.raises(LeaseHeldError, match="a reaper is uninstalling the release"):
        trainer(api, sleep=reaper_looks).start()
    assert api.leases[NAME].metadata.annotations[REAPING_ANNOTATION]


def test_renewals_go_on_after_the_apiserver_was_unreachable():
    from urllib3.exceptions import MaxRetryError

    api = MemoryLeases()
    lease = ReleaseLease(api, "rl", "aw-a", grace_seconds=0.8)  # type: ignore[arg-type]  # renews every 0.2 s
    lease.start()
    read = api.read_namespaced_lease
    failures = {"left": 3}

    def flaky(name: str, namespace: str, **kwargs) -> client.V1Lease:
        if failures["left"]:
            failures["left"] -= 1
            raise MaxRetryError(None, "/apis/coordination.k8s.io", "connection refused")  # type: ignore[arg-type]
        return read(name, namespace, **kwargs)

    api.read_namespaced_lease = flaky  # type: ignore[method-assign]
    version = api.leases[NAME].metadata.resource_version
    deadline = time.monotonic() + 60
    while api.leases[NAME].metadata.resource_version == version or failures["left"]:
        assert time.monotonic() < deadline, "no renewal after the apiserver came back"
        time.sleep(0.05)
    assert lease.running and lease.lost is None
    lease.stop()
    assert not lease.running


def start_failure(error: BaseException) -> ClusterAccessError:
    with pytest.raises(ClusterAccessError) as raised:
        trainer(FailingLeases(error, SERVER)).start()  # type: ignore[arg-type]
    return raised.value


NAMESPACE_NOT_FOUND = api_error(404, 'namespaces "rl" not found', {"name": "rl", "kind": "namespaces"})
WITHOUT_A_LEASE = (
    "; or set lease_grace_seconds=0 (AREAL_K8S_LEASE_GRACE_SECONDS=0) to run without a Lease (and without the "
    "reaper's clean-up)"
)


def test_running_without_a_lease_is_offered_only_where_it_helps():
    """A Role without the leases rule: a scheduler without a Lease needs none. Nothing about the Lease helps a
    namespace that does not exist, rejected credentials or an API server that does not answer."""
    forbidden = start_failure(api_error(403, FORBIDDEN_LEASE))
    assert forbidden.cause == "forbidden" and str(forbidden).endswith(WITHOUT_A_LEASE)
    for error, cause in [
        (NAMESPACE_NOT_FOUND, "namespace-missing"),
        (api_error(401, "Unauthorized"), "unauthorized"),
        (refused(), "unreachable"),
    ]:
        failure = start_failure(error)
        assert failure.cause == cause and "lease_grace_seconds" not in str(failure), str(failure)


def test_the_namespace_missing_message_of_a_starting_lease_is_the_namespace_check_s_one_line():
    failure = start_failure(NAMESPACE_NOT_FOUND)
    assert "\n" not in str(failure) and str(failure) == str(missing_namespace("rl"))
