"""The whole path on the real node: scheduler -> helm release -> StatefulSet -> kubelet -> containerd -> runc container
-> AReaL's rpc_server -> engine, with the image built here (tools/realnode/images.py) and nothing played by podrunner.

`make test` starts the node (`localcluster.py up --real-node`); to run these alone, start it first with
`make cluster-up NODE=real` (root): without it each test fails at its setup saying so (conftest.py).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import subprocess
from pathlib import Path

import pytest

from areal_workers.errors import WorkerFailedError, WorkerTimeoutError
from clusterlib import job, wait_for
from real_node_trials import close_all, kubectl, role_pods, scheduler_factory, task
from realnode.config import NETWORK, NODE_NAME

pytestmark = [
    pytest.mark.serial_cluster,  # the real node's few cores (tools/test_lanes.py)
    pytest.mark.real_node,
    # The node joins this checkout's local cluster; against another cluster ($AREAL_WORKERS_KUBECONFIG) there is none.
    pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="the local cluster's real node only"),
]

ENGINE = "localworker.areal_engines.Counter"


@pytest.fixture
def real_scheduler(real_node, kubeconfig, helm_executable, namespace, tmp_path):
    """A test's own schedulers on the real node; deleted after the test."""
    make, made = scheduler_factory(kubeconfig, helm_executable, namespace, tmp_path)
    yield make
    close_all(made)


def test_workers_run_as_containers_with_engines_and_forks(real_node_actors, core):
    workers = real_node_actors.get_workers("actor")
    assert [w.id for w in workers] == ["actor/0", "actor/1"]
    pods = role_pods(core, real_node_actors.namespace, "actor")
    assert len(pods) == 2
    for worker, pod in zip(workers, pods):
        assert pod.spec.node_name == NODE_NAME
        assert pod.status.pod_ip == worker.ip
        assert ipaddress.ip_address(worker.ip) in ipaddress.ip_network(NETWORK)
        status = pod.status.container_statuses[0]
        assert status.container_id.startswith("containerd://") and status.ready  # the kubelet's probe said so
    assert pods[0].status.pod_ip != pods[1].status.pod_ip

    asyncio.run(real_node_actors.create_engine("actor/0", ENGINE, "counter", 40))
    assert real_node_actors.call_engine("actor/0", "increment", "counter", 2) == 42

    real_node_actors.create_workers(job("ref", 2, [task()], type="colocation", target="actor", fork=True))
    forks = real_node_actors.get_workers("ref")
    assert [f.ip for f in forks] == [w.ip for w in workers]  # a process inside the actor's container
    assert {f.worker_ports[0] for f in forks}.isdisjoint({w.worker_ports[0] for w in workers})
    asyncio.run(real_node_actors.create_engine("ref/1", ENGINE, "counter", 7))
    assert real_node_actors.call_engine("ref/1", "increment", "counter", 1) == 8
    assert real_node_actors.call_engine("ref/1", "env", "counter", "HOSTNAME") == pods[1].metadata.name
    real_node_actors.delete_workers("ref")
    assert [w.id for w in real_node_actors.get_workers("actor")] == ["actor/0", "actor/1"]


def test_helm_test_resolves_workers_through_coredns(real_node_actors, core, kubeconfig, helm_executable):
    real_node_actors.get_workers("actor")
    result = subprocess.run(
        [
            helm_executable,
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            real_node_actors.namespace,
            "test",
            real_node_actors.release,
            "--timeout",
            "3m",
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    test_pod = next(
        p
        for p in core.list_namespaced_pod(real_node_actors.namespace).items
        if p.metadata.name.endswith("-test-health")
    )
    assert test_pod.spec.node_name == NODE_NAME and test_pod.status.phase == "Succeeded"
    assert "2/2 workers healthy" in core.read_namespaced_pod_log(test_pod.metadata.name, real_node_actors.namespace)


def test_kubectl_logs_and_exec_reach_the_container(real_node_actors, core, kubeconfig):
    real_node_actors.get_workers("actor")
    pods = role_pods(core, real_node_actors.namespace, "actor")
    logs = kubectl(kubeconfig, "-n", real_node_actors.namespace, "logs", pods[0].metadata.name)
    assert logs.returncode == 0, logs.stderr
    assert logs.stdout.strip(), "the worker's log is empty"
    peer = pods[1]
    name = f"{peer.spec.hostname}.{peer.spec.subdomain}.{real_node_actors.namespace}.svc.cluster.local"
    exec_ = kubectl(
        kubeconfig,
        "-n",
        real_node_actors.namespace,
        "exec",
        pods[0].metadata.name,
        "--",
        "python",
        "-c",
        f"import os, socket; print(os.getuid(), socket.gethostname(), socket.gethostbyname({name!r}))",
    )
    assert exec_.returncode == 0, exec_.stderr
    assert exec_.stdout.split() == ["1000", pods[0].metadata.name, peer.status.pod_ip]  # CoreDNS answered


def test_a_worker_is_weighed_by_its_cpu_request_and_not_capped_by_a_quota(real_node_actors, core, kubeconfig):
    """The local real node's kubelet sets no CFS quota (cpuCFSQuota: false, decisions-local-cluster.md L11): the
    container's cgroup has no CPU maximum, while its share of contended CPU still follows its request (cgroup v1,
    these machines': cpu.cfs_quota_us and cpu.shares; v2: cpu.max and cpu.weight)."""
    pod = role_pods(core, real_node_actors.namespace, "actor")[0]
    assert pod.spec.containers[0].resources.requests["cpu"] == "250m"  # real_node_trials.CPU
    v1 = "cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.shares"
    v2 = "cat /sys/fs/cgroup/cpu.max /sys/fs/cgroup/cpu.weight"
    read = kubectl(
        kubeconfig, "-n", real_node_actors.namespace, "exec", pod.metadata.name, "--", "sh", "-c", f"{v1} || {v2}"
    )
    assert read.returncode == 0, read.stderr
    values = read.stdout.split()
    if len(values) == 2:  # cgroup v1
        assert values == ["-1", str(250 * 1024 // 1000)], read.stdout  # no quota; the kubelet's shares of 250m
    else:  # cgroup v2: "max PERIOD" and a weight under a whole core's 100, by any of runc's conversions
        assert values[0] == "max" and 1 < int(values[2]) < 100, read.stdout


def test_a_crash_loop_backs_off_for_real_and_is_rolled_back(real_node_actors, core):
    crash = "python3 -c 'import sys; print(\"no checkpoint at /ckpt/step-7\", flush=True); sys.exit(3)'"
    real_node_actors.create_workers(job("crash", 1, [task(cmd=crash)]))
    # The kubelet's own back-off first (the scheduler rolls the role back at the first exit it sees, which may come
    # before the kubelet has backed off once): the container waits in CrashLoopBackOff and the kubelet says why.
    backing_off = wait_for(
        lambda: [
            p
            for p in role_pods(core, real_node_actors.namespace, "crash")
            if any(
                s.state.waiting and s.state.waiting.reason == "CrashLoopBackOff"
                for s in p.status.container_statuses or []
            )
        ],
        180,
        "the kubelet backing off the crashing container",
    )
    assert backing_off[0].spec.node_name == NODE_NAME
    assert backing_off[0].status.container_statuses[0].restart_count >= 1
    wait_for(
        lambda: [
            e
            for e in core.list_namespaced_event(real_node_actors.namespace, field_selector="reason=BackOff").items
            if "Back-off restarting failed container" in (e.message or "")
        ],
        60,
        "the kubelet's BackOff event",
    )
    with pytest.raises(WorkerFailedError) as failed:
        real_node_actors.get_workers("crash", timeout=180)
    assert failed.value.exit_code == 3
    assert "no checkpoint at /ckpt/step-7" in failed.value.stderr  # the container's log, read through the kubelet
    assert "rolled back release" in "\n".join(failed.value.__notes__)
    assert not role_pods(core, real_node_actors.namespace, "crash") or wait_for(
        lambda: not role_pods(core, real_node_actors.namespace, "crash"), 180, "crash pods gone after the rollback"
    )
    assert [w.id for w in real_node_actors.get_workers("actor")] == ["actor/0", "actor/1"]  # untouched by the rollback


def test_a_deleted_pod_is_recreated_and_its_lost_engines_are_reported(real_node_actors, core):
    old = real_node_actors.get_workers("actor")[1]
    asyncio.run(real_node_actors.create_engine(old.id, ENGINE, "lost", 1))
    pod = role_pods(core, real_node_actors.namespace, "actor")[1]
    core.delete_namespaced_pod(pod.metadata.name, real_node_actors.namespace)
    replaced = wait_for(
        lambda: [
            p
            for p in role_pods(core, real_node_actors.namespace, "actor")
            if p.metadata.uid != pod.metadata.uid and p.metadata.name == pod.metadata.name and p.status.pod_ip
        ],
        180,
        "pod recreated by the StatefulSet",
    )
    assert replaced[0].spec.node_name == NODE_NAME
    with pytest.raises(WorkerFailedError) as failed:
        real_node_actors.call_engine(old.id, "increment", "lost", 1, max_retries=2, retry_delay=0.5)
    assert "engines are lost" in str(failed.value) or "RestartedAfterReady" in failed.value.stderr, failed.value


def test_a_container_over_its_memory_limit_is_oomkilled_by_the_kernel(real_scheduler, core, namespace):
    scheduler = real_scheduler()
    hog = "python3 -c 'x = bytearray(3 * 2**30)'"  # zero-filled: every page is touched, past the 1Gi limit
    scheduler.create_workers(job("hog", 1, [task(cmd=hog, mem=1)]))
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("hog", timeout=180)
    assert failed.value.exit_code == 137
    assert "OOMKilled" in failed.value.stderr


def test_readiness_comes_from_the_kubelets_probe(real_scheduler, core, namespace):
    scheduler = real_scheduler(ready_timeout=45.0)
    # Runs, never listens on the guard port; stops on SIGTERM (PID 1 of a container ignores it unless it has a handler,
    # which would keep the pod for the whole grace period after the test).
    mute = "python3 -c 'import signal, time; signal.signal(signal.SIGTERM, lambda *_: exit(0)); time.sleep(3600)'"
    scheduler.create_workers(job("mute", 1, [task(cmd=mute)]))

    def probe_failed() -> bool:  # the kubelet's probe fails every periodSeconds (5) once the container runs
        events = core.list_namespaced_event(namespace, field_selector="reason=Unhealthy").items
        return any("Readiness probe failed" in (e.message or "") for e in events)

    wait_for(probe_failed, 120, "a failed readiness probe (an Unhealthy event)", interval=1)
    # A worker that never turns Ready times out, and the time-out says why: no need to wait longer than a moment.
    with pytest.raises(WorkerTimeoutError) as timed_out:
        scheduler.get_workers("mute", timeout=5)
    assert "Readiness probe failed" in timed_out.value.diagnosis


IPC_LOCK = 14  # bit of CAP_IPC_LOCK in /proc/<pid>/status's capability masks


def capability_masks(kubeconfig: Path, namespace: str, pod: str) -> dict[str, int]:
    status = kubectl(kubeconfig, "-n", namespace, "exec", pod, "--", "cat", "/proc/1/status")
    assert status.returncode == 0, status.stderr
    return {
        key: int(value, 16)
        for key, value in (line.split(":\t", 1) for line in status.stdout.splitlines() if line.startswith("Cap"))
    }


@pytest.fixture
def rdma_capacity(real_node, core):
    """The real node advertises RDMA devices (as a device plugin would), for a role with rdma.enabled."""
    resource = "rdma/rdma_shared_device_a"
    body = {"status": {"capacity": {resource: "4"}, "allocatable": {resource: "4"}}}
    core.patch_node_status(NODE_NAME, body)
    yield
    escaped = resource.replace("/", "~1")
    core.patch_node_status(
        NODE_NAME,
        [
            {"op": "remove", "path": f"/status/capacity/{escaped}"},
            {"op": "remove", "path": f"/status/allocatable/{escaped}"},
        ],
    )


def test_rdma_ipc_lock_is_in_a_non_root_workers_bounding_set_only(rdma_capacity, real_scheduler, core, kubeconfig):
    """rdma.enabled adds IPC_LOCK; the worker runs as uid 1000 with allowPrivilegeEscalation: false, and Kubernetes
    sets no ambient capabilities, so the kernel drops it from the effective set at exec: the process cannot use it
    (the chart's NOTES and docs/en/security.md say so)."""
    scheduler = real_scheduler(
        worker_defaults={"rdma": {"enabled": True, "resourceName": "rdma/rdma_shared_device_a", "count": 1}}
    )
    scheduler.create_workers(job("rdma", 1, [task()]))
    scheduler.get_workers("rdma")
    [pod] = role_pods(core, scheduler.namespace, "rdma")
    assert "IPC_LOCK" in pod.spec.containers[0].security_context.capabilities.add
    masks = capability_masks(kubeconfig, scheduler.namespace, pod.metadata.name)
    assert masks["CapBnd"] >> IPC_LOCK & 1 == 1, masks  # the runtime granted it
    assert masks["CapEff"] >> IPC_LOCK & 1 == 0 and masks["CapPrm"] >> IPC_LOCK & 1 == 0, masks  # uid 1000 lost it
