"""Helpers for tests against a real apiserver."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client, watch


def _is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def wait_for_ready_pods(
    core: client.CoreV1Api, namespace: str, selector: str, count: int, timeout: float = 60.0
) -> dict[str, client.V1Pod]:
    """Waits with one watch (list, then watch from its resourceVersion) until `count` pods are Ready."""
    deadline = time.monotonic() + timeout
    listing = core.list_namespaced_pod(namespace, label_selector=selector)
    pods = {p.metadata.name: p for p in listing.items}
    version = listing.metadata.resource_version
    while sum(map(_is_ready, pods.values())) != count or len(pods) != count:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            states = {name: (p.status.phase, _is_ready(p)) for name, p in pods.items()}
            raise TimeoutError(f"{count} Ready pods for {selector!r} not seen in {timeout}s: {states}")
        stream = watch.Watch().stream(
            core.list_namespaced_pod,
            namespace,
            label_selector=selector,
            resource_version=version,
            timeout_seconds=max(1, int(remaining)),
        )
        for event in stream:
            pod = event["object"]
            version = pod.metadata.resource_version
            if event["type"] == "DELETED":
                pods.pop(pod.metadata.name, None)
            else:
                pods[pod.metadata.name] = pod
            if len(pods) == count and all(map(_is_ready, pods.values())):
                break
    return pods


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselects what the worker lane cannot check: `reference_guard_only` tests (behaviour of our stand-in that
    AReaL's server does not have) in the areal lane, and `areal_worker` tests (answers of AReaL's real server)
    in the reference lane. Deselected, not skipped: the other lane runs them."""
    from clusterlib import AREAL_LANE, lane_name

    unwanted = "reference_guard_only" if lane_name() == AREAL_LANE.name else "areal_worker"
    here = Path(__file__).parent

    def wanted(item: pytest.Item) -> bool:  # unit tests that need AReaL's environment run in every lane
        return item.get_closest_marker(unwanted) is None or here not in Path(str(item.fspath)).parents

    deselected = [item for item in items if not wanted(item)]
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = [item for item in items if wanted(item)]


def needs_real_node(item: pytest.Item) -> bool:
    """The test runs workers on the real node: it uses the `real_node` fixture, or it is the `node="real"` case of a
    test parametrized by node. (The `real_node` marker alone says where a test runs in `make test`: test_demo.py
    has it and runs on KWOK nodes when the cluster has no real node.)"""
    if "real_node" in getattr(item, "fixturenames", ()):
        return True
    callspec = getattr(item, "callspec", None)
    return (
        item.get_closest_marker("real_node") is not None
        and callspec is not None
        and callspec.params.get("node") == "real"
    )


def real_node_failure() -> str:
    """Why the real node's tests cannot run ("" when the node runs)."""
    from localkube.cluster import LocalCluster

    absence = LocalCluster().real_node().absence()
    return f"{absence}. Or leave out the tests that need it: -m 'not real_node'" if absence else ""


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that needs the real node fails at its setup, before any fixture, naming what to start, when the local
    cluster runs none (NODE=kwok): not skipped, which would pass a lane that proved nothing on the node. Skip marks
    (another cluster via $AREAL_WORKERS_KUBECONFIG) take effect first: their hook runs first."""
    if needs_real_node(item):
        failure = real_node_failure()
        if failure:
            pytest.fail(failure, pytrace=False)


@pytest.fixture
def worker_lane():
    """The server in the worker pods: the lane of $AREAL_WORKERS_WORKER (clusterlib.selected_lane)."""
    from clusterlib import selected_lane

    return selected_lane()


@pytest.fixture
def core(kube_client) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


@pytest.fixture
def ready_pods(core) -> Callable[..., dict[str, client.V1Pod]]:
    return lambda namespace, selector, count, timeout=60.0: wait_for_ready_pods(
        core, namespace, selector, count, timeout
    )


@pytest.fixture(scope="session")
def shared_fork_server(tmp_path_factory):
    """One fork server of AReaL's rpc_server for every test runner of this pytest process (AReaL's lane): it
    imports torch, transformers and AReaL once (about 8 s of CPU) instead of once per test."""
    from clusterlib import selected_lane
    from podrunner.watch import areal_fork_server

    lane = selected_lane()
    runs_areal = lane.module_map == {}  # podrunner runs the pods' own module: AReaL's rpc_server
    server = areal_fork_server(lane.python, lane.pythonpath, tmp_path_factory.mktemp("fork")) if runs_areal else None
    yield server
    if server is not None:
        server.stop()


@pytest.fixture
def pod_runner(kubeconfig, core, tmp_path, worker_lane, shared_fork_server):
    """Runs the pods of the given namespace as local processes (tools/podrunner/), with the server of the worker
    lane: a runner of the test's own, so the namespace must be private (make_namespace's default), which keeps
    the local cluster's podrunner out of it."""
    if os.environ.get("AREAL_WORKERS_KUBECONFIG"):
        pytest.skip("runs worker processes for KWOK pods on loopback IPs: local cluster only (docs/en/testing.md)")
    from podrunner.watch import PRIVATE_LABEL, PRIVATE_VALUE, PodRunner

    runners: list[PodRunner] = []

    def start(namespace: str) -> PodRunner:
        labels = core.read_namespace(namespace).metadata.labels or {}
        assert labels.get(PRIVATE_LABEL) == PRIVATE_VALUE, (
            f"namespace {namespace} is not labelled {PRIVATE_LABEL}={PRIVATE_VALUE}: the cluster's podrunner would "
            "run its pods too; make it with make_namespace()"
        )
        runner = PodRunner(
            kubeconfig,
            namespace,
            tmp_path / f"pods-{namespace}",
            module_map=worker_lane.module_map,
            python=worker_lane.python,
            pythonpath=worker_lane.pythonpath,
            fork_server=shared_fork_server,
        ).start()
        runners.append(runner)
        return runner

    yield start
    for runner in runners:
        runner.stop()
        assert runner.errors == [], runner.errors


@pytest.fixture
def identity() -> str:
    """Who the scheduler acts as: "admin", or "rbac" (the least-privilege controller of rbac/, under rbac/'s admission
    policy bound to the test's namespace: clusterlib.controller_kubeconfig)."""
    return "admin"


@pytest.fixture
def make_scheduler(kubeconfig, helm_executable, namespace, pod_runner, tmp_path, identity, worker_lane):
    """KubernetesSchedulers for the test's namespace, with its worker pods run by podrunner (the server and
    time-outs of the worker lane); each is deleted and closed after the test. `extra_values` adds a values file
    (e.g. per-role pod annotations)."""
    import json

    from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig
    from clusterlib import RUN_PODS, controller_kubeconfig, lane_values

    pod_runner(namespace)
    run_pods = tmp_path / "run-pods.json"
    run_pods.write_text(json.dumps({**RUN_PODS, **lane_values(worker_lane, tmp_path / "areal")}))
    credentials = (
        kubeconfig
        if identity == "admin"
        else controller_kubeconfig(kubeconfig, namespace, tmp_path / "controller.yaml")
    )
    made = []

    def make(trial: str = "trial0", exp_config=None, extra_values: dict | None = None, **overrides):
        files = [str(run_pods)]
        if extra_values:
            extra = tmp_path / f"extra-{len(made)}.json"
            extra.write_text(json.dumps(extra_values))
            files.append(str(extra))
        settings = dict(
            namespace=namespace,
            kubeconfig=str(credentials),
            helm_executable=helm_executable,
            values_files=tuple(files),
            python_executable=worker_lane.fork_python,
            fork_module=worker_lane.fork_module,
            **worker_lane.timeouts,
        )
        settings.update(overrides)
        named = {} if exp_config else {"experiment_name": "exp", "trial_name": trial}
        scheduler = KubernetesScheduler(exp_config, config=KubernetesSchedulerConfig(**settings), **named)
        made.append(scheduler)
        return scheduler

    yield make
    for scheduler in made:
        if scheduler.config.ownership == "managed" and not scheduler.closed:
            scheduler.delete_workers()
        scheduler.close()


# --- the real node (tests/integration/real_node_trials.py) ----------------------------------------------------


@pytest.fixture(scope="session")
def real_node() -> None:
    """The real node runs: started by `make test` or `make cluster-up NODE=real`, never by a test (it needs root, and
    NODE=kwok chose a cluster without it); pytest_runtest_setup says so first."""
    failure = real_node_failure()
    if failure:
        pytest.fail(failure, pytrace=False)


@pytest.fixture(scope="session")
def real_node_actors(real_node, kube_client, kubeconfig, helm_executable, tmp_path_factory):
    """One trial for the real node's read-mostly tests (AReaL's server takes a while to start in a container): role
    `actor`, 2 workers, in a namespace of its own, admitting a trainer on the host from the node's address
    (networkPolicy.controller.cidrs). Modules run in name order: test_network_policy_enforced.py only reads it, and
    the test of test_real_node.py that deletes a pod runs last."""
    import uuid

    from clusterlib import job
    from real_node_trials import close_all, scheduler_factory, task
    from realnode.config import NODE_IP

    core = client.CoreV1Api(kube_client)
    namespace = f"t-real-node-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    make, made = scheduler_factory(kubeconfig, helm_executable, namespace, tmp_path_factory.mktemp("actors"))
    scheduler = make(values={"networkPolicy": {"controller": {"cidrs": [f"{NODE_IP}/32"]}}})
    scheduler.create_workers(job("actor", 2, [task()]))
    yield scheduler
    close_all(made)
    core.delete_namespace(namespace, propagation_policy="Background")
