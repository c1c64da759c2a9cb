"""When a scheduler holds its trainer's Lease: exactly while there is a release for it to keep alive. Building a
scheduler creates nothing; the first create_workers takes the Lease before it installs; a failed first install and
delete_workers() give it up; a scheduler that adopts an installed release holds it from the start. A namespace that
cannot be used stops the constructor before anything is written. A scheduler whose Lease was lost gets an error on
every call, never fresh workers; a second live controller of the trial is refused unless it asks for the takeover."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from areal_workers import ClusterAccessError, KubernetesScheduler, KubernetesSchedulerConfig
from areal_workers.areal_types import Job, SchedulingSpec
from areal_workers.cluster_access import missing_namespace
from areal_workers.errors import LeaseHeldError, LeaseLostError, WorkerCreationError
from areal_workers.runtime.lease import ReleaseLease, lease_name
from memory_backend import FailingLeases, MemoryCluster, MemoryLeases, memory_connect
from test_cluster_access import api_error

RELEASE = "trial-release"


def job(role: str, image: str = "example.com/areal:1") -> Job:
    return Job(
        role=role,
        replicas=2,
        tasks=[SchedulingSpec(cpu=1, mem=1, gpu=0, image=image, cmd="python -m areal.infra.rpc.rpc_server")],
    )


@pytest.fixture
def leases() -> MemoryLeases:
    return MemoryLeases()


@pytest.fixture
def make_scheduler(leases):
    made: list[KubernetesScheduler] = []

    def make(cluster: MemoryCluster, access_error: BaseException | None = None, **lease_options) -> KubernetesScheduler:
        lease = ReleaseLease(leases, "ns", RELEASE, grace_seconds=60, **lease_options)  # type: ignore[arg-type]
        scheduler = KubernetesScheduler(
            config=KubernetesSchedulerConfig(namespace="ns", release_name=RELEASE),
            experiment_name="exp",
            trial_name="trial",
            connect=memory_connect(cluster, lease=lease, access_error=access_error),
        )
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        scheduler.close()


def test_a_new_scheduler_takes_no_lease_until_its_first_install(make_scheduler, leases):
    cluster = MemoryCluster(RELEASE)
    scheduler = make_scheduler(cluster)
    assert leases.leases == {} and not scheduler.lease.running
    scheduler.create_workers(job("actor"))
    assert list(leases.leases) == [lease_name(RELEASE)] and scheduler.lease.running


def test_a_failed_first_install_gives_the_lease_up(make_scheduler, leases):
    cluster = MemoryCluster(RELEASE)
    scheduler = make_scheduler(cluster)
    cluster.fail_next_apply = "Error: INSTALLATION FAILED: quota exceeded"
    with pytest.raises(WorkerCreationError, match="helm upgrade failed"):
        scheduler.create_workers(job("actor"))
    assert leases.leases == {} and not scheduler.lease.running
    scheduler.create_workers(job("actor"))  # a retry takes it again
    assert list(leases.leases) == [lease_name(RELEASE)]


def test_deleting_every_worker_gives_the_lease_up_and_creating_again_takes_it(make_scheduler, leases):
    cluster = MemoryCluster(RELEASE)
    scheduler = make_scheduler(cluster)
    scheduler.create_workers(job("actor"))
    scheduler.delete_workers()
    assert leases.leases == {} and not scheduler.lease.running
    scheduler.create_workers(job("actor"))
    assert list(leases.leases) == [lease_name(RELEASE)]


def test_a_scheduler_adopting_an_installed_release_holds_the_lease_at_once(make_scheduler, leases):
    cluster = MemoryCluster(RELEASE)
    make_scheduler(cluster).create_workers(job("actor"))
    leases.leases.clear()  # as after a grace period with no trainer, just before a reaper looked
    successor = make_scheduler(cluster)
    assert list(leases.leases) == [lease_name(RELEASE)] and successor.lease.running


def test_a_namespace_that_cannot_be_used_stops_the_constructor_before_anything_is_written(make_scheduler, leases):
    cluster = MemoryCluster(RELEASE)
    with pytest.raises(ClusterAccessError, match="^namespace ns does not exist: create it"):
        make_scheduler(cluster, access_error=missing_namespace("ns"))
    assert leases.leases == {} and cluster.revisions == []


def test_a_namespace_gone_before_the_first_install_is_named_in_one_line_without_lease_advice():
    """The namespace existed when the scheduler was built and was deleted before its first create_workers: the
    Lease's creation is answered 404 for the namespace, and the trainer is told that, not to change its Lease."""
    cluster = MemoryCluster(RELEASE)
    leases = FailingLeases(api_error(404, 'namespaces "ns" not found', {"name": "ns", "kind": "namespaces"}))
    scheduler = KubernetesScheduler(
        config=KubernetesSchedulerConfig(namespace="ns", release_name=RELEASE),
        experiment_name="exp",
        trial_name="trial",
        connect=memory_connect(cluster, lease=ReleaseLease(leases, "ns", RELEASE, grace_seconds=60)),  # type: ignore[arg-type]
    )
    try:
        with pytest.raises(ClusterAccessError) as raised:
            scheduler.create_workers(job("actor"))
    finally:
        scheduler.close()
    assert raised.value.cause == "namespace-missing" and cluster.revisions == []
    assert "\n" not in str(raised.value) and str(raised.value) == str(missing_namespace("ns"))


def test_a_trainer_whose_lease_was_deleted_gets_an_error_not_fresh_workers(make_scheduler, leases):
    cluster = MemoryCluster(RELEASE)
    scheduler = make_scheduler(cluster)
    scheduler.create_workers(job("actor"))
    revisions = len(cluster.revisions)
    leases.leases.clear()  # a reaper judged it dead (it stalled past the grace) and deleted its Lease
    scheduler.lease.renew()  # its next renewal
    assert leases.leases == {} and scheduler.lease.lost  # not re-created; renewals stop
    with pytest.raises(LeaseLostError, match=f"Lease {lease_name(RELEASE)} was deleted"):
        scheduler.create_workers(job("critic"))
    for call in (lambda: scheduler.get_workers("actor"), scheduler.delete_workers):
        with pytest.raises(LeaseLostError):
            call()
    assert len(cluster.revisions) == revisions and cluster.installed  # nothing written: the reaper's to remove


def test_a_second_live_controller_of_the_trial_is_refused(make_scheduler, leases):
    cluster = MemoryCluster(RELEASE)
    first = make_scheduler(cluster)
    first.create_workers(job("actor"))
    with pytest.raises(LeaseHeldError, match="another controller of this trial is alive"):
        make_scheduler(cluster, sleep=lambda seconds: first.lease.renew())  # first renews while it watches
    assert leases.leases[lease_name(RELEASE)].spec.holder_identity == first.lease.holder
    first.scale_workers("actor", 3)  # the first one goes on undisturbed


def test_a_takeover_makes_the_previous_controller_stop_writing(make_scheduler, leases):
    cluster = MemoryCluster(RELEASE)
    first = make_scheduler(cluster)
    first.create_workers(job("actor"))
    second = make_scheduler(cluster, takeover=True)
    first.lease.renew()
    with pytest.raises(LeaseLostError, match=f"taken over by {second.lease.holder}"):
        first.delete_workers()
    assert cluster.installed  # the second one's workers stay
    second.delete_workers()
    assert not cluster.installed and leases.leases == {}


def test_a_stalled_trainer_whose_lease_was_reaped_learns_it_before_its_next_write(make_scheduler, leases):
    """The renewal thread marks a lost Lease only at its next turn; a trainer that wakes from a stall longer than
    the renewal interval confirms the Lease with the apiserver before it writes, so it never re-installs workers
    the reaper just removed."""
    cluster = MemoryCluster(RELEASE)
    scheduler = make_scheduler(cluster)
    scheduler.create_workers(job("actor"))
    revisions = len(cluster.revisions)
    leases.leases.clear()  # reaped while the trainer stalled
    lease = scheduler.lease
    lease._clock = lambda: lease._renewed_at + 3600.0  # an hour since its last renewal
    with pytest.raises(LeaseLostError, match="was deleted"):
        scheduler.create_workers(job("critic"))
    assert len(cluster.revisions) == revisions and leases.leases == {}


def test_a_fresh_renewal_costs_a_write_no_request(make_scheduler, leases):
    cluster = MemoryCluster(RELEASE)
    scheduler = make_scheduler(cluster)
    scheduler.create_workers(job("actor"))
    requests = len(leases.timeouts)
    scheduler.scale_workers("actor", 3)
    assert len(leases.timeouts) == requests


def test_a_newcomer_refused_by_a_live_trainer_leaves_its_operation_in_flight_alone(make_scheduler, leases):
    """A live trainer's upgrade is pending when a second controller of the trial starts: the newcomer is refused
    on the Lease before it would recover (roll back) that upgrade."""
    cluster = MemoryCluster(RELEASE)
    first = make_scheduler(cluster)
    first.create_workers(job("actor"))
    first.create_workers(job("critic"))
    cluster.revisions[-1].status = SimpleNamespace(value="pending-upgrade")  # its upgrade in flight
    with pytest.raises(LeaseHeldError):
        make_scheduler(cluster, sleep=lambda seconds: first.lease.renew())
    assert cluster.recoveries == [] and cluster.current().status.value == "pending-upgrade"


def test_the_schedulers_own_interrupted_upgrade_is_undone_not_called_anothers(make_scheduler, leases):
    """helm killed mid-upgrade (or the apiserver gone) leaves the revision it wrote pending for ever; it is the
    scheduler's own (it holds the Lease), so it is recovered, and the next change goes through."""
    cluster = MemoryCluster(RELEASE)
    scheduler = make_scheduler(cluster)
    scheduler.create_workers(job("actor"))
    before = cluster.current().values
    cluster.interrupt_next_apply = True
    with pytest.raises(WorkerCreationError) as raised:
        scheduler.create_workers(job("critic"))
    assert "another controller" not in "".join(getattr(raised.value, "__notes__", []))
    assert cluster.recoveries == [2] and cluster.current().status.value == "deployed"
    assert cluster.current().values == before
    scheduler.create_workers(job("critic"))
    assert "critic" in cluster.current().values["roles"]
