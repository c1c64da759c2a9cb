"""Trials on the real node, for the tests that run there (test_real_node.py, test_network_policy_enforced.py):
schedulers whose workers are containers of the node, and the helpers those tests share. The `real_node` and
`real_node_actors` fixtures are in conftest.py, so that every module of a session shares one node and one trial."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from kubernetes import client

from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig
from areal_workers.naming import LABEL_ROLE
from clusterlib import spec
from realnode.values import worker_values
from repo_paths import AREAL_WORKER_ENV, TOOLS_BIN

KUBECTL = TOOLS_BIN / "kubectl"
# AReaL's server imports torch: seconds alone, more with several starting at once on 2 cores.
TIMEOUTS = {"ready_timeout": 240.0, "helm_timeout": 240.0, "fork_ready_timeout": 240.0}
CPU = 0.25  # the node has this machine's 2 cores; requests are limits in the chart


def task(**overrides):
    return spec(cpu=CPU, **overrides)


def scheduler_factory(kubeconfig: Path, helm_executable: str, namespace: str, directory: Path):
    """(make, made): KubernetesSchedulers whose workers run on the real node, with the trial's --fileroot shared
    with this process (AReaL's NFS name_resolve)."""
    made: list[KubernetesScheduler] = []
    shared = directory / "areal"
    shared.mkdir()
    shared.chmod(0o777)  # the workers run as uid 1000

    def make(
        trial: str = "trial0", worker_defaults: dict | None = None, values: dict | None = None, **overrides
    ) -> KubernetesScheduler:
        """`worker_defaults`: settings merged into the values' workerDefaults (e.g. rdma); `values`: other top-level
        values (e.g. networkPolicy)."""
        values_file = directory / f"values-{len(made)}.json"
        base = worker_values(AREAL_WORKER_ENV, shared)
        base["workerDefaults"].update(worker_defaults or {})
        values_file.write_text(
            json.dumps(
                {
                    **base,
                    "cluster": {
                        "fileroot": str(shared),
                        "nameResolve": {"nfsRecordRoot": str(shared / "name_resolve")},
                    },
                    **(values or {}),
                }
            )
        )
        settings = dict(
            namespace=namespace,
            kubeconfig=str(kubeconfig),
            helm_executable=helm_executable,
            values_files=(str(values_file),),
            **TIMEOUTS,
        )
        settings.update(overrides)
        scheduler = KubernetesScheduler(
            config=KubernetesSchedulerConfig(**settings), experiment_name="exp", trial_name=trial
        )
        made.append(scheduler)
        return scheduler

    return make, made


def close_all(made: list[KubernetesScheduler]) -> None:
    for scheduler in made:
        if not scheduler.closed:
            scheduler.delete_workers()
        scheduler.close()


def kubectl(kubeconfig: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(KUBECTL), f"--kubeconfig={kubeconfig}", *args], capture_output=True, text=True, timeout=timeout
    )


def role_pods(core: client.CoreV1Api, namespace: str, role: str) -> list[client.V1Pod]:
    pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_ROLE}={role}").items
    return sorted(pods, key=lambda p: p.metadata.name)


def host_volume(
    core: client.CoreV1Api, name: str, directory: Path, namespace: str, claim: str, storage_class: str = ""
) -> None:
    """A ReadWriteMany PersistentVolume of the real node's host `directory`, bound ahead to `claim` in `namespace`:
    what a platform's NFS or CephFS share is to a cluster of one node (its capacity covers any claim's request).
    Deleting it is the caller's."""
    core.create_persistent_volume(
        client.V1PersistentVolume(
            metadata=client.V1ObjectMeta(name=name),
            spec=client.V1PersistentVolumeSpec(
                capacity={"storage": "1Ti"},
                access_modes=["ReadWriteMany"],
                storage_class_name=storage_class,
                claim_ref=client.V1ObjectReference(namespace=namespace, name=claim),
                persistent_volume_reclaim_policy="Retain",
                host_path=client.V1HostPathVolumeSource(path=str(directory), type="Directory"),
            ),
        )
    )


def host_claim(core: client.CoreV1Api, directory: Path, namespace: str, claim: str) -> str:
    """`claim` in `namespace`, bound to a host_volume of `directory`; returns the volume's name."""
    volume = f"{namespace}-{claim}"
    host_volume(core, volume, directory, namespace, claim)
    core.create_namespaced_persistent_volume_claim(
        namespace,
        client.V1PersistentVolumeClaim(
            metadata=client.V1ObjectMeta(name=claim),
            spec=client.V1PersistentVolumeClaimSpec(
                access_modes=["ReadWriteMany"],
                storage_class_name="",
                volume_name=volume,
                resources=client.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )
    return volume
