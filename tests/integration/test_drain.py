"""Node drains against a running trial: the real eviction API and the controller-manager's disruption controller.
`kubectl drain` of a node with a trial's workers is refused by the role's PodDisruptionBudget (the chart's default
allows no eviction), `areal-workers diagnose` says why the drain waits and how to let it go on, and once the trial
is deleted the same drain passes. The node is a tainted KWOK node of the test's own, so no other test's pods are on
it."""

from __future__ import annotations

import subprocess
import time

import pytest
from kubernetes import client

from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_OK
from clusterlib import job
from fault_nodes import fault_node, remove_fault_node
from repo_paths import TOOLS_BIN

pytestmark = pytest.mark.serial_cluster  # adds a node and evicts pods


def drain(kubeconfig, node: str, timeout: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            str(TOOLS_BIN / "kubectl"),
            "--kubeconfig",
            str(kubeconfig),
            "drain",
            node,
            "--ignore-daemonsets",
            "--delete-emptydir-data",  # the workers' /dev/shm
            f"--timeout={timeout}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )


def wait_budget_counts(policy: client.PolicyV1Api, namespace: str, pods: int) -> client.V1PodDisruptionBudget:
    """The disruption controller has counted the role's healthy pods (before that, its status allows nothing)."""
    deadline = time.monotonic() + 60
    while True:
        [budget] = policy.list_namespaced_pod_disruption_budget(namespace, label_selector="areal.io/role=pinned").items
        if budget.status is not None and (budget.status.current_healthy or 0) == pods:
            return budget
        assert time.monotonic() < deadline, budget.status
        time.sleep(0.5)


def test_a_drain_waits_for_a_running_trial_and_goes_on_once_it_is_deleted(
    make_scheduler, core, kube_client, kubeconfig, namespace, capsys
):
    node, placement = fault_node(core, 253, "kwok-drain")
    try:
        scheduler = make_scheduler(extra_values=placement)
        scheduler.create_workers(job("pinned", 2))
        workers = scheduler.get_workers("pinned")
        budget = wait_budget_counts(client.PolicyV1Api(kube_client), namespace, 2)
        assert (budget.spec.max_unavailable, budget.status.disruptions_allowed) == (0, 0)

        refused = drain(kubeconfig, node, "15s")
        assert refused.returncode != 0, refused.stdout
        assert "violate the pod's disruption budget" in refused.stderr, refused.stderr
        assert [w.id for w in scheduler.get_workers("pinned", timeout=60)] == [w.id for w in workers]

        code = main(["--kubeconfig", str(kubeconfig), "-n", namespace, "diagnose", "pinned"])
        out = " ".join(capsys.readouterr().out.split())  # as printed, wrapped to the terminal's width
        assert code == EXIT_OK, out  # the workers are healthy: the note explains the drain, it is no failure
        assert f"node {node} is cordoned" in out and "allows no eviction while the trial runs" in out, out
        assert f"areal-workers down --release {scheduler.release}" in out and f"kubectl uncordon {node}" in out

        scheduler.delete_workers()
        passed = drain(kubeconfig, node, "60s")
        assert passed.returncode == 0, passed.stderr
        assert core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items == []
    finally:
        remove_fault_node(core, node)
