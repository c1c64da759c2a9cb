"""AReaL's own RolloutController (areal 1.0.4, unmodified) drives the rollout role through the scheduler, and the
workers reach the trainer's callback server at the scheduler's trainer_address: every finished episode is
announced there (rollout_complete), and the actor's disk weight update goes through it too (PolicyActor writes
the policy under the shared fileroot and calls update_weights_disk; the controller has the rollout engines load it,
then removes the files). The trainer runs on the host, as a process of this machine: on KWOK nodes (workers as
processes, loopback pod IPs) it advertises 127.0.0.1; on the real node (containers in their own network namespaces
behind the node's bridge) the bridge's address. AReaL's default, the host name's address, is this machine's own
address, which no test may send traffic to: without trainer_address the workers would call it. Then the trainer as
the pod of `areal-workers submit`, whose Job sets trainer_address to the pod's IP.

The controllers run in AReaL's environment (tests/support/rollout_controller_run.py), as a trainer does.
"""

from __future__ import annotations

import json
import uuid

import numpy as np
import pytest

from areal_controller_runs import AREAL_CONTROLLER_MARKS, NODES, TIMEOUT, run_in_areal, trial_setup
from clusterlib import submit_trainer
from localkube.cluster import LocalCluster
from localkube.rbac import apply_rbac
from realnode.config import NETWORK, NODE_IP
from repo_paths import REPO

pytestmark = AREAL_CONTROLLER_MARKS
RUN = REPO / "tests" / "support" / "rollout_controller_run.py"


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("node", NODES)
def test_rollouts_and_disk_weight_updates_call_the_trainer_back_at_its_advertised_address(
    node, make_namespace, kubeconfig, helm_executable, tmp_path, core
):
    namespace, shared, values_file = trial_setup(node, make_namespace, tmp_path)
    address = NODE_IP if node == "real" else "127.0.0.1"  # the real node: the bridge's address, the pods' gateway
    seen = run_in_areal(
        RUN,
        {
            "namespace": namespace,
            "kubeconfig": str(kubeconfig),
            "helm_executable": helm_executable,
            "values_files": [str(values_file)],
            "termination_grace_seconds": 5,
            "ready_timeout": 300.0,
            "helm_timeout": 300.0,
            "trainer_address": address,
            "trial": f"t{uuid.uuid4().hex[:6]}",
            "cpu": 0.25 if node == "real" else 1,
            "fileroot": str(shared),
        },
        tmp_path,
    )

    assert seen["callback"].rsplit(":", 1)[0] == address, seen["callback"]  # AReaL bound and advertised it
    ips = [ip for _, ip in seen["workers"]]
    assert len(set(ips)) == 2
    prefix = NETWORK.rsplit(".", 1)[0] if node == "real" else "127."
    assert all(ip.startswith(prefix) for ip in ips), ips
    # Every episode came back: rollout_batch waits for each one's rollout_complete callback from its pod.
    for batch in (seen["before"], seen["after"]):
        assert len(batch) == 4 and all(len(item["actions"]) == 8 for item in batch), batch
        assert {item["workflow"] for item in batch} == {"bandit_engines.BanditInference"}
        assert len({item["pod"] for item in batch}) == 2  # round-robin over both rollout workers
    assert all(item["version"] == 0 and not any(item["logits"]) for item in seen["before"])
    # The actor's new policy reached both rollout engines from the shared fileroot, then the controller removed it.
    for item in seen["after"]:
        assert item["version"] == 1
        assert np.allclose(item["logits"], seen["actor_weights"]), (item["logits"], seen["actor_weights"])
    assert any(seen["actor_weights"])
    assert seen["weight_path"].startswith(str(shared)) and seen["published_removed"]
    assert core.list_namespaced_pod(namespace).items == []


@pytest.mark.areal_worker
def test_a_trainer_pod_advertises_its_pod_ip_and_its_workers_call_it_back(
    make_namespace, kubeconfig, helm_executable, tmp_path, core, capsys
):
    """The trainer of `areal-workers submit` (a KWOK pod: a process of this machine with a loopback pod IP, run
    with AReaL's environment, as the rbac/ ServiceAccount): the Job's AREAL_K8S_TRAINER_ADDRESS is its pod IP."""
    assert LocalCluster().podrunner_workers() == "areal", (
        "the KWOK pods run AReaL's rpc_server (the cluster's podrunner)"
    )
    namespace = make_namespace(private=False)
    apply_rbac(kubeconfig, namespace)
    shared = tmp_path / "areal"
    shared.mkdir()
    values = {"cluster": {"fileroot": str(shared), "nameResolve": {"nfsRecordRoot": str(shared / "name_resolve")}}}
    (tmp_path / "values.json").write_text(json.dumps(values))
    settings = {
        "values_files": [str(tmp_path / "values.json")],
        "helm_executable": helm_executable,
        "termination_grace_seconds": 5,
        "ready_timeout": 300.0,
        "helm_timeout": 300.0,
        "trial": f"t{uuid.uuid4().hex[:6]}",
        "cpu": 1,
        "fileroot": str(shared),
    }
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    code, out, err = submit_trainer(
        capsys,
        kubeconfig,
        namespace,
        *("--name", "rollout-trainer", "--", "python", str(RUN), str(tmp_path / "settings.json")),
        start_timeout=300,
    )
    assert code == 0, f"{out}\n{err}"
    # The pod's log has its stderr too (AReaL's logs, interpreter shutdown notes): the JSON line is the result.
    seen = json.loads([line for line in out.splitlines() if line.startswith('{"callback"')][-1])
    [pod] = core.list_namespaced_pod(namespace, label_selector="job-name=rollout-trainer").items
    assert seen["trainer_address"] == pod.status.pod_ip and pod.status.pod_ip.startswith("127.")
    assert seen["callback"].rsplit(":", 1)[0] == pod.status.pod_ip
    for item in seen["after"]:
        assert item["version"] == 1 and np.allclose(item["logits"], seen["actor_weights"])
    assert seen["published_removed"]
