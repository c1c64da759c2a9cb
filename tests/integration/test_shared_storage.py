"""The chart's sharedStorage on the real node: a ReadWriteMany PersistentVolumeClaim (bound to a hostPath volume of
the one node, as a platform's NFS or CephFS claim binds to its share) mounted into every worker at the trainer's own
path, holding AReaL's fileroot and nfs name_resolve root. Two worker containers and the trainer on the host write and
read each other's records with AReaL's own name_resolve; `helm test` checks the volume is writable for the workers'
uid. Without a shared volume the scheduler warns (test_unshared_paths.py, on KWOK nodes)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from areal_workers import naming
from clusterlib import job, spec
from real_node_trials import TIMEOUTS, host_claim, kubectl
from realnode.values import worker_values
from repo_paths import AREAL_WORKER_ENV, AREAL_WORKER_PYTHON

pytestmark = [
    pytest.mark.serial_cluster,
    pytest.mark.real_node,
    pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="the local cluster's real node only"),
]

CLAIM = "areal-shared"
# AReaL's own name_resolve (nfs). argv: record root, then steps `add:KEY=VALUE` or `get:KEY`; prints what each
# `get` found, a line each. Several steps to one process: importing AReaL in a 0.5-CPU container takes half a minute.
NAME_RESOLVE = """
import sys
from areal.api.cli_args import NameResolveConfig
from areal.utils import name_resolve
name_resolve.reconfigure(NameResolveConfig(type="nfs", nfs_record_root=sys.argv[1]))
for step in sys.argv[2:]:
    action, _, argument = step.partition(":")
    if action == "add":
        key, _, value = argument.partition("=")
        name_resolve.add(key, value, delete_on_exit=False, replace=True)
    else:
        print(name_resolve.get(argument))
"""
WORKER_CPU = 0.5  # two workers in the node's 2 cores; AReaL's import is what the test waits for


@pytest.fixture
def shared(real_node, kube_client, tmp_path):
    """(namespace, host directory): a namespace whose claim CLAIM is bound to a hostPath volume of that directory."""
    core = client.CoreV1Api(kube_client)
    namespace = f"t-shared-{uuid.uuid4().hex[:6]}"
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)  # the workers run as uid 1000
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace)))
    volume = host_claim(core, directory, namespace, CLAIM)
    yield namespace, directory
    core.delete_namespace(namespace, propagation_policy="Background")
    core.delete_persistent_volume(volume)


def make_scheduler(kubeconfig, helm_executable, namespace: str, values: dict, directory: Path):
    from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig

    values_file = directory / f"values-{uuid.uuid4().hex[:6]}.json"
    values_file.write_text(json.dumps(values))
    config = KubernetesSchedulerConfig(
        namespace=namespace,
        kubeconfig=str(kubeconfig),
        helm_executable=helm_executable,
        values_files=(str(values_file),),
        **TIMEOUTS,
    )
    return KubernetesScheduler(config=config, experiment_name="exp", trial_name=f"t{uuid.uuid4().hex[:4]}")


def in_pod(kubeconfig, namespace: str, pod: str, *argv: str) -> list[str]:
    done = kubectl(kubeconfig, "-n", namespace, "exec", pod, "-c", "worker", "--", "python", "-c", NAME_RESOLVE, *argv)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def on_host(*argv: str) -> list[str]:
    done = subprocess.run(
        [str(AREAL_WORKER_PYTHON), "-c", NAME_RESOLVE, *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_workers_and_the_trainer_share_name_resolve_records_through_the_claim(
    shared, kubeconfig, helm_executable, kube_client, tmp_path, caplog
):
    namespace, directory = shared
    records = str(directory / "name_resolve")
    values = {
        **worker_values(AREAL_WORKER_ENV),  # the real node's image and AReaL's environment, no shared host mount
        "sharedStorage": {"enabled": True, "claimName": CLAIM, "mountPath": str(directory)},
        "cluster": {"fileroot": str(directory / "fileroot"), "nameResolve": {"nfsRecordRoot": records}},
    }
    scheduler = make_scheduler(kubeconfig, helm_executable, namespace, values, tmp_path)
    try:
        with caplog.at_level(logging.WARNING, logger="areal_workers"):
            scheduler.create_workers(job("actor", 2, [spec(cpu=WORKER_CPU)]))
            assert len(scheduler.get_workers("actor")) == 2
        assert not [r for r in caplog.records if "no volume every worker mounts" in r.getMessage()]
        pods = sorted(
            p.metadata.name
            for p in client.CoreV1Api(kube_client)
            .list_namespaced_pod(namespace, label_selector=naming.release_selector(scheduler.release))
            .items
        )
        first, second = pods
        # The first record from a worker: the directories it makes are the workers' uid's (the host runs as root).
        assert in_pod(kubeconfig, namespace, first, records, "add:exp/trial/actor/0=from-worker-0") == []
        assert on_host(records, "add:exp/trial/trainer=from-the-trainer") == []  # the trainer, on the host
        steps = ("get:exp/trial/actor/0", "get:exp/trial/trainer", "add:exp/trial/actor/1=from-worker-1")
        assert in_pod(kubeconfig, namespace, second, records, *steps) == ["from-worker-0", "from-the-trainer"]
        assert on_host(records, "get:exp/trial/actor/1") == ["from-worker-1"]

        test = subprocess.run(
            [helm_executable, "--kubeconfig", str(kubeconfig), "-n", namespace, "test", scheduler.release, "--logs"],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert test.returncode == 0, test.stdout + test.stderr
        assert f"shared volume {directory} writable" in test.stdout and "2/2 workers healthy" in test.stdout
    finally:
        scheduler.delete_workers()
        scheduler.close()
