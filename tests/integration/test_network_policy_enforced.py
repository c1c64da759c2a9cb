"""The chart's NetworkPolicy, enforced for real: kube-network-policies on the real node (tools/realnode/netpol.py)
drops what the policy does not admit, so each test connects from a real pod (or the host) to a real worker and
asserts what arrives. A denied connection is dropped, not refused: the client times out.

The real node's shared trial (two workers, AReaL's server in containers) has `networkPolicy.controller.cidrs` set to
the node's address, so that a trainer on the host is admitted from it and from no other address.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from real_node_trials import KUBECTL, kubectl, role_pods
from realnode.config import BRIDGE, NETWORK

pytestmark = [
    pytest.mark.serial_cluster,
    pytest.mark.real_node,
    pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="the local cluster's real node only"),
]

# Long enough that an admitted connection always lands on a loaded machine; a dropped one never answers at all.
DENIED_AFTER = 8.0
ADMITTED_WITHIN = 60.0
# A host address of the pod network that is not the node's (so not in the trial's cidrs); added for one test.
OTHER_HOST_IP = "198.18.0.2"
NOBODY = 65534  # the enforcer lets the host's root processes through, as upstream does; the host trainer is not root

# Prints "ok <status>", "timeout" or "error <reason>" for a GET of argv[1] with the timeout argv[2], from the
# source address argv[3] if given.
FETCH = """
import http.client, socket, sys, urllib.parse
url = urllib.parse.urlsplit(sys.argv[1])
source = (sys.argv[3], 0) if len(sys.argv) > 3 else None
try:
    connection = http.client.HTTPConnection(url.hostname, url.port, timeout=float(sys.argv[2]), source_address=source)
    connection.request("GET", url.path)
    print("ok", connection.getresponse().status)
except (TimeoutError, socket.timeout):
    print("timeout")
except OSError as error:
    print("error", error)
"""

# Rank argv[1] of 2 joins a gloo group at argv[2]:argv[3] and all-reduces its rank + 1; prints the sum.
ALL_REDUCE = """
import datetime, sys, torch, torch.distributed as dist
rank = int(sys.argv[1])
dist.init_process_group("gloo", init_method=f"tcp://{sys.argv[2]}:{sys.argv[3]}", rank=rank, world_size=2,
                        timeout=datetime.timedelta(seconds=120))
value = torch.tensor([rank + 1.0])
dist.all_reduce(value)
print("sum", value.item())
dist.destroy_process_group()
"""


@dataclass
class Trial:
    namespace: str
    guard_urls: list[str]  # each worker's /health on its guard port
    pods: list[client.V1Pod]


@pytest.fixture(scope="module")
def trial(real_node_actors, kube_client) -> Trial:
    """The real node's shared trial (conftest.py): two actor workers, the node's address in the policy's cidrs."""
    workers = real_node_actors.get_workers("actor")
    return Trial(
        real_node_actors.namespace,
        [f"http://{w.ip}:{w.worker_ports[0]}/health" for w in workers],
        role_pods(client.CoreV1Api(kube_client), real_node_actors.namespace, "actor"),
    )


@pytest.fixture
def probe_pods(kube_client, trial):
    """make(namespace, labels) -> the name of a running pod on the real node with the workers' image and
    environment but none of their labels (only `labels`), doing nothing until a test execs into it."""
    core = client.CoreV1Api(kube_client)
    made: list[tuple[str, str]] = []
    extra_namespaces: list[str] = []

    def make(namespace: str, labels: dict[str, str]) -> str:
        if namespace != trial.namespace and namespace not in extra_namespaces:
            core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
            extra_namespaces.append(namespace)
        name = f"probe-{uuid.uuid4().hex[:6]}"
        core.create_namespaced_pod(namespace, probe_pod(kube_client, trial.pods[0], name, labels))
        made.append((namespace, name))
        wait_running(core, namespace, name)
        return name

    yield make
    for namespace, name in made:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    for namespace in extra_namespaces:
        core.delete_namespace(namespace, propagation_policy="Background")


def probe_pod(api: client.ApiClient, worker: client.V1Pod, name: str, labels: dict[str, str]) -> dict:
    """The worker pod's spec, sleeping, without the StatefulSet's identity or its probes."""
    spec = api.sanitize_for_serialization(worker.spec)
    for key in ("nodeName", "hostname", "subdomain", "serviceAccountName", "serviceAccount"):
        spec.pop(key, None)
    spec["automountServiceAccountToken"] = False
    spec["terminationGracePeriodSeconds"] = 0
    [container] = [c for c in spec["containers"] if c["name"] == worker.spec.containers[0].name]
    for key in ("readinessProbe", "livenessProbe", "startupProbe", "ports", "args"):
        container.pop(key, None)
    container["command"] = ["sleep", "infinity"]
    spec["containers"] = [container]
    spec.pop("initContainers", None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def wait_running(core: client.CoreV1Api, namespace: str, name: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = core.read_namespaced_pod(name, namespace)
        if pod.status.phase == "Running":
            return
        time.sleep(1)
    raise AssertionError(f"pod {namespace}/{name} not Running after {timeout:.0f}s: {pod.status}")


def fetch_in_pod(kubeconfig: Path, namespace: str, pod: str, url: str, timeout: float) -> str:
    result = kubectl(kubeconfig, "-n", namespace, "exec", pod, "--", "python", "-c", FETCH, url, str(timeout))
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def fetch_from_host(url: str, timeout: float, source: str | None = None) -> str:
    """As a trainer on the host (not root: see NOBODY), from the node's address or from `source`."""
    argv = ["/usr/bin/python3", "-c", FETCH, url, str(timeout), *([source] if source else [])]
    result = subprocess.run(argv, capture_output=True, text=True, user=NOBODY, group=NOBODY, timeout=timeout + 60)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_the_enforcer_is_on_and_filters_the_pod_network(real_node):
    """What the rest relies on: the queue has a listener and the node's iptables send the pod network to it."""
    queues = Path("/proc/net/netfilter/nfnetlink_queue").read_text()
    assert any(line.split()[0] == "100" for line in queues.splitlines() if line.split()), queues
    rules = subprocess.run(["iptables", "-t", "mangle", "-S"], capture_output=True, text=True, check=True).stdout
    assert f"-A AREAL-NETPOL -d {NETWORK} -j NFQUEUE --queue-num 100" in rules, rules


def test_a_pod_without_the_controller_label_times_out_on_the_guard_port(trial, probe_pods, kubeconfig):
    pod = probe_pods(trial.namespace, {"app": "curious"})
    assert fetch_in_pod(kubeconfig, trial.namespace, pod, trial.guard_urls[0], DENIED_AFTER) == "timeout"


def test_a_labelled_trainer_pod_gets_the_guards_health(trial, probe_pods, kubeconfig):
    pod = probe_pods(trial.namespace, {"areal.io/controller": "true"})
    for url in trial.guard_urls:
        assert fetch_in_pod(kubeconfig, trial.namespace, pod, url, ADMITTED_WITHIN) == "ok 200"


def test_a_labelled_pod_of_another_namespace_times_out(trial, probe_pods, kubeconfig):
    """The policy's controller peer has no namespaceSelector: the trainer's label counts in the trial's namespace."""
    other = f"{trial.namespace}-other"
    pod = probe_pods(other, {"areal.io/controller": "true"})
    assert fetch_in_pod(kubeconfig, other, pod, trial.guard_urls[0], DENIED_AFTER) == "timeout"


def test_the_workers_all_reduce_with_gloo_on_ports_picked_at_run_time(trial, kubeconfig):
    """Release pods admit each other on every port: gloo's store and its pairs' sockets (ports the processes
    pick) connect both ways."""
    leader = trial.pods[0].status.pod_ip
    outputs: dict[int, subprocess.CompletedProcess] = {}

    def rank(index: int) -> None:
        pod = trial.pods[index].metadata.name
        outputs[index] = kubectl(
            kubeconfig, "-n", trial.namespace, "exec", pod, "--", "env", "GLOO_SOCKET_IFNAME=eth0",
            "python", "-c", ALL_REDUCE, str(index), leader, "29517", timeout=300,
        )  # fmt: skip

    threads = [threading.Thread(target=rank, args=(index,)) for index in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for index in (0, 1):
        assert outputs[index].returncode == 0, outputs[index].stderr[-2000:]
        assert outputs[index].stdout.split()[-2:] == ["sum", "3.0"], outputs[index].stdout


def test_a_trainer_on_the_host_is_admitted_exactly_from_the_cidrs(trial):
    url = trial.guard_urls[0]
    assert fetch_from_host(url, ADMITTED_WITHIN) == "ok 200"  # from the node's address: in the cidrs
    subprocess.run(["ip", "addr", "add", f"{OTHER_HOST_IP}/32", "dev", BRIDGE], check=True)
    try:
        assert fetch_from_host(url, DENIED_AFTER, source=OTHER_HOST_IP) == "timeout"
    finally:
        subprocess.run(["ip", "addr", "del", f"{OTHER_HOST_IP}/32", "dev", BRIDGE], check=True)


# Serves 200 on each port of argv[1:] for two minutes; prints "listening" once bound.
LISTEN = """
import http.server, sys, threading, time
class Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
for port in sys.argv[1:]:
    server = http.server.ThreadingHTTPServer(("0.0.0.0", int(port)), Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
print("listening", flush=True)
time.sleep(120)
"""
IN_ALLOCATED_RANGE, OUTSIDE_EVERY_RULE = 20517, 40517  # networkPolicy.allocatedPorts is 10000-32767 (endPort)


def test_the_trainer_reaches_the_allocated_range_and_no_port_beyond_it(trial, probe_pods, kubeconfig):
    """The controller's rule is a port list plus a range with `endPort`: a port inside the range is admitted, a
    listening port outside every rule is not."""
    worker = trial.pods[0]
    listener = subprocess.Popen(
        [str(KUBECTL), f"--kubeconfig={kubeconfig}", "-n", trial.namespace, "exec", worker.metadata.name,
         "--", "python", "-c", LISTEN, str(IN_ALLOCATED_RANGE), str(OUTSIDE_EVERY_RULE)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert listener.stdout.readline().strip() == "listening", listener.stderr.read()
        pod = probe_pods(trial.namespace, {"areal.io/controller": "true"})
        ip = worker.status.pod_ip
        inside = fetch_in_pod(kubeconfig, trial.namespace, pod, f"http://{ip}:{IN_ALLOCATED_RANGE}/", ADMITTED_WITHIN)
        assert inside == "ok 200"
        outside = fetch_in_pod(kubeconfig, trial.namespace, pod, f"http://{ip}:{OUTSIDE_EVERY_RULE}/", DENIED_AFTER)
        assert outside == "timeout"
    finally:
        listener.kill()
        listener.wait()
