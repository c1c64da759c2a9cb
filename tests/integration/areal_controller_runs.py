"""What the tests of AReaL's own controllers share (test_train_controller.py, test_rollout_controller.py): the
trial's shared directory and chart values on KWOK nodes or the real node, and a controller script run in AReaL's
environment, as a trainer runs, that prints its findings as its last JSON line."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from localkube.cluster import LocalCluster
from realnode.values import worker_values
from repo_paths import AREAL_WORKER_ENV, AREAL_WORKER_PYTHON, REPO

TIMEOUT = 600
# The marks of a module of AReaL controller runs: `late` (after the serial lane), only on the local cluster.
AREAL_CONTROLLER_MARKS = [
    pytest.mark.late,
    pytest.mark.skipif(
        bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")),
        reason="the demo's engines and the real node are the local cluster's",
    ),
]
# The `node` of a trial: its KWOK pods run AReaL's rpc_server under the cluster's podrunner (the areal lanes); the
# real node's containers run it, so the `real` trial is a real-node test of the serial-node lane.
NODES = [
    pytest.param("kwok", marks=pytest.mark.areal_worker),
    pytest.param("real", marks=[pytest.mark.serial_cluster, pytest.mark.real_node]),
]
DEMO_DIR = REPO / "examples" / "bandit_demo"  # the demo's engines, config and controllers
PYTHONPATH = os.pathsep.join(map(str, (REPO / "adapter", DEMO_DIR, REPO / "tests" / "support")))


def trial_setup(node: str, make_namespace: Callable[..., str], directory: Path) -> tuple[str, Path, Path]:
    """(namespace, shared directory, values file) for a trial on `node` ("kwok" or "real"): AReaL's fileroot and nfs
    records in the shared directory, which the real node's workers mount at the same path."""
    assert AREAL_WORKER_PYTHON.exists(), "the controllers and workers run AReaL: run `make areal-worker`"
    cluster = LocalCluster()
    shared = directory / "areal"
    shared.mkdir()
    shared.chmod(0o777)  # the real node's workers run as uid 1000
    values = {"cluster": {"fileroot": str(shared), "nameResolve": {"nfsRecordRoot": str(shared / "name_resolve")}}}
    if node == "real":
        if not cluster.real_node().is_running():
            cluster.up(real_node=True, timeout=300.0)
        values.update(worker_values(AREAL_WORKER_ENV, shared))
        namespace = make_namespace()  # the real node's kubelet runs its pods
    else:
        assert cluster.podrunner_workers() == "areal", "the KWOK pods run AReaL's rpc_server (the cluster's podrunner)"
        namespace = make_namespace(private=False)
    values_file = directory / "values.json"
    values_file.write_text(json.dumps(values))
    return namespace, shared, values_file


def run_areal_script(script: Path, settings: dict, directory: Path, name: str = "settings") -> tuple[int, list[dict]]:
    """`script NAME.json` in AReaL's environment: its exit code and the JSON lines it printed (at least one)."""
    path = directory / f"{name}.json"
    path.write_text(json.dumps(settings))
    result = subprocess.run(
        [str(AREAL_WORKER_PYTHON), str(script), str(path)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=directory,
        env={**os.environ, "PYTHONPATH": PYTHONPATH},
    )
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.returncode, lines


def run_in_areal(script: Path, settings: dict, directory: Path) -> dict:
    """`script SETTINGS.json` in AReaL's environment, which must exit 0; the JSON of its last line of output."""
    code, lines = run_areal_script(script, settings, directory)
    assert code == 0, f"exit {code}: {lines}"
    return lines[-1]
