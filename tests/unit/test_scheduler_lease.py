"""When a scheduler holds its trainer's Lease: exactly while there is a release for it to keep alive. Building a
scheduler creates nothing; the first create_workers takes the Lease before it installs; a failed first install and
delete_workers() give it up; a scheduler that adopts an installed release holds it from the start. A namespace that
cannot be used stops the constructor before anything is written."""

from __future__ import annotations

import pytest

from areal_workers import ClusterAccessError, KubernetesScheduler, KubernetesSchedulerConfig
from areal_workers.areal_types import Job, SchedulingSpec
from areal_workers.cluster_access import missing_namespace
from areal_workers.errors import WorkerCreationError
from areal_workers.runtime.lease import ReleaseLease, lease_name
from memory_backend import MemoryCluster, MemoryLeases, memory_connect

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

    def make(cluster: MemoryCluster, access_error: BaseException | None = None) -> KubernetesScheduler:
        lease = ReleaseLease(leases, "ns", RELEASE, grace_seconds=60)  # type: ignore[arg-type]
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
