"""Kueue admission latency: from create_workers to every worker Ready for the same role with and without Kueue.

A role of 2 workers with 4 GPUs each is created, waited for and deleted, `repeats` times in a namespace without Kueue
and as many times in a namespace Kueue manages (LocalQueue -> ClusterQueue with 16 GPUs: the quota is free, so this
is Kueue's own cost: its webhooks, the Workload, admission, ungating). KWOK makes the pods Ready (no worker process),
so the numbers are the control plane's path alone. Needs Kueue on the cluster (`tools/localcluster.py up --kueue`);
not part of bench/run.py's set (its cluster runs without Kueue).

    .venv/bin/python bench/kueue_admission.py --profile quick
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from kubernetes import client

import cluster_kit as kit
import harness
from areal_workers import Job, SchedulingSpec

NAME = "kueue_admission"
TITLE = "Kueue admission latency"
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
PROFILES = {"tiny": 1, "quick": 5, "full": 15}
REPLICAS, GPUS = 2, 4
READY_BY_KWOK = {"workerDefaults": {"podAnnotations": {"areal-workers.dev/readiness": "kwok"}}}


def role() -> Job:
    task = SchedulingSpec(cpu=1, mem=1, gpu=GPUS, port_count=2, cmd="python -m areal.infra.rpc.rpc_server")
    return Job(role="actor", replicas=REPLICAS, tasks=[task])


def quota(custom: client.CustomObjectsApi, namespace: str) -> list[tuple[str, str]]:
    """A ResourceFlavor and a ClusterQueue of 16 GPUs, the LocalQueue `lq`; returns the cluster-scoped objects."""
    suffix = uuid.uuid4().hex[:6]
    flavor, queue = f"bench-gpu-{suffix}", f"bench-cq-{suffix}"
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "resourceflavors",
        {"apiVersion": f"{GROUP}/{VERSION}", "kind": "ResourceFlavor", "metadata": {"name": flavor}},
    )
    quotas = {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": "16"}
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "clusterqueues",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "ClusterQueue",
            "metadata": {"name": queue},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": list(quotas),
                        "flavors": [
                            {"name": flavor, "resources": [{"name": k, "nominalQuota": v} for k, v in quotas.items()]}
                        ],
                    }
                ],
            },
        },
    )
    custom.create_namespaced_custom_object(
        GROUP,
        VERSION,
        namespace,
        "localqueues",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "LocalQueue",
            "metadata": {"name": "lq"},
            "spec": {"clusterQueue": queue},
        },
    )
    return [("clusterqueues", queue), ("resourceflavors", flavor)]


def measure(
    kubeconfig: str, namespace: str, repeats: int, scratch: Path, progress: kit.Progress, label: str, **overrides: Any
) -> list[float]:
    scheduler = kit.make_scheduler(
        kubeconfig,
        namespace,
        f"{label}-{uuid.uuid4().hex[:4]}",
        READY_BY_KWOK,
        scratch,
        capacity_check="off",
        **overrides,
    )
    seconds = []
    try:
        for repeat in range(repeats):
            started = time.monotonic()
            scheduler.create_workers(role())
            scheduler.get_workers("actor", timeout=120)
            seconds.append(time.monotonic() - started)
            progress(f"{label} #{repeat + 1}: {seconds[-1] * 1000:.0f} ms")
            scheduler.delete_workers()
    finally:
        scheduler.delete_workers()
        scheduler.close()
    return seconds


def run(profile: str, kubeconfig: str, progress: kit.Progress) -> harness.Result:
    from localkube.addons.kueue import MANAGED_NAMESPACE_LABEL

    repeats = PROFILES[profile]
    load_start = kit.loadavg()
    core = kit.core_api(kubeconfig)
    custom = client.CustomObjectsApi(core.api_client)
    with kit.scratch_dir(NAME) as scratch:
        with kit.namespace(core, "bench-plain") as plain:
            without = measure(kubeconfig, plain, repeats, Path(scratch), progress, "without Kueue")
        with kit.namespace(core, "bench-kueue") as queued:
            core.patch_namespace(queued, {"metadata": {"labels": {MANAGED_NAMESPACE_LABEL: "true"}}})
            cluster_objects = quota(custom, queued)
            try:
                with_kueue = measure(
                    kubeconfig, queued, repeats, Path(scratch), progress, "with Kueue", kueue_queue="lq"
                )
            finally:
                for plural, name in cluster_objects:
                    custom.delete_cluster_custom_object(GROUP, VERSION, plural, name)
    outcome = kit.result(
        NAME,
        TITLE,
        f"create_workers to all {REPLICAS} workers Ready ({GPUS} GPUs each), {repeats} runs each; KWOK readiness",
        profile,
        load_start,
    )
    outcome.command = f".venv/bin/python bench/{NAME}.py --profile {profile}"
    rows = [
        [label, round(kit.median(values) * 1000), round(min(values) * 1000), round(max(values) * 1000)]
        for label, values in (("without Kueue", without), ("with Kueue (quota free)", with_kueue))
    ]
    outcome.tables.append(harness.Table("queue to all pods Ready (ms)", ["role", "median", "min", "max"], rows))
    outcome.targets.append(
        f"Kueue adds {round((kit.median(with_kueue) - kit.median(without)) * 1000)} ms to the median"
    )
    return outcome


if __name__ == "__main__":
    raise SystemExit(kit.main(run, TITLE))
