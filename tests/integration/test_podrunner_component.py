"""podrunner as a component of the local cluster, and as a test's private runner.

- The cluster's podrunner (started by `localcluster.py up`) runs the pods of every namespace that is not labelled
  `areal-workers.dev/podrunner=private`, serves their logs through `kubectl logs`, and stops their processes when
  the pods go.
- A private namespace is left to the test's own runner: two runners never run one pod.
- A watch that drops while pods are deleted (or replaced under the same name) leaves no process behind: every
  listing is reconciled against the processes the runner runs.
- `down` stops the runner and every process it started, also those a killed runner left behind; `up` after a
  killed runner stops the orphans before it runs the pods again.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client, config

from localkube.cluster import LocalCluster
from localkube.settings import Ports
from podrunner.processes import proc_stat
from repo_paths import REPO

LOCAL_ONLY = pytest.mark.skipif(
    bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")),
    reason="the local cluster's podrunner runs processes on this machine",
)
PORT = 8000
LABELS = {"app": "web"}


def web_pod(name: str, grace: int = 2) -> client.V1Pod:
    """A pod whose command serves HTTP on its own IP (python's http.server): the smallest worker podrunner runs."""
    return client.V1Pod(
        metadata=client.V1ObjectMeta(name=name, labels=LABELS),
        spec=client.V1PodSpec(
            termination_grace_period_seconds=grace,
            containers=[
                client.V1Container(
                    name="web",
                    image="example.invalid/web:1",
                    command=["python3", "-u", "-m", "http.server", "--bind", "$(POD_IP)", str(PORT)],
                    env=[
                        client.V1EnvVar(
                            name="POD_IP",
                            value_from=client.V1EnvVarSource(
                                field_ref=client.V1ObjectFieldSelector(field_path="status.podIP")
                            ),
                        )
                    ],
                    ports=[client.V1ContainerPort(name="http", container_port=PORT)],
                    readiness_probe=client.V1Probe(
                        http_get=client.V1HTTPGetAction(path="/", port="http"), period_seconds=2
                    ),
                )
            ],
        ),
    )


def wait_until(condition: Callable[[], object], timeout: float = 60.0, what: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.2)


def serves(ip: str, port: int = PORT) -> bool:
    """True when something accepts connections at ip:port, False when they are refused."""
    try:
        with socket.create_connection((ip, port), timeout=5):
            return True
    except ConnectionRefusedError:
        return False


def held_by_a_pod(core: client.CoreV1Api, ip: str) -> bool:
    """Whether a pod of the cluster, in any namespace, has the address now (KWOK gives a freed one out again)."""
    return bool(core.list_pod_for_all_namespaces(field_selector=f"status.podIP={ip}").items)


def alive(pid: int) -> bool:
    stat = proc_stat(pid)
    return stat is not None and stat[0] != "Z"


def running_pod(core: client.CoreV1Api, namespace: str, name: str) -> client.V1Pod:
    """The pod once KWOK has started it (Running, with an IP)."""

    def started() -> client.V1Pod | None:
        pod = core.read_namespaced_pod(name, namespace)
        return pod if pod.status.phase == "Running" and pod.status.pod_ip else None

    return wait_until(started, what=f"{namespace}/{name} Running with an IP")


def is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def cluster_runner_pods(cluster: LocalCluster) -> list[dict]:
    """What the cluster's podrunner runs (its /pods endpoint)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{cluster.ports.podrunner}/pods", timeout=10) as response:
        return json.load(response)


def kubectl(kubeconfig: Path, *args: str) -> str:
    return subprocess.run(
        [str(REPO / ".tools" / "bin" / "kubectl"), "--kubeconfig", str(kubeconfig), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


# --- the cluster's runner -------------------------------------------------------------------------------------


@LOCAL_ONLY
def test_the_cluster_runner_runs_pods_of_shared_namespaces_and_stops_them_with_the_pod(
    make_namespace, core, kubeconfig, ready_pods
):
    cluster = LocalCluster()
    namespace = make_namespace(private=False)
    core.create_namespaced_pod(namespace, web_pod("web"))
    pod = ready_pods(namespace, "app=web", 1, timeout=60.0)["web"]  # Ready: the cluster's runner probed it
    ip = pod.status.pod_ip
    assert serves(ip)
    runs = [p for p in cluster_runner_pods(cluster) if p["pod"] == f"{namespace}/web"]
    assert len(runs) == 1 and alive(runs[0]["pid"]), runs
    assert Path(runs[0]["log"]).is_relative_to(cluster.pod_logs)
    # kubectl logs reads the process's output through the apiserver and KWOK's kubelet API.
    assert wait_until(
        lambda: "GET / HTTP/1.1" in kubectl(kubeconfig, "logs", "-n", namespace, "web"),
        what="the readiness probes' requests in `kubectl logs`",
    )

    core.delete_namespaced_pod("web", namespace)
    wait_until(lambda: not alive(runs[0]["pid"]), what="the deleted pod's process gone")
    assert not serves(ip) or held_by_a_pod(core, ip)  # a pod of another test may have the address by now
    assert all(p["pod"] != f"{namespace}/web" for p in cluster_runner_pods(cluster))


@LOCAL_ONLY
def test_a_successor_that_never_starts_shows_none_of_its_predecessors_log(make_namespace, core, kubeconfig, ready_pods):
    """A StatefulSet replacing a pod with one whose image never pulls: `kubectl logs` (and so the adapter's
    diagnosis) must not present the old process's output as the new pod's."""
    namespace = make_namespace(private=False)
    core.create_namespaced_pod(namespace, web_pod("web"))
    ready_pods(namespace, "app=web", 1, timeout=60.0)
    assert wait_until(
        lambda: "GET / HTTP/1.1" in kubectl(kubeconfig, "logs", "-n", namespace, "web"),
        what="the first pod's log in `kubectl logs`",
    )
    core.delete_namespaced_pod("web", namespace, grace_period_seconds=0)
    wait_until(lambda: not core.list_namespaced_pod(namespace).items, what="the first pod deleted")

    successor = web_pod("web")
    successor.spec.containers[0].image = "registry.invalid/web:1"
    core.create_namespaced_pod(namespace, successor)

    def pull_failed() -> bool:
        statuses = core.read_namespaced_pod("web", namespace).status.container_statuses or []
        return any(s.state.waiting and s.state.waiting.reason in ("ErrImagePull", "ImagePullBackOff") for s in statuses)

    wait_until(pull_failed, what="the successor's image pull failing")
    result = subprocess.run(
        [str(REPO / ".tools" / "bin" / "kubectl"), "--kubeconfig", str(kubeconfig), "logs", "-n", namespace, "web"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "GET / HTTP/1.1" not in result.stdout, result.stdout


@LOCAL_ONLY
def test_a_private_namespace_is_left_to_its_own_runner(make_namespace, core, pod_runner, ready_pods):
    cluster = LocalCluster()
    namespace = make_namespace()  # private: the pod_runner fixture's kind
    core.create_namespaced_pod(namespace, web_pod("web"))
    ip = running_pod(core, namespace, "web").status.pod_ip
    time.sleep(5)  # the cluster's runner would have started it by now
    assert not is_ready(core.read_namespaced_pod("web", namespace))
    assert not serves(ip)
    assert all(p["pod"] != f"{namespace}/web" for p in cluster_runner_pods(cluster))

    runner = pod_runner(namespace)
    ready_pods(namespace, "app=web", 1, timeout=60.0)
    assert serves(ip)
    time.sleep(5)  # a second runner of the same pod would crash on the taken address and restart
    pod = core.read_namespaced_pod("web", namespace)
    assert pod.status.container_statuses[0].restart_count == 0
    assert [p.name for p in runner.pods.values()] == [f"{namespace}/web"]
    assert all(p["pod"] != f"{namespace}/web" for p in cluster_runner_pods(cluster))


# --- the leak: a dropped watch --------------------------------------------------------------------------------


@LOCAL_ONLY
def test_a_dropped_watch_stops_the_processes_of_pods_deleted_or_replaced_meanwhile(
    make_namespace, core, pod_runner, ready_pods
):
    namespace = make_namespace()
    runner = pod_runner(namespace)
    names = [f"web-{i}" for i in range(12)]
    for name in names:
        core.create_namespaced_pod(namespace, web_pod(name))
    before = ready_pods(namespace, "app=web", len(names), timeout=120.0)
    pids = {name: runner.pods[pod.metadata.uid].process.pid for name, pod in before.items()}

    runner.disconnect()
    assert runner.disconnected.wait(30), "the watch did not drop"
    for name in names:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    wait_until(lambda: not core.list_namespaced_pod(namespace).items, what="every pod deleted")
    replaced = names[-3:]  # the same names again, new uids: a StatefulSet replacing its pods does this
    for name in replaced:
        core.create_namespaced_pod(namespace, web_pod(name))
    for name in replaced:
        running_pod(core, namespace, name)
    # What the runner missed: every old process still runs, as 34 guards did after 128 deletions under load.
    assert all(alive(pid) for pid in pids.values())

    runner.reconnect()  # relists
    wait_until(
        lambda: not any(alive(pid) for pid in pids.values()),
        timeout=60.0,
        what="every process of a deleted or replaced pod stopped",
    )
    after = ready_pods(namespace, "app=web", len(replaced), timeout=60.0)
    current_ips = {pod.status.pod_ip for pod in after.values()}
    for name, pod in before.items():
        ip = pod.status.pod_ip
        if ip not in current_ips:  # answered only by the pod of another test that got the address since
            assert not serves(ip) or held_by_a_pod(core, ip), f"{name}'s old address {ip} still answers"
    assert sorted(runner.pods) == sorted(pod.metadata.uid for pod in after.values())
    for name, pod in after.items():
        assert runner.pods[pod.metadata.uid].process.pid != pids[name]
        assert serves(pod.status.pod_ip)


# --- the component's lifecycle --------------------------------------------------------------------------------


@pytest.fixture
def second_cluster(tmp_path) -> LocalCluster:
    """A cluster beside the session's, with ports, state and pod addresses of its own; always taken down."""
    cluster = LocalCluster(Ports(base=16560), state_dir=tmp_path / "cluster", pod_octet=37)
    yield cluster
    cluster.down()


@LOCAL_ONLY
def test_down_stops_podrunner_and_every_process_it_started_even_after_a_crash(second_cluster):
    cluster = second_cluster
    cluster.up(nodes=1, workers="reference", timeout=180.0)
    cluster.up(nodes=1, timeout=180.0)  # a second `up` keeps what runs
    api = client.CoreV1Api(config.new_client_from_config(config_file=str(cluster.kubeconfig)))
    api.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="shared")))
    wait_until(lambda: api.list_namespaced_service_account("shared").items, what="the namespace's default account")
    api.create_namespaced_pod("shared", web_pod("web"))
    pod = wait_until(
        lambda: (p := api.read_namespaced_pod("web", "shared")) and is_ready(p) and p,
        what="the pod Ready on the second cluster",
    )
    ip = pod.status.pod_ip
    assert ip.startswith("127.37.")
    first_pid = next(p["pid"] for p in cluster_runner_pods(cluster) if p["pod"] == "shared/web")

    # A runner killed outright cannot stop its processes; the next `up` stops them before running the pods again.
    runner_pid = cluster.podrunner().pid()
    os.killpg(runner_pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):  # `up` in this process started it: collect the zombie
        os.waitpid(runner_pid, 0)
    wait_until(lambda: cluster.podrunner().pid() is None, what="the killed podrunner gone")
    assert alive(first_pid) and serves(ip)
    cluster.up(nodes=1, timeout=180.0)
    assert not alive(first_pid)
    second_pid = wait_until(
        lambda: next((p["pid"] for p in cluster_runner_pods(cluster) if p["pod"] == "shared/web"), None),
        what="the pod run again",
    )
    wait_until(lambda: serves(ip), what="the pod's new process serving")

    cluster.down()
    assert not alive(second_pid)
    assert not serves(ip)
    assert not cluster.state.exists() and not cluster.kubeconfig.exists()
    for component in cluster.components():
        assert component.pid() is None
