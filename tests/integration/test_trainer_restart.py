"""A trainer killed with SIGKILL and started again on the same trial (AReaL's recover, a re-run, a Job's next
attempt) gets working workers at once: AReaL's TrainController.initialize of the same roles succeeds on the same
pods, on the same nodes, with fresh worker processes (restarted in place: one more container restart, no new pod),
the process-forked role is forked again, the gloo group forms again and the update is all-reduced, and the second
trainer's destroy leaves nothing. On KWOK nodes (AReaL's rpc_server as processes) and on the real node (containers
restarted by the kubelet).
"""

from __future__ import annotations

import signal
import uuid

import pytest

from areal_controller_runs import AREAL_CONTROLLER_MARKS, NODES, TIMEOUT, run_areal_script, trial_setup
from repo_paths import AREAL_WORKER_PYTHON, REPO

pytestmark = AREAL_CONTROLLER_MARKS
RUN = REPO / "tests" / "support" / "trainer_restart_run.py"
GRACE_SECONDS = 8  # the second trainer watches the dead one's Lease for half of it, then takes it over


@pytest.mark.timeout(3 * TIMEOUT)
@pytest.mark.parametrize("node", NODES)
def test_a_trainer_killed_and_started_again_gets_its_workers_restarted_in_place(
    node, make_namespace, kubeconfig, helm_executable, tmp_path, core
):
    namespace, _, values_file = trial_setup(node, make_namespace, tmp_path)
    settings = {
        "namespace": namespace,
        "kubeconfig": str(kubeconfig),
        "helm_executable": helm_executable,
        "values_files": [str(values_file)],
        "termination_grace_seconds": 5,
        "ready_timeout": 300.0,
        "helm_timeout": 300.0,
        "lease_grace_seconds": GRACE_SECONDS,
        "trial": f"t{uuid.uuid4().hex[:6]}",
        "cpu": 0.25 if node == "real" else 1,
    }
    if node == "kwok":  # the forks start as processes of this machine: AReaL's interpreter, not the first on PATH
        settings["python_executable"] = str(AREAL_WORKER_PYTHON)
    code, [first] = run_areal_script(RUN, {**settings, "life": "first"}, tmp_path, "first")
    assert code == -signal.SIGKILL  # died without a clean-up, its Lease left unrenewed
    code, [findings, end] = run_areal_script(RUN, {**settings, "life": "second"}, tmp_path, "second")
    assert code == 0 and end == {"destroyed": True}
    assert findings["world_sizes"] == [2] and findings["logp_items"] == 2
    actor_pods = {name: pod for name, pod in first["pods"].items() if "-actor-" in name}
    assert len(actor_pods) == 2
    for name, before in actor_pods.items():
        after = findings["pods"][name]
        assert (after["uid"], after["node"]) == (before["uid"], before["node"])  # the same pods on the same nodes
        assert after["restarts"] == before["restarts"] + 1  # with a fresh worker process
    assert [w[1] for w in findings["workers"]["actor"]] == [w[1] for w in first["workers"]["actor"]]
    assert [w[1] for w in findings["workers"]["ref"]] == [w[1] for w in findings["workers"]["actor"]]
    assert findings["revisions"].count("fork ref from actor (2 processes)") == 2  # forked again, ports recorded
    assert core.list_namespaced_pod(namespace).items == []
    print(f"{node}: ready after {first['seconds_to_ready']}s, restarted ready after {findings['seconds_to_ready']}s")
