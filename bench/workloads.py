"""What the benchmarks deploy and how they clean up: namespaces, jobs split over roles, chart values for KWOK-only
or process-backed pods, and the floor's direct object creation and single pod watch."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config, utils

from areal_workers import Job, KubernetesScheduler, KubernetesSchedulerConfig, SchedulingSpec
from areal_workers.pods.watch import PodWatch, WaitTimedOut, is_ready, none_left
from localkube.pki import service_account_kubeconfig
from localkube.rbac import apply_rbac
from podrunner.watch import PRIVATE_LABEL, PRIVATE_VALUE, PodRunner
from repo_paths import TOOLS_BIN

HELM = TOOLS_BIN / "helm"
KUBECTL = TOOLS_BIN / "kubectl"
COMMAND = "python -m areal.infra.rpc.rpc_server"
# KWOK alone reports these pods Ready and nothing runs them (tools/localkube/kwok-stages.yaml, stage
# pod-ready-kwok): the chart always renders a container command, so the annotation, not a missing command, selects
# the stage.
KWOK_READY = {
    "workerDefaults": {"podAnnotations": {"areal-workers.dev/readiness": "kwok"}, "terminationGracePeriodSeconds": 0}
}
# Pods whose guard processes podrunner runs: a short grace period keeps the clean-up between runs short.
REAL_GUARDS = {"workerDefaults": {"terminationGracePeriodSeconds": 2}}
RELEASE_LABEL = "app.kubernetes.io/instance"
HOOK_ANNOTATION = "helm.sh/hook"
STALE_KWOK_HINT = (
    "pods annotated readiness=kwok never Ready? the cluster's KWOK may predate the stage "
    "pod-ready-kwok of tools/localkube/kwok-stages.yaml (restart the cluster: make cluster-down)"
)


def admin_client(kubeconfig: str) -> client.ApiClient:
    return config.new_client_from_config(config_file=kubeconfig)


def role_names(roles: int) -> list[str]:
    return ["actor"] if roles == 1 else [f"role{i}" for i in range(roles)]


def jobs(total: int, roles: int) -> list[Job]:
    """`total` workers split evenly over `roles` roles (total must be a multiple of roles)."""
    if total % roles:
        raise ValueError(f"{total} workers do not split evenly over {roles} roles")
    spec = SchedulingSpec(cpu=1, mem=1, gpu=0, port_count=2, cmd=COMMAND)
    return [Job(role=name, replicas=total // roles, tasks=[spec]) for name in role_names(roles)]


def write_values(directory: Path, name: str, values: dict[str, Any]) -> str:
    path = directory / f"{name}.json"
    path.write_text(json.dumps(values))
    return str(path)


@dataclass
class Namespace:
    name: str
    private: bool  # the cluster's podrunner leaves a private namespace alone


@contextmanager
def namespace(api: client.ApiClient, prefix: str, private: bool, gone_timeout: float = 300.0) -> Iterator[Namespace]:
    """A namespace of its own, deleted afterwards with its objects. The deletion is waited for: the namespace
    controller's requests would otherwise land in the next measurement."""
    core = client.CoreV1Api(api)
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    labels = {PRIVATE_LABEL: PRIVATE_VALUE} if private else None
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels)))
    try:
        yield Namespace(name, private)
    finally:
        core.delete_namespace(name, propagation_policy="Background")
        deadline = time.monotonic() + gone_timeout
        while time.monotonic() < deadline:
            try:
                core.read_namespace(name)
            except client.ApiException as error:
                if error.status == 404:
                    break
                raise
            time.sleep(0.5)


@contextmanager
def own_runner(kubeconfig: str, ns: Namespace, log_dir: Path) -> Iterator[PodRunner]:
    """Runs a private namespace's pods from this process (the tests' way; the cluster's runner skips them)."""
    runner = PodRunner(kubeconfig, ns.name, log_dir).start()
    try:
        yield runner
    finally:
        runner.stop()


def controller_kubeconfig(admin_kubeconfig: str, ns: str, out: Path) -> str:
    """rbac/ applied in the namespace, with the admission policy of rbac/cluster/ bound to it alone (make test runs the
    benchmarks on its shared cluster, where the policy as written would act in every namespace); a kubeconfig of its
    least-privilege controller ServiceAccount."""
    apply_rbac(admin_kubeconfig, ns)
    return str(service_account_kubeconfig(Path(admin_kubeconfig), ns, "areal-controller", out))


def scheduler(
    kubeconfig: str, ns: str, values_files: list[str], trial: str, timeout: float, exp_config: Any = None
) -> KubernetesScheduler:
    settings = KubernetesSchedulerConfig(
        namespace=ns,
        kubeconfig=kubeconfig,
        helm_executable=str(HELM),
        values_files=tuple(values_files),
        ready_timeout=timeout,
        helm_timeout=timeout,
    )
    named = {} if exp_config is not None else {"experiment_name": "bench", "trial_name": trial}
    return KubernetesScheduler(exp_config, config=settings, **named)


# --- the floor: the same objects, created directly, and one pod watch -----------------------------------------


def floor_manifests(sched: KubernetesScheduler, role_jobs: list[Job]) -> list[dict[str, Any]]:
    """What the adapter's release would hold, from dry runs: each role's objects, shared ones once (the topology
    ConfigMap of the last dry run, which lists one role: same object count, nearly the same size); test hooks are
    left out as `helm install` leaves them."""
    objects: dict[tuple[str, str], dict[str, Any]] = {}
    for job in role_jobs:
        for manifest in sched.dry_run(job):
            if HOOK_ANNOTATION in (manifest["metadata"].get("annotations") or {}):
                continue
            objects[(manifest["kind"], manifest["metadata"]["name"])] = manifest
    return list(objects.values())


def create_objects(api: client.ApiClient, ns: str, manifests: list[dict[str, Any]]) -> None:
    for manifest in manifests:
        utils.create_from_dict(api, manifest, namespace=ns)


def delete_objects(api: client.ApiClient, ns: str, manifests: list[dict[str, Any]]) -> None:
    core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
    net, policy = client.NetworkingV1Api(api), client.PolicyV1Api(api)
    deleters = {
        "StatefulSet": apps.delete_namespaced_stateful_set,
        "Service": core.delete_namespaced_service,
        "ConfigMap": core.delete_namespaced_config_map,
        "ServiceAccount": core.delete_namespaced_service_account,
        "NetworkPolicy": net.delete_namespaced_network_policy,
        "PodDisruptionBudget": policy.delete_namespaced_pod_disruption_budget,
    }
    for manifest in manifests:
        try:
            deleters[manifest["kind"]](manifest["metadata"]["name"], ns, propagation_policy="Background")
        except client.ApiException as error:
            if error.status != 404:  # never created: a failed run cleans up what it made
                raise


def wait_pods(core: client.CoreV1Api, ns: str, selector: str, count: int, timeout: float) -> None:
    """One list, then one watch from its resourceVersion (the adapter's PodWatch), until `count` pods match, all
    Ready."""

    def done(pods: dict[str, client.V1Pod]) -> bool:
        return len(pods) == count and all(map(is_ready, pods.values()))

    try:
        PodWatch(core, ns).wait(selector, done, timeout)
    except WaitTimedOut as timed_out:
        ready_count = sum(map(is_ready, timed_out.pods.values()))
        raise TimeoutError(
            f"{ns}: {ready_count}/{count} pods Ready, {len(timed_out.pods)} present after "
            f"{timeout:.0f}s; {STALE_KWOK_HINT}"
        ) from None


def wait_no_pods(core: client.CoreV1Api, ns: str, timeout: float) -> None:
    """Until the namespace holds no pod: the next measurement starts on a quiet cluster."""
    try:
        PodWatch(core, ns).wait("", none_left, timeout)
    except WaitTimedOut as timed_out:
        raise TimeoutError(f"{ns}: {len(timed_out.pods)} pods left after {timeout:.0f}s") from None
