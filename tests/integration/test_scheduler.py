"""KubernetesScheduler against the real control plane, real helm releases and real guard servers.

Worker pods are run by podrunner (tools/podrunner/): each pod's container command (the chart's, with AReaL's flags)
runs as a local reference guard bound to the pod's own loopback IP, and the pod turns Ready when its guard answers
/health.
Every engine call goes over HTTP to exactly the address the scheduler discovered from the cluster.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import threading

import pytest
from kubernetes import client, watch

from areal_workers import (
    EngineCallError,
    EngineImportError,
    Job,
    KubernetesScheduler,
    KubernetesSchedulerConfig,
    SchedulerError,
    WorkerCreationError,
    WorkerNotFoundError,
    WorkerTimeoutError,
)
from clusterlib import AREAL_LANE, controller_kubeconfig, counter_engine, guard_health, job, spec
from wire_types import ExperimentConfig  # the parts of AReaL's experiment config a scheduler reads

COUNTER = counter_engine()  # a Counter engine the lane's worker server accepts
# Run again in other lanes: on AReaL's real rpc_server (`both_workers`), the tests whose outcome depends on the worker
# server's answers (engine calls, /fork and its failures, the chart's `helm test` of /health, workers restarted in
# place); on helm 4 (`helm4`), tests that together run every helm command the adapter issues (docs/en/testing.md).


@pytest.fixture
def identity(worker_lane) -> str:
    """Who the schedulers act as: the least-privilege controller of rbac/, as a trainer does, on helm 3 and 4 alike;
    cluster admin on AReaL's worker, where the identity changes nothing the tests check (worker-side answers) and the
    controller's setup (rbac/ and its admission policy in the namespace, a token) costs about 5 s a test."""
    return "admin" if worker_lane is AREAL_LANE else "rbac"


# As admin only: tests whose calls make no API request beyond those of the others (checks before anything is read or
# written, reads of the release, HTTP to the guards); test_rbac_rules.py shows each rule of the Role necessary on its
# own.
admin_only = pytest.mark.parametrize("identity", ["admin"])


def helm_values(kubeconfig, helm_executable, namespace, release) -> dict:
    result = subprocess.run(
        [helm_executable, "--kubeconfig", str(kubeconfig), "get", "values", release, "-n", namespace, "-o", "json"],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(result.stdout)


def revisions(scheduler) -> list[int]:
    return [r["revision"] for r in scheduler.history()]


@pytest.mark.helm4
@pytest.mark.reference_guard_only  # /health reports role, index and host; AReaL's real /health does not
def test_create_and_get_workers_return_role_ids_and_the_discovered_guards(make_scheduler):
    scheduler = make_scheduler()
    assert scheduler.create_workers(job("actor", 3)) == ["actor/0", "actor/1", "actor/2"]
    workers = scheduler.get_workers("actor", timeout=60)
    assert [w.id for w in workers] == ["actor/0", "actor/1", "actor/2"]
    assert len({w.ip for w in workers}) == 3
    for index, worker in enumerate(workers):
        assert worker.ip.startswith("127.")
        assert worker.worker_ports == ["8000", "8001"]
        answer = guard_health(worker)
        assert (answer["role"], answer["worker_index"], answer["host"]) == ("actor", index, worker.ip)
    assert [r["description"] for r in scheduler.history()] == ["create actor: 3 worker(s)"]


@pytest.mark.both_workers
@admin_only
def test_engines_are_created_and_called_over_http_on_the_discovered_workers(make_scheduler):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("actor")

    async def engines():
        await scheduler.create_engine("actor/0", COUNTER, None, 10)  # engine_name defaults to the worker id
        await scheduler.create_engine("actor/1", COUNTER, "counter", start=5)
        await scheduler.set_worker_env("actor/1", {"RANK": "1", "WORLD_SIZE": "2"})
        with pytest.raises(EngineImportError):
            await scheduler.create_engine("actor/0", "no_such_module.Engine", "broken")
        first = await scheduler.async_call_engine("actor/0", "increment", "actor/0", 2)
        env = await scheduler.async_call_engine("actor/1", "env", "counter", "WORLD_SIZE")
        return first, env

    assert asyncio.run(engines()) == (12, "2")
    assert scheduler.call_engine("actor/1", "increment", "counter", n=3) == 8
    with pytest.raises(EngineCallError) as failed:
        scheduler.call_engine("actor/0", "fail", "actor/0", "boom")
    assert "boom" in str(failed.value) and failed.value.attempt == 1
    with pytest.raises(WorkerNotFoundError):
        scheduler.call_engine("critic/0", "value", "x")


@admin_only
def test_sync_methods_work_inside_a_running_event_loop(make_scheduler):
    scheduler = make_scheduler()

    async def controller():  # AReaL's controllers call these synchronously from async code
        scheduler.create_workers(job("rollout", 1))
        return scheduler.get_workers("rollout")

    assert [w.id for w in asyncio.run(controller())] == ["rollout/0"]


@admin_only
def test_duplicate_role_is_rejected_without_a_new_revision(make_scheduler):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    with pytest.raises(WorkerCreationError) as duplicate:
        scheduler.create_workers(job("actor", 2))
    assert "already exists" in str(duplicate.value) and duplicate.value.worker_key == "actor"
    assert revisions(scheduler) == [1]


@admin_only
@pytest.mark.helm4  # helm 3 checks the upgrade's own render (its post-renderer waits); helm 4 a `helm template`'s
def test_a_role_no_node_can_hold_is_refused_on_its_render_and_changes_nothing(make_scheduler, kube_client):
    apps = client.AppsV1Api(kube_client)
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    before = {s.metadata.name: s.metadata.uid for s in apps.list_namespaced_stateful_set(scheduler.namespace).items}
    with pytest.raises(WorkerCreationError) as refused:
        scheduler.create_workers(job("huge", 1, [spec(gpu=100)]))
    assert "No node can hold a worker" in str(refused.value) and refused.value.worker_key == "huge"
    assert revisions(scheduler) == [1]
    after = {s.metadata.name: s.metadata.uid for s in apps.list_namespaced_stateful_set(scheduler.namespace).items}
    assert after == before
    assert scheduler.create_workers(job("critic", 1)) == ["critic/0"]  # the next change is written as ever
    assert revisions(scheduler) == [1, 2]


@admin_only
@pytest.mark.parametrize(
    "bad_job, message",
    [
        (Job(role="actor", replicas=0), "replicas must be greater than 0"),
        (Job(role="actor", replicas=-2), "replicas must be greater than 0"),
        (Job(role="Actor!", replicas=1), "must be lowercase"),
        (Job(role="actor", replicas=1, tasks=[spec(nodelist="node[1-4]")]), "node_selector"),
        (Job(role="actor", replicas=1, tasks=[spec(image="/storage/areal.sif")]), "Apptainer images are Slurm-only"),
        (Job(role="actor", replicas=1, tasks=[spec(cmd="python -m x --port 9")]), "should not include --port"),
        (Job(role="actor", replicas=3, tasks=[spec(), spec()]), "must be 1 or equal to replicas"),
        (Job(role="actor", replicas=2, tasks=[spec(), spec(cpu=2)]), "one pod template"),
    ],
    ids=["zero", "negative", "name", "nodelist", "sif", "port", "spec-count", "spec-differs"],
)
def test_bad_jobs_fail_before_anything_is_written(make_scheduler, bad_job, message):
    scheduler = make_scheduler()
    with pytest.raises(WorkerCreationError) as rejected:
        scheduler.create_workers(bad_job)
    assert message in str(rejected.value)
    assert scheduler.history() == []  # no release, no revision


@admin_only
def test_get_workers_of_an_unknown_role(make_scheduler):
    scheduler = make_scheduler()
    with pytest.raises(WorkerNotFoundError) as missing:
        scheduler.get_workers("nonexistent")
    assert missing.value.worker_id == "nonexistent"


def test_workers_that_never_answer_time_out_with_a_diagnosis(make_scheduler):
    scheduler = make_scheduler()
    sleeper = Job(role="slow", replicas=1, tasks=[spec(cmd="python -c 'import time; time.sleep(600)'")])
    scheduler.create_workers(sleeper)
    with pytest.raises(WorkerTimeoutError) as timed_out:
        scheduler.get_workers("slow", timeout=3)
    assert timed_out.value.worker_key == "slow" and timed_out.value.timeout == 3
    assert "0/1 workers ready" in timed_out.value.diagnosis


@pytest.mark.helm4
def test_scaling_a_role_is_one_revision_and_keeps_existing_workers(make_scheduler, core):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    before = {w.id: w.ip for w in scheduler.get_workers("actor")}
    uids = {p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(scheduler.namespace).items}
    assert scheduler.scale_workers("actor", 3) == ["actor/0", "actor/1", "actor/2"]
    after = scheduler.get_workers("actor")
    assert {w.id: w.ip for w in after[:2]} == before
    assert {
        p.metadata.name: p.metadata.uid
        for p in core.list_namespaced_pod(scheduler.namespace).items
        if p.metadata.name in uids
    } == uids
    assert revisions(scheduler) == [1, 2]


def test_colocation_without_fork_maps_the_role_onto_its_target(make_scheduler, core):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    assert scheduler.create_workers(job("ref", 2, type="colocation", target="actor", fork=False)) == [
        "actor/0",
        "actor/1",
    ]
    assert [w.id for w in scheduler.get_workers("ref")] == ["actor/0", "actor/1"]
    pods = {p.metadata.uid for p in core.list_namespaced_pod(scheduler.namespace).items}
    scheduler.delete_workers("ref")
    assert {p.metadata.uid for p in core.list_namespaced_pod(scheduler.namespace).items} == pods
    assert [w.id for w in scheduler.get_workers("actor")] == ["actor/0", "actor/1"]
    assert [r["description"] for r in scheduler.history()][-2:] == ["colocate ref on actor", "remove colocation ref"]


@admin_only
def test_colocation_errors_match_arealss_schedulers(make_scheduler):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    with pytest.raises(WorkerCreationError) as mismatch:
        scheduler.create_workers(job("ref", 3, type="colocation", target="actor", fork=False))
    assert "Replica count mismatch" in str(mismatch.value)
    with pytest.raises(WorkerNotFoundError) as missing:
        scheduler.create_workers(job("ref", 2, type="colocation", target="critic"))
    assert "critic" in str(missing.value)
    with pytest.raises(WorkerCreationError) as no_target:
        scheduler.create_workers(job("ref", 2, type="colocation", target=None))
    assert "requires target" in str(no_target.value)
    assert revisions(scheduler) == [1]


@pytest.mark.helm4
@pytest.mark.reference_guard_only  # the fork's role from /health (test_areal_worker.py: the real server's)
def test_fork_processes_run_beside_their_targets_and_are_recorded_in_the_release(
    make_scheduler, kubeconfig, helm_executable
):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    targets = scheduler.get_workers("actor")
    assert scheduler.create_workers(job("ref", 2, type="colocation", target="actor", fork=True)) == ["ref/0", "ref/1"]
    forks = scheduler.get_workers("ref")
    for target, fork in zip(targets, forks):
        assert fork.ip == target.ip and fork.worker_ports[0] not in target.worker_ports
        assert guard_health(fork)["role"] == "ref"
        assert guard_health(target)["forked_children"] == 1
    recorded = helm_values(kubeconfig, helm_executable, scheduler.namespace, scheduler.release)["forks"]["ref"]
    assert recorded["target"] == "actor" and recorded["mode"] == "process"
    assert recorded["ports"] == [[int(p) for p in fork.worker_ports] for fork in forks]

    asyncio.run(scheduler.create_engine("ref/1", COUNTER, "ref", 100))
    assert scheduler.call_engine("ref/1", "value", "ref") == 100

    scheduler.delete_workers("ref")
    for target in targets:
        assert guard_health(target)["forked_children"] == 0
    with pytest.raises(WorkerNotFoundError):
        scheduler.get_workers("ref")


@pytest.mark.both_workers
def test_a_partial_fork_failure_kills_the_successful_forks(make_scheduler, core):
    scheduler = make_scheduler(fork_module="no_such_module_anywhere")  # exits at once: reported, no time-out
    scheduler.create_workers(job("actor", 2))
    targets = scheduler.get_workers("actor")
    with pytest.raises(WorkerCreationError) as failed:
        scheduler.fork_workers("ref", "actor")
    assert "Failed to fork 2 out of 2 workers" in str(failed.value)
    assert all(guard_health(t)["forked_children"] == 0 for t in targets)
    assert revisions(scheduler) == [1]
    with pytest.raises(WorkerNotFoundError):
        scheduler.fork_workers("ref", "critic")


def test_delete_with_reverse_order_stops_rank_zero_last(make_scheduler, core):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 3))
    scheduler.get_workers("actor")
    deleted: list[str] = []
    listing = core.list_namespaced_pod(scheduler.namespace)

    def record():
        for event in watch.Watch().stream(
            core.list_namespaced_pod,
            scheduler.namespace,
            resource_version=listing.metadata.resource_version,
            timeout_seconds=30,
        ):
            if event["type"] == "DELETED":
                deleted.append(event["object"].metadata.name.rsplit("-", 1)[1])
                if len(deleted) == 3:
                    return

    recorder = threading.Thread(target=record)
    recorder.start()
    scheduler.delete_workers("actor", reverse_order=True)
    recorder.join(timeout=30)
    assert sorted(deleted) == ["0", "1", "2"] and deleted[-1] == "0"
    assert core.list_namespaced_pod(scheduler.namespace).items == []


@pytest.mark.both_workers
@pytest.mark.helm4
def test_delete_all_removes_the_release_and_everything_it_made(
    make_scheduler, core, kube_client, kubeconfig, helm_executable
):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.create_workers(job("rollout", 1))
    scheduler.create_workers(job("ref", 2, type="colocation", target="actor", fork=False))
    scheduler.get_workers("actor")
    scheduler.get_workers("rollout")
    # The platform engineer's `helm test`: its hook Pod is kept after the run, and helm uninstall leaves it.
    subprocess.run(
        [
            helm_executable,
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            scheduler.namespace,
            "test",
            scheduler.release,
            "--timeout",
            "2m",
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    assert [
        p.metadata.name
        for p in core.list_namespaced_pod(scheduler.namespace).items
        if p.metadata.name.endswith("-test-health")
    ]
    scheduler.delete_workers()
    namespace = scheduler.namespace
    assert core.list_namespaced_pod(namespace).items == []
    assert client.AppsV1Api(kube_client).list_namespaced_stateful_set(namespace).items == []
    assert [s for s in core.list_namespaced_secret(namespace).items if s.type == "helm.sh/release.v1"] == []
    scheduler.delete_workers()  # already gone: not an error
    scheduler.delete_workers("actor")


@pytest.mark.both_workers
@pytest.mark.helm4
def test_a_restarted_controller_adopts_the_release_and_two_trials_stay_apart(make_scheduler):
    first = make_scheduler("trial0")
    first.create_workers(job("actor", 2))
    workers = first.get_workers("actor")
    other_trial = make_scheduler("trial1")
    with pytest.raises(WorkerNotFoundError):
        other_trial.get_workers("actor")
    other_trial.create_workers(job("actor", 1))
    assert [w.id for w in other_trial.get_workers("actor")] == ["actor/0"]

    first.close()  # the controller process ends; its Lease stays, no longer renewed
    restarted = make_scheduler("trial0")  # takes the Lease over once it saw it unchanged (runtime/lease.py)
    assert restarted.get_workers("actor") == workers
    # Creating the predecessor's role again restarts its workers in the same pods (orchestration/reclaim.py) ...
    assert restarted.create_workers(job("actor", 2)) == ["actor/0", "actor/1"]
    assert restarted.get_workers("actor") == workers
    with pytest.raises(WorkerCreationError, match="already exists"):  # ... once: now it is the new one's own
        restarted.create_workers(job("actor", 2))


@pytest.mark.reference_guard_only  # /health reports the configuration; AReaL's real /health does not
@admin_only
def test_exp_config_makes_create_wait_and_configure_like_areal(make_scheduler):
    scheduler = make_scheduler(exp_config=ExperimentConfig("exp", "trial2"))
    assert scheduler.n_gpus_per_node == 8
    scheduler.create_workers(job("actor", 2))  # returns only once every worker answered and was configured
    for rank, worker in enumerate(scheduler.get_workers("actor", timeout=60)):
        configured = guard_health(worker)["configured"]
        assert (configured["role"], configured["rank"]) == ("actor", rank)


@pytest.mark.helm4
def test_dry_run_returns_the_manifests_without_writing(make_scheduler):
    scheduler = make_scheduler()
    manifests = scheduler.dry_run(job("actor", 4))
    statefulset = next(m for m in manifests if m["kind"] == "StatefulSet")
    assert statefulset["spec"]["replicas"] == 4
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "1Gi"}
    assert scheduler.history() == []


@pytest.mark.helm4
def test_external_release_is_discovered_but_not_changed(
    make_scheduler, kubeconfig, helm_executable, namespace, tmp_path
):
    owner = make_scheduler("trial0")
    owner.create_workers(job("actor", 2))
    owner.get_workers("actor")
    external = make_scheduler("trial0", ownership="external", release_name=owner.release)
    assert [w.id for w in external.get_workers("actor")] == ["actor/0", "actor/1"]
    with pytest.raises(WorkerCreationError) as refused:
        external.create_workers(job("rollout", 1))
    assert "external" in str(refused.value)


def test_the_controller_identity_cannot_touch_another_namespace(kubeconfig, helm_executable, make_namespace, tmp_path):
    home, elsewhere = make_namespace(), make_namespace()
    credentials = controller_kubeconfig(kubeconfig, home, tmp_path / "controller.yaml")
    config = KubernetesSchedulerConfig(namespace=elsewhere, kubeconfig=credentials, helm_executable=helm_executable)
    with pytest.raises(SchedulerError) as denied:
        scheduler = KubernetesScheduler(config=config, experiment_name="exp", trial_name="trial0")
        scheduler.create_workers(job("actor", 1))
    assert "forbidden" in str(denied.value)
    assert client.CoreV1Api(config_client(kubeconfig)).list_namespaced_pod(elsewhere).items == []


def config_client(kubeconfig):
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


@pytest.mark.reference_guard_only  # the fork's role from /health (test_areal_worker.py: the real server's)
def test_pod_mode_forks_are_sibling_pods_on_their_targets_nodes(make_scheduler, core):
    scheduler = make_scheduler(fork_mode="pod")
    scheduler.create_workers(job("actor", 1))
    target = scheduler.get_workers("actor")[0]
    assert scheduler.create_workers(job("ref", 1, type="colocation", target="actor", fork=True)) == ["ref/0"]
    fork = scheduler.get_workers("ref")[0]
    assert fork.ip != target.ip  # its own pod ...
    pods = {p.metadata.labels["areal.io/role"]: p for p in core.list_namespaced_pod(scheduler.namespace).items}
    assert pods["ref"].spec.node_name == pods["actor"].spec.node_name  # ... on the target's node
    assert guard_health(fork)["role"] == "ref"
    assert [r["description"] for r in scheduler.history()][-1] == "fork ref from actor (pods)"
    scheduler.delete_workers("actor")  # the fork goes first, then its target
    assert core.list_namespaced_pod(scheduler.namespace).items == []
