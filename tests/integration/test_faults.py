"""Fault injection on the local cluster: every fault is diagnosed, fails the role at once, and leaves the release at
its last good revision with every other role untouched.

Real faults where the cluster can produce them (a crashing command, a restarted worker process, a GPU request no node
can hold, an apiserver restart, a deleted pod); written into pod or node status where only a real kubelet could
(image pulls, OOM kills, evictions, NotReady nodes), on pods KWOK and podrunner are told to leave alone.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kubernetes import client

from areal_workers import SchedulerError, WorkerCreationError, WorkerFailedError, WorkerTimeoutError
from clusterlib import HOLD, edited_kubeconfig, job, spec
from fault_nodes import fault_node, make_node_not_ready, remove_fault_node

# It loads or changes what every test shares (nodes, GPU capacity): `make test` runs it in the serial lane, beside
# only the tests whose workers are pinned to the real node (tools/test_lanes.py).
pytestmark = pytest.mark.serial_cluster

LOCAL_ONLY = pytest.mark.skipif(
    bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="starts a second API server of the local cluster"
)


def pod_uids(core, namespace: str, role: str) -> dict[str, str]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"areal.io/role={role}").items
    return {p.metadata.name: p.metadata.uid for p in pods}


def descriptions(scheduler) -> list[str]:
    return [r["description"] for r in scheduler.history()]


def held(role: str) -> dict:
    """Values that make KWOK and podrunner leave this role's pods to the test."""
    return {"roles": {role: {"podAnnotations": HOLD}}}


def wait_for_pods(
    core, namespace: str, role: str, count: int, scheduled: bool = True, without_uid: str | None = None
) -> list[client.V1Pod]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pods = [
            p
            for p in core.list_namespaced_pod(namespace, label_selector=f"areal.io/role={role}").items
            if p.metadata.uid != without_uid and p.metadata.deletion_timestamp is None
        ]
        if len(pods) == count and (not scheduled or all(p.spec.node_name for p in pods)):
            return sorted(pods, key=lambda p: p.metadata.name)
        time.sleep(0.1)
    raise AssertionError(f"{count} pods of {role} not created")


def in_background(function, *args, **kwargs):
    """Runs function in a thread; returns a callable giving (result, error)."""
    outcome: dict = {}

    def run():
        try:
            outcome["result"] = function(*args, **kwargs)
        except (SchedulerError, AssertionError) as error:
            outcome["error"] = error

    thread = threading.Thread(target=run)
    thread.start()

    def join(timeout: float = 90.0):
        thread.join(timeout)
        assert not thread.is_alive(), "the call did not return"
        return outcome.get("result"), outcome.get("error")

    return join


def inject(core, pod: client.V1Pod, status: dict) -> None:
    core.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, {"status": status})


def test_crash_loop_on_create_fails_fast_and_rolls_back(make_scheduler, core):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("actor")
    actor = pod_uids(core, scheduler.namespace, "actor")

    crash = "python -c 'import sys; print(\"cannot load /ckpt/step-100: no such file\", flush=True); sys.exit(3)'"
    scheduler.create_workers(job("broken", 2, [spec(cmd=crash)]))
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("broken", timeout=60)
    assert failed.value.exit_code == 3
    assert "exit code 3" in failed.value.stderr and "broken" in failed.value.worker_id
    assert "cannot load /ckpt/step-100: no such file" in failed.value.stderr  # the worker's own log, via pods/log
    assert f"rolled back release {scheduler.release} to revision 1" in "\n".join(failed.value.__notes__)
    assert descriptions(scheduler) == ["create actor: 2 worker(s)", "create broken: 2 worker(s)", "Rollback to 1"]
    assert pod_uids(core, scheduler.namespace, "broken") == {}
    assert pod_uids(core, scheduler.namespace, "actor") == actor
    assert [w.id for w in scheduler.get_workers("actor")] == ["actor/0", "actor/1"]


def test_a_worker_whose_process_exits_zero_is_failed_not_healthy(make_scheduler):
    """Any terminal state is a dead worker (AReaL's SlurmScheduler since areal-project/AReaL#1583)."""
    scheduler = make_scheduler()
    done = "python -c 'print(\"nothing to serve\", flush=True)'"
    scheduler.create_workers(job("done", 1, [spec(cmd=done)]))
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("done", timeout=60)
    assert (failed.value.worker_id, failed.value.exit_code) == ("done/0", 0)
    assert "exit code 0" in failed.value.stderr and "must keep running" in failed.value.stderr
    assert "nothing to serve" in failed.value.stderr


def test_image_pull_backoff_is_reported_with_the_kubelet_message_and_rolled_back(make_scheduler, core):
    scheduler = make_scheduler(extra_values=held("pulling"))
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    actor = pod_uids(core, scheduler.namespace, "actor")
    scheduler.create_workers(job("pulling", 2))
    pods = wait_for_pods(core, scheduler.namespace, "pulling", 2)
    join = in_background(scheduler.get_workers, "pulling", timeout=60)
    time.sleep(0.5)
    inject(
        core,
        pods[1],
        {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "worker",
                    "image": "registry.example/areal:missing",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "waiting": {
                            "reason": "ImagePullBackOff",
                            "message": 'Back-off pulling image "registry.example/areal:missing": not found',
                        }
                    },
                }
            ],
        },
    )
    _, error = join()
    assert isinstance(error, WorkerFailedError), error  # found in the pod's state, not a time-out
    assert error.worker_id == "pulling/1"
    assert "ImagePullBackOff" in error.stderr and "registry.example/areal:missing" in error.stderr
    assert descriptions(scheduler)[-1] == "Rollback to 1"
    assert pod_uids(core, scheduler.namespace, "actor") == actor


def test_oom_killed_worker_reports_exit_137_and_memory_advice(make_scheduler, core):
    scheduler = make_scheduler(extra_values=held("trainer"))
    scheduler.create_workers(job("trainer", 1))
    pod = wait_for_pods(core, scheduler.namespace, "trainer", 1)[0]
    join = in_background(scheduler.get_workers, "trainer", timeout=60)
    time.sleep(0.5)
    inject(
        core,
        pod,
        {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "worker",
                    "image": "x",
                    "imageID": "",
                    "ready": False,
                    "restartCount": 1,
                    "state": {
                        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting failed container"}
                    },
                    "lastState": {"terminated": {"reason": "OOMKilled", "exitCode": 137}},
                }
            ],
        },
    )
    _, error = join()
    assert isinstance(error, WorkerFailedError), error
    assert error.exit_code == 137
    assert "OOMKilled" in error.stderr and "SIGKILL" in error.stderr and "1Gi" in error.stderr
    assert scheduler.history() == []  # nothing was ever ready: the release is uninstalled


def test_evicted_pod_fails_the_role(make_scheduler, core):
    scheduler = make_scheduler(extra_values=held("rollout"))
    scheduler.create_workers(job("rollout", 2))
    pod = wait_for_pods(core, scheduler.namespace, "rollout", 2)[0]
    join = in_background(scheduler.get_workers, "rollout", timeout=60)
    time.sleep(0.5)
    inject(
        core,
        pod,
        {
            "phase": "Failed",
            "reason": "Evicted",
            "message": "The node was low on resource: memory. Threshold quantity: 100Mi.",
        },
    )
    _, error = join()
    assert isinstance(error, WorkerFailedError), error
    assert "Evicted" in error.stderr and "low on resource: memory" in error.stderr


def test_a_gpu_request_no_node_can_hold_is_diagnosed_from_the_real_scheduler(make_scheduler, core):
    # With capacity_check "off" (clusters that autoscale) the request is written; the real scheduler's verdict fails it.
    scheduler = make_scheduler(capacity_check="off")
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    scheduler.create_workers(job("huge", 2, [spec(gpu=16)]))
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("huge", timeout=60)
    # WorkerFailedError: failed on the scheduler's verdict, not at the time-out (WorkerTimeoutError)
    text = failed.value.stderr
    assert "Unschedulable" in text and "Insufficient nvidia.com/gpu" in text
    assert "16 nvidia.com/gpu" in text and "8" in text
    assert descriptions(scheduler)[-1] == "Rollback to 1"


def test_gpus_in_use_elsewhere_wait_and_time_out_with_the_free_capacity(make_scheduler, core):
    scheduler = make_scheduler()
    scheduler.create_workers(job("gpu", 3, [spec(gpu=8)]))  # 2 nodes with 8 GPUs each: the third never fits now
    with pytest.raises(WorkerTimeoutError) as timed_out:
        scheduler.get_workers("gpu", timeout=8)
    assert "2/3 workers ready" in timed_out.value.diagnosis
    assert "Insufficient nvidia.com/gpu" in timed_out.value.diagnosis
    assert [r["status"] for r in scheduler.history()] == ["deployed"]  # a time-out changes nothing (AReaL)


def test_a_worker_that_restarts_after_it_was_ready_fails_the_role(make_scheduler, core):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    workers = scheduler.get_workers("actor")
    pod = wait_for_pods(core, scheduler.namespace, "actor", 2)[1]
    os.kill(guard_pid(workers[1]), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(pod.metadata.name, scheduler.namespace)
        if pod.status.container_statuses and pod.status.container_statuses[0].restart_count:
            break
        time.sleep(0.2)
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("actor", timeout=30)
    assert failed.value.worker_id == "actor/1"
    assert "RestartedAfterReady" in failed.value.stderr or "engines" in failed.value.stderr
    with pytest.raises(WorkerFailedError):
        scheduler.call_engine("actor/1", "value", "none", max_retries=2, retry_delay=0.1)  # the retry checks the pod


def guard_pid(worker) -> int:
    from clusterlib import guard_health

    return guard_health(worker)["pid"]


def test_a_pod_deleted_during_get_workers_is_replaced_and_waited_for(make_scheduler, core):
    scheduler = make_scheduler(extra_values=held("rollout"))
    scheduler.create_workers(job("rollout", 3, [spec()]))
    pods = wait_for_pods(core, scheduler.namespace, "rollout", 3)
    join = in_background(scheduler.get_workers, "rollout", timeout=60)
    core.delete_namespaced_pod(pods[1].metadata.name, scheduler.namespace)
    deleted = pods[1].metadata.uid
    replaced = wait_for_pods(core, scheduler.namespace, "rollout", 3, without_uid=deleted)
    for pod in replaced:  # release the hold: pods start
        core.patch_namespaced_pod(
            pod.metadata.name, scheduler.namespace, {"metadata": {"annotations": {"areal-workers.dev/kwok-hold": None}}}
        )
    workers, error = join()
    assert error is None, error
    assert [w.id for w in workers] == ["rollout/0", "rollout/1", "rollout/2"]
    assert descriptions(scheduler) == ["create rollout: 3 worker(s)"]


@pytest.fixture
def second_apiserver(kubeconfig, tmp_path) -> Iterator[Path]:
    """The admin kubeconfig of a second kube-apiserver of the local cluster, on its etcd (LocalCluster), stopped after
    the test: restarting it leaves every other test its API server. Requested before make_scheduler, it is stopped
    after the schedulers that test made are deleted through it."""
    from localkube.cluster import LocalCluster

    cluster = LocalCluster()
    server = cluster.start_second_apiserver()
    yield edited_kubeconfig(kubeconfig, tmp_path / "second-apiserver.yaml", server=server)
    cluster.stop_second_apiserver()


@LOCAL_ONLY
def test_the_wait_survives_an_apiserver_restart(second_apiserver, make_scheduler, core):
    from localkube.cluster import LocalCluster

    scheduler = make_scheduler(extra_values=held("rollout"), kubeconfig=str(second_apiserver))
    scheduler.create_workers(job("rollout", 2))
    pods = wait_for_pods(core, scheduler.namespace, "rollout", 2)
    join = in_background(scheduler.get_workers, "rollout", timeout=90)
    time.sleep(0.5)
    LocalCluster().restart("kube-apiserver-second", down_seconds=2)
    for pod in pods:  # through the cluster's own API server: the pods become ready while the wait's was away
        core.patch_namespaced_pod(
            pod.metadata.name, scheduler.namespace, {"metadata": {"annotations": {"areal-workers.dev/kwok-hold": None}}}
        )
    workers, error = join()
    assert error is None, getattr(error, "diagnosis", error)
    assert [w.id for w in workers] == ["rollout/0", "rollout/1"]
    assert len(pod_uids(core, scheduler.namespace, "rollout")) == 2
    assert descriptions(scheduler) == ["create rollout: 2 worker(s)"]


def test_a_node_that_goes_not_ready_fails_its_workers(make_scheduler, core):
    node_name, placement = fault_node(core, 250, "kwok-fault")
    try:
        scheduler = make_scheduler(extra_values=placement)
        scheduler.create_workers(job("pinned", 1))
        scheduler.get_workers("pinned")
        make_node_not_ready(core, node_name)
        with pytest.raises(WorkerFailedError) as failed:
            scheduler.get_workers("pinned", timeout=30)
        assert "NodeNotReady" in failed.value.stderr and node_name in failed.value.stderr
    finally:
        remove_fault_node(core, node_name)


def test_deleting_workers_does_not_wait_for_pods_no_kubelet_will_stop(make_scheduler, core, caplog):
    node_name, placement = fault_node(core, 252, "kwok-silent")
    try:
        scheduler = make_scheduler(extra_values=placement)
        scheduler.create_workers(job("pinned", 1))
        scheduler.create_workers(job("actor", 1))
        scheduler.get_workers("pinned")
        scheduler.get_workers("actor")
        [pinned] = core.list_namespaced_pod(scheduler.namespace, label_selector="areal.io/role=pinned").items
        core.patch_namespaced_pod(
            pinned.metadata.name,
            scheduler.namespace,
            {"metadata": {"annotations": {**HOLD, "areal-workers.dev/kwok-kubelet-dead": "true"}}},
        )  # localkube/kwok-stages.yaml: never finalized
        with caplog.at_level(logging.INFO, logger="areal_workers.orchestration.pod_cleanup"):
            # The node stops answering while delete_workers() already waits for the pods: the wait sees it.
            with ThreadPoolExecutor(1) as pool:
                deleting = pool.submit(scheduler.delete_workers)
                wait_deleting(core, scheduler.namespace, pinned.metadata.name)
                time.sleep(3)  # helm uninstall has returned: the wait has read the nodes, Ready
                make_node_not_ready(core, node_name)
                deleting.result(timeout=120)
        assert "not waiting for 1 pod(s) on unreachable nodes" in caplog.text and node_name in caplog.text, caplog.text
        assert "still terminating after" not in caplog.text
        [left] = core.list_namespaced_pod(scheduler.namespace).items  # the actor's pod is gone, waited for
        assert left.spec.node_name == node_name and left.metadata.deletion_timestamp is not None
    finally:
        remove_fault_node(core, node_name)


def test_a_deleted_node_fails_the_workers_it_ran(make_scheduler, core):
    node_name, placement = fault_node(core, 251, "kwok-gone")
    scheduler = make_scheduler(extra_values=placement)
    scheduler.create_workers(job("pinned", 1))
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("pinned")
    actor = pod_uids(core, scheduler.namespace, "actor")
    core.delete_node(node_name)
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("pinned", timeout=60)
    assert failed.value.worker_id == "pinned/0"
    # Before Kubernetes' pod GC removes the pod, its node is gone; after, the worker's pod was recreated.
    assert (
        "NodeGone" in failed.value.stderr and node_name in failed.value.stderr
    ) or "deleted and recreated after the worker was ready" in failed.value.stderr, failed.value.stderr
    assert pod_uids(core, scheduler.namespace, "actor") == actor
    remove_fault_node(core, node_name)  # its pods, which the pod GC would take only after its quarantine


def wait_deleting(core, namespace: str, pod: str) -> None:
    deadline = time.monotonic() + 60
    while core.read_namespaced_pod(pod, namespace).metadata.deletion_timestamp is None:
        assert time.monotonic() < deadline, f"pod {pod} was not deleted"
        time.sleep(0.2)


def test_a_failed_update_is_rolled_back_and_the_stuck_pod_replaced(make_scheduler, core, kube_client):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 3))
    scheduler.create_workers(job("critic", 1))
    scheduler.get_workers("actor")
    scheduler.get_workers("critic")
    critic = pod_uids(core, scheduler.namespace, "critic")
    apps = client.AppsV1Api(kube_client)
    good_revision = apps.read_namespaced_stateful_set(
        f"{scheduler.release}-areal-workers-actor", scheduler.namespace
    ).status.update_revision

    scheduler.update_workers(job("actor", 3, [spec(cmd="python -c 'import sys; sys.exit(4)'")]))
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("actor", timeout=60)
    assert failed.value.exit_code == 4
    assert f"rolled back release {scheduler.release} to revision 2" in "\n".join(failed.value.__notes__)
    workers = scheduler.get_workers("actor", timeout=60)
    assert [w.id for w in workers] == ["actor/0", "actor/1", "actor/2"]
    pods = core.list_namespaced_pod(scheduler.namespace, label_selector="areal.io/role=actor").items
    assert {p.metadata.labels["controller-revision-hash"] for p in pods} == {good_revision}
    assert pod_uids(core, scheduler.namespace, "critic") == critic
    assert descriptions(scheduler)[-2:] == ["update actor: command changed", "Rollback to 2"]
    # What the CLI's history shows, the caller of the scheduler reads too: the update failed and why, then the rollback.
    failed_update, rollback = scheduler.history()[-2:]
    why = re.fullmatch(r"workers failed: (.+ \(actor/[0-2]\))", failed_update["note"])
    assert why, failed_update
    assert rollback["note"] == f"after revision 3 failed: {why.group(1)}", rollback
    # The pods the rollback replaced (its note names them) are its Event on the StatefulSet, as `kubectl describe`
    # shows it; none replaced, no Event.
    stuck = re.search(r"replaced pods stuck on the failed revision: ([^;\n]+)", "\n".join(failed.value.__notes__))
    replaced = core.list_namespaced_event(scheduler.namespace, field_selector="reason=StuckPodsReplaced").items
    if stuck is None:
        assert replaced == [], replaced
    else:
        assert [e.involved_object.name for e in replaced] == [f"{scheduler.release}-areal-workers-actor"], replaced
        named = replaced[0].message.removeprefix("replaced pods stuck on an abandoned revision: ")
        assert sorted(named.split(", ")) == sorted(stuck.group(1).split(", ")), (named, stuck.group(1))


def test_values_the_chart_schema_rejects_fail_before_any_write(make_scheduler):
    scheduler = make_scheduler(extra_values={"workerDefaults": {"sharedMemory": "1Gi"}})
    with pytest.raises(WorkerCreationError) as rejected:
        scheduler.create_workers(job("actor", 1))
    assert "sharedMemory" in str(rejected.value)
    assert scheduler.history() == []
    good = make_scheduler("trial1")
    good.create_workers(job("actor", 1))
    for bad in (0, -1, 1.5):
        with pytest.raises(WorkerCreationError):
            good.scale_workers("actor", bad)
    assert len(good.history()) == 1


def test_a_release_left_pending_by_a_killed_controller_is_recovered(make_scheduler, core, kubeconfig, helm_executable):
    import base64
    import gzip
    import json

    first = make_scheduler()
    first.create_workers(job("actor", 1))
    first.get_workers("actor")
    first.scale_workers("actor", 2)  # revision 2 ...
    # ... and the controller dies mid-upgrade: helm's record of revision 2 says pending-upgrade.
    secret = next(s for s in core.list_namespaced_secret(first.namespace, label_selector="owner=helm,version=2").items)
    release = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secret.data["release"]))))
    release["info"]["status"] = "pending-upgrade"
    encoded = base64.b64encode(base64.b64encode(gzip.compress(json.dumps(release).encode()))).decode()
    core.patch_namespaced_secret(
        secret.metadata.name,
        first.namespace,
        {"data": {"release": encoded}, "metadata": {"labels": {"status": "pending-upgrade"}}},
    )
    first.close()

    adopted = make_scheduler()
    assert adopted.history()[-1]["status"] == "deployed"
    adopted.create_workers(job("rollout", 1))  # no "another operation is in progress"
    assert [w.id for w in adopted.get_workers("rollout")] == ["rollout/0"]


def test_concurrent_calls_from_several_threads_are_serialized(make_scheduler):
    scheduler = make_scheduler()
    joins = [in_background(scheduler.create_workers, job(f"role{i}", 1)) for i in range(4)]
    outcomes = [join() for join in joins]
    assert [error for _, error in outcomes] == [None] * 4
    assert len(scheduler.history()) == 4
    for i in range(4):
        assert [w.id for w in scheduler.get_workers(f"role{i}")] == [f"role{i}/0"]
