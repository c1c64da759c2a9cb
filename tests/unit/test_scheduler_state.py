"""The scheduler's state machine on an in-memory cluster (memory_backend): create, scale, update, colocate, fork,
delete, rollback and adoption, in milliseconds. The same behaviours run against real helm and a real apiserver in
tests/integration; these pin the bookkeeping (revisions, the last all-ready revision, what is pending, what
AReaL holds) where each step can be inspected."""

from __future__ import annotations

import pytest

from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig
from areal_workers.areal_types import Job, SchedulingSpec, SchedulingStrategy
from areal_workers.errors import (
    InvalidSchedulerSetupError,
    SchedulerError,
    WorkerCreationError,
    WorkerFailedError,
    WorkerNotFoundError,
    WorkerTimeoutError,
)
from memory_backend import GUARD_PORT, MemoryCluster, MemoryGuard, memory_connect

RELEASE = "trial-release"


def job(role: str, replicas: int, image: str = "example.com/areal:1", port_count: int = 2, **strategy) -> Job:
    task = SchedulingSpec(
        cpu=1, mem=1, gpu=0, port_count=port_count, image=image, cmd="python -m areal.infra.rpc.rpc_server"
    )
    return Job(
        role=role,
        replicas=replicas,
        tasks=[task],
        scheduling_strategy=SchedulingStrategy(**strategy) if strategy else SchedulingStrategy(),
    )


@pytest.fixture
def cluster() -> MemoryCluster:
    return MemoryCluster(RELEASE)


@pytest.fixture
def make_scheduler(cluster):
    made: list[KubernetesScheduler] = []

    def make(guard: MemoryGuard | None = None, **settings) -> KubernetesScheduler:
        config = KubernetesSchedulerConfig(namespace="ns", release_name=RELEASE, **settings)
        scheduler = KubernetesScheduler(
            config=config, experiment_name="exp", trial_name="trial", connect=memory_connect(cluster, guard)
        )
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        scheduler.close()


def descriptions(cluster: MemoryCluster) -> list[str]:
    return [revision.description for revision in cluster.revisions]


def test_a_revision_is_recorded_as_good_once_every_changed_role_is_ready(make_scheduler, cluster):
    """rollout's pods are Ready as soon as they exist here: the cluster, not a get_workers call, says so."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.create_workers(job("rollout", 2))
    assert cluster.ready_revision is None
    assert scheduler.driver.pending() == {"actor", "rollout"}
    scheduler.get_workers("actor")
    assert cluster.ready_revision == 2
    assert scheduler.driver.pending() == set()
    assert descriptions(cluster) == ["create actor: 2 worker(s)", "create rollout: 2 worker(s)"]


def test_a_role_waiting_on_others_not_ready_keeps_the_revision_pending(make_scheduler, cluster):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.create_workers(job("slowpoke", 1, image="example.com/slow:1"))
    scheduler.get_workers("actor")
    assert cluster.ready_revision is None
    assert scheduler.driver.pending() == {"actor", "slowpoke"}


def test_a_fatal_failure_rolls_back_to_the_last_good_revision_and_leaves_the_others_alone(make_scheduler, cluster):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    actor = scheduler.get_workers("actor")
    scheduler.create_workers(job("critic", 1, image="example.com/broken:1"))
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("critic")
    assert "rolled back release trial-release to revision 1" in "\n".join(failed.value.__notes__)
    assert cluster.revisions[-1].description == "Rollback to 1"
    assert set(scheduler.driver.model.roles) == {"actor"}
    assert scheduler.get_workers("actor") == actor
    assert cluster.ready_revision == cluster.revisions[-1].revision


def test_a_first_role_that_never_worked_is_uninstalled(make_scheduler, cluster):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1, image="example.com/broken:1"))
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("actor")
    assert "no revision ever had all workers ready" in "\n".join(failed.value.__notes__)
    assert not cluster.installed and not scheduler.driver.model.installed
    scheduler.create_workers(job("actor", 1))  # a clean start
    assert [w.id for w in scheduler.get_workers("actor")] == ["actor/0"]


def test_a_time_out_changes_nothing(make_scheduler, cluster):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    scheduler.update_workers(job("actor", 1, image="example.com/slow:2"))
    revisions = len(cluster.revisions)
    with pytest.raises(WorkerTimeoutError):
        scheduler.get_workers("actor", timeout=1)
    assert len(cluster.revisions) == revisions
    assert scheduler.driver.pending() == {"actor"}
    assert cluster.ready_revision == 1


def test_a_failed_update_is_rolled_back_and_the_rolled_back_pods_are_not_mistaken_for_the_held_ones(
    make_scheduler, cluster
):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    before = scheduler.get_workers("actor")
    scheduler.update_workers(job("actor", 2, image="example.com/broken:2"))
    with pytest.raises(WorkerFailedError):
        scheduler.get_workers("actor")
    after = scheduler.get_workers("actor")  # new pods of the old spec: a new epoch, not a "replaced" failure
    assert [w.id for w in after] == ["actor/0", "actor/1"]
    assert {w.ip for w in after}.isdisjoint({w.ip for w in before})


def test_an_unbalanced_quote_in_the_command_is_a_worker_creation_error_before_any_revision(make_scheduler, cluster):
    scheduler = make_scheduler()
    bad = job("actor", 1)
    bad.tasks[0].cmd = "python -c 'print(1)"
    with pytest.raises(WorkerCreationError) as refused:
        scheduler.create_workers(bad)
    assert refused.value.worker_key == "actor" and refused.value.reason == "Invalid command"
    assert "No closing quotation" in str(refused.value)
    assert cluster.revisions == []


def test_helms_record_is_read_once_by_a_first_create_and_twice_by_an_adopter(make_scheduler, cluster):
    """No release yet: one `helm status` says so, and nothing is recovered. A release there: read for its chart,
    and again once the Lease is held (what a predecessor may have left pending meanwhile), which the model is then
    read from."""
    creator = make_scheduler()
    creator.create_workers(job("actor", 1))
    assert creator.driver.releases.reads == 1 and descriptions(cluster) == ["create actor: 1 worker(s)"]
    adopter = make_scheduler()
    assert [w.id for w in adopter.get_workers("actor")] == ["actor/0"]
    assert adopter.driver.releases.reads == 2 and adopter.driver.model.revision == 1


def test_a_creator_and_an_adopter_see_the_same_release(make_scheduler, cluster):
    creator = make_scheduler()
    creator.create_workers(job("actor", 2, port_count=3))
    creator.create_workers(job("ref", 2, type="colocation", target="actor", fork=False))
    created = creator.get_workers("actor")
    adopter = make_scheduler()
    assert adopter.driver.model == creator.driver.model
    assert adopter.get_workers("actor") == created
    assert created[0].worker_ports == [str(GUARD_PORT), str(GUARD_PORT + 1), str(GUARD_PORT + 2)]
    assert adopter.get_workers("ref") == created
    assert adopter.driver.good_revision == creator.driver.good_revision


def test_scaling_one_role_keeps_what_is_known_about_the_others(make_scheduler, cluster):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.create_workers(job("rollout", 2))
    scheduler.get_workers("actor")
    scheduler.get_workers("rollout")
    waits = len(cluster.waits)
    assert scheduler.scale_workers("rollout", 3) == ["rollout/0", "rollout/1", "rollout/2"]
    assert scheduler.calls.worker("actor/0").id == "actor/0"  # engine calls still know actor's workers: no wait
    assert len(cluster.waits) == waits
    assert scheduler.calls.worker("rollout/2").id == "rollout/2"  # rollout changed: waited for again
    assert len(cluster.waits) == waits + 1


def test_a_role_with_colocated_dependents_keeps_its_replica_count(make_scheduler):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.create_workers(job("ref", 2, type="colocation", target="actor", fork=False))
    with pytest.raises(WorkerCreationError, match="Replica count mismatch"):
        scheduler.scale_workers("actor", 3)
    with pytest.raises(WorkerCreationError, match="Replica count mismatch"):
        scheduler.update_workers(job("actor", 4))
    with pytest.raises(WorkerCreationError, match="Replica count mismatch"):
        scheduler.create_workers(job("critic", 3, type="colocation", target="actor", fork=False))
    scheduler.update_workers(job("actor", 2, image="example.com/areal:2"))  # the same count is fine


def test_deleting_a_role_deletes_its_dependents_first(make_scheduler, cluster):
    guard = MemoryGuard()
    scheduler = make_scheduler(guard=guard, fork_mode="pod")
    scheduler.create_workers(job("rollout", 1))
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("actor")
    scheduler.create_workers(job("ref", 2, type="colocation", target="actor", fork=False))
    assert scheduler.fork_workers("proxy", "actor") == ["proxy/0", "proxy/1"]
    scheduler.delete_workers("actor")
    assert descriptions(cluster)[-3:] == ["remove colocation ref", "delete fork proxy", "delete actor"]
    assert guard.destroyed == ["proxy/0", "proxy/1", "actor/0", "actor/1"]
    assert {pod.metadata.labels["areal.io/role"] for pod in cluster.pods.values()} == {"rollout"}
    assert scheduler.driver.model.workloads() == {"rollout"}
    with pytest.raises(WorkerNotFoundError):
        scheduler.get_workers("ref")


def test_deleting_the_last_role_uninstalls_the_release_as_delete_all_does(make_scheduler, cluster):
    """AReaL's trainers end with TrainController.destroy() per role, never delete_workers(): the release (its helm
    history, NetworkPolicy, ServiceAccount, Lease) goes with its last workers instead of waiting for the reaper."""
    guard = MemoryGuard()
    scheduler = make_scheduler(guard=guard, fork_mode="pod")
    scheduler.create_workers(job("data", 1))
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("data"), scheduler.get_workers("actor")
    assert scheduler.fork_workers("proxy", "actor") == ["proxy/0", "proxy/1"]
    scheduler.delete_workers("data")
    assert cluster.installed and descriptions(cluster)[-1] == "delete data"
    scheduler.delete_workers("actor")  # its fork first, then the release
    assert not cluster.installed and not cluster.pods and scheduler.lease is None
    assert guard.destroyed == ["data/0", "proxy/0", "proxy/1", "actor/0", "actor/1"]
    scheduler.create_workers(job("actor", 1))  # a new release, from revision 1
    assert cluster.revisions[-1].revision == 1


def test_a_pod_mode_fork_that_fails_is_undone(make_scheduler, cluster):
    scheduler = make_scheduler(fork_mode="pod")
    scheduler.create_workers(job("actor", 1))
    actor = scheduler.get_workers("actor")
    with pytest.raises(WorkerCreationError, match="Failed to fork proxy from actor"):
        scheduler.fork_workers("proxy", "actor", command="broken_module")
    assert "proxy" not in scheduler.driver.model.forks
    assert scheduler.get_workers("actor") == actor
    assert cluster.revisions[-1].description == "Rollback to 1"


def test_delete_all_uninstalls_and_forgets_the_good_revision(make_scheduler, cluster):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("actor")
    scheduler.delete_workers()
    assert not cluster.installed and scheduler.driver.good_revision is None
    scheduler.create_workers(job("actor", 1, image="example.com/broken:1"))
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("actor")
    assert "no revision ever had all workers ready" in "\n".join(failed.value.__notes__)


def test_a_restarted_controller_rolls_back_to_the_recorded_revision(make_scheduler, cluster):
    first = make_scheduler()
    first.create_workers(job("actor", 1))
    first.get_workers("actor")
    first.create_workers(job("critic", 1, image="example.com/broken:1"))
    restarted = make_scheduler()  # the first one died before waiting for critic
    assert restarted.driver.good_revision == 1 and restarted.driver.pending() == {"critic"}
    with pytest.raises(WorkerFailedError):
        restarted.get_workers("critic")
    assert set(restarted.driver.model.roles) == {"actor"}


def test_an_external_release_is_only_discovered(make_scheduler, cluster):
    make_scheduler().create_workers(job("actor", 1))
    external = make_scheduler(ownership="external")
    assert [w.id for w in external.get_workers("actor")] == ["actor/0"]
    for change in (
        lambda: external.create_workers(job("critic", 1)),
        lambda: external.scale_workers("actor", 2),
        lambda: external.delete_workers("actor"),
    ):
        with pytest.raises(WorkerCreationError, match="not allowed on an external release"):
            change()
    assert descriptions(cluster) == ["create actor: 1 worker(s)"]


def test_an_external_install_without_a_helm_record_is_read_from_its_rendered_topology(make_scheduler, cluster):
    """What Argo CD leaves: the chart's objects, its topology ConfigMap included, and no helm release."""
    make_scheduler().create_workers(job("actor", 2))
    cluster.helm_record = False
    external = make_scheduler(ownership="external")
    assert external.driver.model.installed and external.driver.model.revision is None
    assert [w.id for w in external.get_workers("actor")] == ["actor/0", "actor/1"]
    with pytest.raises(WorkerCreationError, match="not allowed on an external release"):
        external.scale_workers("actor", 3)
    with pytest.raises(WorkerCreationError, match="not allowed on an external release"):
        external.delete_workers()
    assert descriptions(cluster) == ["create actor: 2 worker(s)"]


def test_an_external_release_that_is_nowhere_names_both_ways_to_install_it(make_scheduler):
    with pytest.raises(SchedulerError) as missing:
        make_scheduler(ownership="external")
    message = str(missing.value)
    assert "neither a helm release nor the chart's topology ConfigMap" in message
    assert f"releaseName: {RELEASE}" in message and f"helm install {RELEASE}" in message


def test_async_calls_find_known_workers_on_the_callers_loop(make_scheduler, cluster):
    """async_call_engine/create_engine look a known worker up without a thread hop (it cost more than the HTTP
    call itself: bench/rpc_overhead); a worker not known yet is still waited for, in a thread."""
    import asyncio
    import threading

    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    loop_thread: list[threading.Thread] = []
    waited_in: list[threading.Thread] = []
    wait_for_workers = scheduler.calls.worker

    def recording_worker(worker_id: str):
        waited_in.append(threading.current_thread())
        return wait_for_workers(worker_id)

    scheduler.calls.worker = recording_worker  # type: ignore[method-assign]

    async def look_up(worker_id: str):
        loop_thread.append(threading.current_thread())
        return await scheduler.calls.aworker(worker_id)

    first = asyncio.run(look_up("actor/1"))  # not known yet: get_workers runs in a worker thread
    assert first.id == "actor/1" and waited_in and waited_in[0] is not loop_thread[0]
    waited_in.clear()
    assert asyncio.run(look_up("actor/0")).id == "actor/0"
    assert waited_in == []  # known: answered on the loop


def test_a_role_created_again_after_delete_all_is_not_mistaken_for_the_held_one(make_scheduler, cluster):
    """helm numbers revisions from 1 again after an uninstall: the new pods (same names, new uids) must not be
    judged against what AReaL held of the old ones ("replaced after ready")."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    old = scheduler.get_workers("actor")
    scheduler.delete_workers()
    scheduler.create_workers(job("actor", 1))
    assert cluster.revisions[-1].revision == 1
    new = scheduler.get_workers("actor")
    assert new[0].ip != old[0].ip


def test_a_role_created_again_after_its_delete_is_not_mistaken_for_the_held_one(make_scheduler, cluster):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.create_workers(job("rollout", 1))
    scheduler.get_workers("rollout")
    scheduler.delete_workers("rollout")
    scheduler.create_workers(job("rollout", 1))
    assert [w.id for w in scheduler.get_workers("rollout")] == ["rollout/0"]


def test_process_forks_are_recorded_only_when_every_fork_answers(make_scheduler, cluster):
    guard = MemoryGuard()
    scheduler = make_scheduler(guard=guard)
    scheduler.create_workers(job("actor", 2))
    actor = scheduler.get_workers("actor")
    revisions = len(cluster.revisions)
    with pytest.raises(WorkerCreationError, match="Failed to fork 2 out of 2 workers"):
        scheduler.fork_workers("proxy", "actor", command="broken_module")
    assert len(cluster.revisions) == revisions and not guard.forked  # nothing recorded, nothing left running

    assert scheduler.fork_workers("ref", "actor") == ["ref/0", "ref/1"]
    assert cluster.revisions[-1].description == "fork ref from actor (2 processes)"
    forks = scheduler.get_workers("ref")
    assert [w.ip for w in forks] == [w.ip for w in actor]  # in the actor's pods, at the ports allocated there
    assert [w.worker_ports for w in forks] == [
        [str(p) for p in ports] for ports in cluster.current().values["forks"]["ref"]["ports"]
    ]
    adopted = make_scheduler(guard=MemoryGuard())
    assert adopted.get_workers("ref") == forks  # the ports come from the release, not the creator's memory
    scheduler.delete_workers("actor", reverse_order=False)
    assert sorted(guard.killed[-2:]) == [("ref", 0), ("ref", 1)] and not guard.forked


def test_a_held_role_that_fails_later_is_reported_not_rolled_back(make_scheduler, cluster):
    """get_workers returned actor's workers (AReaL holds them) while another change is still pending: a later
    failure of actor's pod (its node gone, an OOM) is reported, and the release is left as it is, as before the
    release model (a rollback is for changes whose workers never came up)."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.create_workers(job("slowpoke", 1, image="example.com/slow:1"))
    scheduler.get_workers("actor")
    assert cluster.ready_revision is None  # slowpoke is not ready: no good revision yet
    pod = cluster.pods["trial-release-actor-0"]
    pod.metadata.annotations["spec"] += " broken"  # the held pod fails
    revisions = len(cluster.revisions)
    with pytest.raises(WorkerFailedError):
        scheduler.get_workers("actor")
    assert len(cluster.revisions) == revisions and cluster.installed
    assert set(scheduler.driver.model.roles) == {"actor", "slowpoke"}


@pytest.mark.parametrize(("experiment", "trial", "named"), [("..", "t", "experiment_name"), ("e", "a/b", "trial_name")])
def test_names_that_are_not_one_directory_name_are_refused_before_the_cluster_is_contacted(experiment, trial, named):
    def connect(*args, **kwargs):
        raise AssertionError("the cluster was contacted")

    with pytest.raises(InvalidSchedulerSetupError) as raised:
        KubernetesScheduler(
            config=KubernetesSchedulerConfig(), experiment_name=experiment, trial_name=trial, connect=connect
        )
    assert str(raised.value).startswith(f"{named} ") and isinstance(raised.value, ValueError)


def test_a_release_of_another_chart_under_the_configured_name_is_left_alone(cluster, make_scheduler):
    cluster.write({"experiment": "exp", "trial": "trial", "roles": {}}, "someone else's")
    cluster.chart = "redis"
    with pytest.raises(InvalidSchedulerSetupError) as raised:
        make_scheduler()
    assert "'redis'" in str(raised.value) and descriptions(cluster) == ["someone else's"]


def test_a_fatal_failure_does_not_undo_another_controllers_revision(make_scheduler, cluster):
    first = make_scheduler()
    first.create_workers(job("actor", 1))
    first.get_workers("actor")
    first.create_workers(job("critic", 1, image="example.com/broken:1"))
    second = make_scheduler()  # a second controller of the trial (these have no Lease to refuse it)
    second.create_workers(job("ref", 1))
    with pytest.raises(WorkerFailedError) as failed:
        first.get_workers("critic")
    assert "revision(s) 3 since then were written by another controller" in "\n".join(failed.value.__notes__)
    assert len(cluster.revisions) == 3 and set(cluster.revisions[-1].values["roles"]) == {"actor", "critic", "ref"}


def test_an_update_says_in_its_revision_what_it_changed(make_scheduler, cluster):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.update_workers(job("actor", 1, image="example.com/areal:2"))
    assert cluster.revisions[-1].description == "update actor: image example.com/areal:1->example.com/areal:2"
    scheduler.update_workers(job("actor", 1, image="example.com/areal:2"))
    assert cluster.revisions[-1].description == "update actor: no change"


def test_a_failed_update_and_its_rollback_are_recorded_for_the_history(make_scheduler, cluster):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("actor")
    scheduler.update_workers(job("actor", 2, image="example.com/broken:2"))
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("actor")
    why = f"{str(failed.value).splitlines()[0]} ({failed.value.worker_id})"
    assert cluster.revision_notes == {2: f"workers failed: {why}", 3: f"after revision 2 failed: {why}"}
    assert len(cluster.revisions) == 3 and cluster.ready_revision == 3
