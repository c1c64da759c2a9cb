"""Where the bandit demo runs and what it asks of the scheduler: the cluster (the project's local one or another),
how its worker pods get their processes, the scheduler's settings and the spec of one worker."""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client, config as kube_config
from kubernetes.client.exceptions import ApiException

import demo_cluster as cluster
from areal_workers import KubernetesSchedulerConfig, SchedulingSpec
from bandit_config import ClusterConfig
from demo_checks import DemoFailure

DEMO_DIR = Path(__file__).resolve().parent  # examples/bandit_demo: the engines the workers import
# Not tools/repo_paths.py: on any other cluster the demo runs as a plain `python examples/bandit_demo/demo.py`,
# without tools/ on its path (only this checkout's local cluster needs tools/, and `make demo` puts it there).
REPO_ROOT = DEMO_DIR.parent.parent
LOCAL_KUBECONFIG = REPO_ROOT / ".tools" / "kubeconfig"
CLUSTER_DIR_VARIABLE = "AREAL_WORKERS_CLUSTER_DIR"
LOCAL_FILEROOT = Path(tempfile.gettempdir()) / "areal-bandit-demo"
LOCAL_HELM = REPO_ROOT / ".tools" / "bin" / "helm"
LOCAL_WORKER_PYTHON = REPO_ROOT / ".tools" / "areal-worker" / "bin" / "python"
WORKER_COMMAND = "python -m areal.infra.rpc.rpc_server"
REPLICAS = 2
PULL_SECRET = "local-registry"  # the demo namespace's pull Secret for the local cluster's registry


def local_kubeconfig() -> Path:
    """The local cluster's admin kubeconfig: .tools/kubeconfig, or the one in $AREAL_WORKERS_CLUSTER_DIR when that
    names the state of another local cluster (see tools/localcluster.py)."""
    state = os.environ.get(CLUSTER_DIR_VARIABLE)
    return Path(state) / "kubeconfig" if state else LOCAL_KUBECONFIG


@dataclass
class Target:
    """Where the demo runs: the cluster, and how its worker pods get their processes."""

    api: client.ApiClient
    server: str
    local: bool  # the project's local cluster: KWOK nodes, pods run as processes on this machine
    nodes: int
    fileroot: str  # AReaL's fileroot of the workers
    made_fileroot: bool = False
    real_node: bool = False  # the local cluster's real node runs the workers as containers (tools/realnode/)
    registry: RegistryLogin | None = None  # the local cluster's registry, which the real node's containerd trusts


@dataclass(frozen=True)
class RegistryLogin:
    address: str
    username: str
    password: str

    def docker_config(self) -> str:
        auth = base64.b64encode(f"{self.username}:{self.password}".encode()).decode()
        login = {"username": self.username, "password": self.password, "auth": auth}
        return json.dumps({"auths": {self.address: login}})


def connect(kubeconfig: str | None) -> client.ApiClient:
    if kubeconfig:
        return kube_config.new_client_from_config(config_file=kubeconfig)
    try:
        kube_config.load_incluster_config()
    except kube_config.ConfigException:
        kube_config.load_kube_config()
    return client.ApiClient()


def find_target(args: argparse.Namespace) -> Target:
    api = connect(args.kubeconfig)
    core = client.CoreV1Api(api)
    # A trainer pod's ServiceAccount may not list nodes: it is told it runs on the local cluster instead.
    local = args.local_cluster_pod or cluster.is_local_cluster(core)
    if local and not LOCAL_WORKER_PYTHON.exists():
        raise DemoFailure(
            f"the local cluster runs AReaL's worker server from {LOCAL_WORKER_PYTHON}: "
            f"run `make areal-worker` (or `make demo`, which does)"
        )
    if args.run_pods and not local:
        raise DemoFailure("--run-pods runs pods of the local cluster only (its nodes are KWOK's fake nodes)")
    if local and not args.run_pods:
        check_local_runner(args.kubeconfig)
    try:
        nodes = len(core.list_node().items)
    except ApiException:
        nodes = 0
    # On the local cluster the workers are processes of this machine: their files go to a directory of the run.
    fileroot = str(LOCAL_FILEROOT / f"{args.namespace}-{args.trial}") if local else ClusterConfig().fileroot
    real_node = local and not args.run_pods and cluster.has_real_node(core)
    if real_node:  # mounted into the worker containers, whose user is not this one
        Path(fileroot).mkdir(parents=True, exist_ok=True)
        Path(fileroot).chmod(0o777)
    return Target(
        api=api,
        server=api.configuration.host,
        local=local,
        nodes=nodes,
        fileroot=fileroot,
        made_fileroot=local,
        real_node=real_node,
        registry=local_registry(args.kubeconfig) if real_node else None,
    )


def local_registry(kubeconfig: str | None) -> RegistryLogin | None:
    """The registry of this checkout's local cluster when it runs (`make demo` starts it); else None."""
    if kubeconfig is None:
        return None  # a trainer pod: it has the package, not tools/
    from localkube.cluster import LocalCluster

    local = LocalCluster()
    if Path(kubeconfig).resolve() != local.kubeconfig.resolve() or local.registry().pid() is None:
        return None
    credentials = local.registry_credentials()
    return RegistryLogin(credentials.address, credentials.username, credentials.password)


def ensure_namespace(target: Target, namespace: str) -> bool:
    """Creates the demo's namespace unless it exists, before the scheduler is built (a scheduler refuses a namespace
    that does not exist); whether this run made it."""
    try:
        client.CoreV1Api(target.api).create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    except ApiException as error:
        # 409: it exists; 403: a trainer pod may not create namespaces and runs in the one it was given
        if error.status not in (403, 409):
            raise
        return False
    return True


def ensure_pull_secret(target: Target, namespace: str) -> None:
    """The local registry's login as the image pull Secret PULL_SECRET of the demo's namespace (gone with it)."""
    if target.registry is None:
        return
    secret = client.V1Secret(
        metadata=client.V1ObjectMeta(name=PULL_SECRET),
        type="kubernetes.io/dockerconfigjson",
        string_data={".dockerconfigjson": target.registry.docker_config()},
    )
    core = client.CoreV1Api(target.api)
    try:
        core.create_namespaced_secret(namespace, secret)
    except ApiException as error:
        if error.status != 409:
            raise
        core.replace_namespaced_secret(PULL_SECRET, namespace, secret)


def missing_image(target: Target) -> str:
    """An image no registry serves: on the real node with the local registry, a tag it never had (a real pull,
    refused with "not found"); elsewhere a host under `.invalid`, reserved by RFC 2606 (no registry can ever
    serve it, on any cluster)."""
    if target.registry is not None:
        return f"{target.registry.address}/areal-workers/areal-worker:never-pushed"
    return "registry.invalid/areal-runtime:v1.0.4"


def check_local_runner(kubeconfig: str | None) -> None:
    """On this checkout's local cluster, its podrunner must run the pods with AReaL's server (not the reference
    guard, which cannot load TrainEngine subclasses). tools/ is on the path there (`make demo`); a trainer pod
    (no kubeconfig) has only the package."""
    if kubeconfig is None:
        return
    from localkube.cluster import LocalCluster

    local = LocalCluster()
    if Path(kubeconfig).resolve() != local.kubeconfig.resolve():
        return  # another local cluster: its runner is its owner's business
    workers = local.podrunner_workers()
    if workers != "areal":
        now = "is not running" if workers is None else f"runs the {workers} worker server"
        raise DemoFailure(
            f"the local cluster's podrunner {now}; the demo's workers need AReaL's: run "
            f"`python tools/localcluster.py up --workers areal` (what `make demo` does), or pass "
            f"--run-pods"
        )


def scheduler_config(args: argparse.Namespace, target: Target) -> KubernetesSchedulerConfig:
    settings: dict[str, Any] = dict(
        namespace=args.namespace,
        kubeconfig=args.kubeconfig,
        helm_executable=args.helm,
        image=args.image,
        ready_timeout=args.timeout,
        helm_timeout=args.timeout,
        fork_ready_timeout=args.timeout,
    )
    if target.real_node:
        # Containers of the locally built image, with AReaL's environment mounted; the fileroot is shared with them.
        settings.update(values_files=(str(real_node_values(target.fileroot)),), termination_grace_seconds=5)
    if target.registry is not None:
        # The node has the locally built image (never pulled); another image comes from the local registry.
        settings.update(image_pull_policy="IfNotPresent", image_pull_secrets=(PULL_SECRET,))
    elif target.local:
        # The pods' `python` is this machine's AReaL environment (the cluster's pod runner maps it), and forks
        # started by a worker must find it by path.
        settings.update(python_executable=str(LOCAL_WORKER_PYTHON), termination_grace_seconds=5)
    return KubernetesSchedulerConfig(**settings)


def real_node_values(fileroot: str) -> Path:
    """A values file placing the workers on the real node (tools/realnode/values.py), next to the fileroot."""
    from realnode.values import worker_values

    values = Path(fileroot) / "real-node-values.json"
    values.write_text(json.dumps(worker_values(LOCAL_WORKER_PYTHON.parent.parent, Path(fileroot))))
    return values


def worker_spec(target: Target, image: str | None = None) -> SchedulingSpec:
    """One worker: AReaL's rpc_server on 1 CPU, a quarter on the real node, which has this machine's few cores (the
    guard's port and one more, as AReaL asks for)."""
    spec = SchedulingSpec(cpu=0.25 if target.real_node else 1, gpu=0, mem=2, port_count=2, cmd=WORKER_COMMAND)
    if image is not None:
        spec.image = image
    return spec


@contextmanager
def pod_runner(args: argparse.Namespace, target: Target) -> Iterator[None]:
    """--run-pods: tools/podrunner/ inside this program, running the namespace's pods with AReaL's server."""
    if not args.run_pods:
        yield
        return
    from podrunner.watch import PodRunner

    logs = Path(tempfile.mkdtemp(prefix="areal-bandit-demo-pods-"))
    runner = PodRunner(
        args.kubeconfig,
        args.namespace,
        logs,
        module_map={},
        python=str(LOCAL_WORKER_PYTHON),
        pythonpath=(str(DEMO_DIR),),
    ).start()
    try:
        yield
    finally:
        runner.stop()
        shutil.rmtree(logs, ignore_errors=True)
