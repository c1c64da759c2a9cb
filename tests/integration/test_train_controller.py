"""AReaL's own TrainController drives the scheduler (the AReaL lane): its initialize() creates the workers, sets
RANK, WORLD_SIZE, MASTER_ADDR (rank 0's pod IP) and MASTER_PORT (rank 0's second port), creates the engines and
has them form a torch.distributed gloo group across the pods; one data-parallel update is all-reduced between the
ranks; destroy() removes the role, rank 0 last. On KWOK nodes (workers as processes of this machine, loopback pod
IPs) and on the real node (containers in their own network namespaces).

The controller runs in AReaL's environment (tests/support/train_controller_run.py), as a trainer does.
"""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from areal_controller_runs import AREAL_CONTROLLER_MARKS, NODES, TIMEOUT, run_in_areal, trial_setup
from realnode.config import NETWORK
from repo_paths import REPO

pytestmark = AREAL_CONTROLLER_MARKS
RUN = REPO / "tests" / "support" / "train_controller_run.py"


@pytest.mark.timeout(2 * TIMEOUT)
@pytest.mark.parametrize("node", NODES)
def test_train_controller_forms_a_gloo_group_across_pods_and_all_reduces(
    node, make_namespace, kubeconfig, helm_executable, tmp_path, core
):
    namespace, _, values_file = trial_setup(node, make_namespace, tmp_path)
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
            "trial": f"t{uuid.uuid4().hex[:6]}",
            "cpu": 0.25 if node == "real" else 1,
        },
        tmp_path,
    )

    [rank0, rank1] = seen["workers"]
    assert seen["master"] == f"{rank0[1]}:{rank0[2][1]}"  # MASTER_ADDR:MASTER_PORT = rank 0's IP, second port
    assert rank0[1] != rank1[1]  # two pods
    if node == "real":
        assert all(ip.startswith(NETWORK.rsplit(".", 1)[0]) for _, ip, _ in seen["workers"]), seen["workers"]
    else:
        assert all(ip.startswith("127.") for _, ip, _ in seen["workers"]), seen["workers"]
    updates = {update["rank"]: update for update in seen["updates"]}
    assert sorted(updates) == [0, 1] and {u["world_size"] for u in updates.values()} == {2}
    local = [np.array(updates[rank]["local_gradient"]) for rank in (0, 1)]
    assert not np.allclose(local[0], local[1])  # the ranks saw different shards
    for update in updates.values():
        assert np.allclose(update["applied_gradient"], (local[0] + local[1]) / 2)  # the all-reduced mean
    assert np.allclose(seen["weights"][0], seen["weights"][1])
    assert seen["revisions_left"] == []  # TrainController.destroy deleted the role, the release's last: uninstalled
    assert core.list_namespaced_pod(namespace).items == []
