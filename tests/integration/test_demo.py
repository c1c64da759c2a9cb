"""The README's main command, `make demo`, as a newcomer runs it: in a fresh clone of this checkout (no .venv, no
.tools; the tool cache is shared, so its tools are linked, not built), on the session's local cluster, where the
demo's namespace does not exist yet. Its output is checked step by step, and then the cluster and this machine: no
namespace, release, pod or worker process of the demo left. (`make demo IN_CLUSTER=1`'s path, the demo as the
trainer pod of `areal-workers submit`: test_demo_in_cluster.py.)
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from demo_runs import STEPS, wait_for_no_processes
from localkube.cluster import LocalCluster
from repo_paths import AREAL_WORKER_PYTHON, REPO

pytestmark = [
    pytest.mark.serial_cluster,  # in a namespace of a fixed name (tools/test_lanes.py)
    pytest.mark.real_node,  # its workers run on the real node when the cluster has one
    pytest.mark.fixed_names,  # the demo's namespace, which the docs' pages name too
    pytest.mark.skipif(
        bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")),
        reason="the demo's workers need examples/bandit_demo in their image on other clusters; here it runs on the "
        "local one",
    ),
]

DEMO_NAMESPACE = "bandit-demo"  # the demo's default
DEMO_ITERATIONS = 8  # the demo's default
# The clone's virtualenv is made (pip, from its cache) and its cached tools linked before the demo runs.
CLONE_DEMO_TIMEOUT = 1500
MISSING_IMAGE = "registry.invalid/areal-runtime:v1.0.4"
ITERATION_ROW = re.compile(r"^\s+(\d+)\s+(\d\.\d{3})\s+(\d+\.\d)%\s+(-?\d+\.\d{3})\s+v(\d+)$", re.MULTILINE)


def newcomer_environment(home: Path) -> dict[str, str]:
    """What a newcomer's shell has: no virtualenv, none of this checkout's tools on PATH, no make or pytest state; and
    AREAL_WORKERS_CLUSTER_DIR, so the clone's `make demo` joins the session's cluster instead of starting another on
    the same ports."""
    ours = (str(REPO / ".tools"), str(REPO / ".venv"))
    path = os.pathsep.join(entry for entry in os.environ["PATH"].split(os.pathsep) if not entry.startswith(ours))
    dropped = ("MAKE", "MFLAGS", "PYTEST", "VIRTUAL_ENV", "PYTHONPATH", "AREAL_WORKERS_WORKER", "AREAL_K8S_")
    environment = {key: value for key, value in os.environ.items() if not key.startswith(dropped)}
    return {**environment, "PATH": path, "AREAL_WORKERS_CLUSTER_DIR": str(LocalCluster().state)}


@pytest.fixture
def fresh_clone(tmp_path, core) -> Iterator[Path]:
    """A clone of this checkout's HEAD in a new directory (no .venv, no .tools), and the demo's namespace absent
    from the cluster, as on a newcomer's machine; whatever a failed demo left is removed afterwards."""
    assert AREAL_WORKER_PYTHON.exists(), "the demo's workers run AReaL's rpc_server: run `make areal-worker`"
    assert not namespace_exists(core, DEMO_NAMESPACE), f"namespace {DEMO_NAMESPACE} exists: delete it first"
    clone = tmp_path / "areal-workers"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    yield clone
    if namespace_exists(core, DEMO_NAMESPACE):
        core.delete_namespace(DEMO_NAMESPACE)


def namespace_exists(core, name: str) -> bool:
    try:
        return core.read_namespace(name).status.phase != "Terminating"
    except ApiException as error:
        if error.status != 404:
            raise
        return False


@pytest.mark.timeout(CLONE_DEMO_TIMEOUT + 60)
def test_a_fresh_clones_make_demo_trains_recovers_and_leaves_nothing(fresh_clone, core, helm_client, tmp_path):
    """The README's main command, run as a newcomer runs it: `make demo` in a fresh clone (its virtualenv made, the
    cached tools linked), on a cluster where the demo's namespace does not exist yet."""
    started = time.monotonic()
    result = subprocess.run(
        ["make", "demo"],
        capture_output=True,
        text=True,
        timeout=CLONE_DEMO_TIMEOUT,
        cwd=fresh_clone,
        env=newcomer_environment(tmp_path),
    )
    output = result.stdout
    # Kept for whoever reads the run afterwards: what a newcomer's terminal showed.
    kept = REPO / ".tools" / "lanes" / "fresh-clone-make-demo.log"
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_text(f"{output}\n--- stderr ---\n{result.stderr}")
    assert result.returncode == 0, f"exit {result.returncode}\n{output[-20000:]}\n{result.stderr[-5000:]}"
    assert (fresh_clone / ".venv" / "bin" / "python").exists() and (fresh_clone / ".tools" / "bin" / "helm").exists()
    print(f"fresh clone's make demo: {time.monotonic() - started:.0f} s")

    missing = [step for step in STEPS if step not in output]
    assert not missing, f"steps missing: {missing}\n{output}"
    # The first iterations are in the table, then one more after the recovery.
    rows = [(int(i), float(reward)) for i, reward, *_ in ITERATION_ROW.findall(output)]
    assert [i for i, _ in rows] == list(range(1, DEMO_ITERATIONS + 2)), output
    assert rows[DEMO_ITERATIONS - 1][1] > rows[0][1] + 0.1, f"the mean reward did not rise: {rows}"
    # AReaL's TrainController made the actor's workers, engines and gloo group; the ranks all-reduced.
    assert re.search(
        r"actor    actor/0 actor/1 ready, engines in a gloo group at [\d.]+:8001 \(actor/0's pod IP and "
        r"second port\)",
        output,
    ), output
    assert "hold identical weights: the gradients were all-reduced between their pods" in output
    failure = output[output.index(STEPS[5]) : output.index(STEPS[6])]
    assert "get_workers('rollout') raised WorkerFailedError" in failure
    local = LocalCluster()
    bad_image = MISSING_IMAGE
    if local.real_node().is_running():  # `make demo` puts the workers on it: real containers
        assert "the local cluster's real node" in output and "container of the locally built image" in output
        # ... and starts the registry: the kubelet pulls the missing tag from it for real
        missing = bad_image = f"{local.registry_credentials().address}/areal-workers/areal-worker:never-pushed"
        assert "pulls it for real from the local cluster's registry" in failure, failure
        assert f'"{missing}"' in failure and "not found" in failure, failure
        assert "ErrImagePull [fatal]" in failure or "ImagePullBackOff [fatal]" in failure, failure
        assert "on node real-node-0" in failure and f"image {missing} does not exist" in failure, failure
    else:
        assert f'Back-off pulling image "{MISSING_IMAGE}"' in failure and "ImagePullBackOff [fatal]" in failure
        assert "simulated" in failure  # the output says what the local cluster simulates
    assert re.search(r"rolled back release \S+ to revision 3", failure), failure
    assert "(Rollback to 3)" in failure and "untouched, same pod UIDs: actor-0, actor-1, rollout-0" in failure
    history = output[output.index(STEPS[6]) : output.index(STEPS[7])]
    described = [line.split(None, 2)[2] for line in history.splitlines()[2:] if line.strip()]
    assert described[:3] == [
        "create actor: 2 worker(s)",
        "create rollout: 2 worker(s)",
        "fork ref from actor (2 processes)",
    ]
    # The bad update, with what became of it (the note scheduler.history() carries), then the rollback and why.
    update = re.fullmatch(r"update rollout: image \S+->(\S+) \(workers failed: (.+)\)", described[3])
    assert update and update.group(1) == bad_image, described
    assert re.match(r"(ErrImagePull|ImagePullBackOff|ErrImageNeverPull) \(rollout/[01]\)$", update.group(2)), described
    assert described[4] == f"Rollback to 3 (after revision 4 failed: {update.group(2)})", described
    assert "release uninstalled, no pods left, nothing answers on the 6 worker addresses" in output

    # Nothing left behind, as seen from outside the demo.
    assert core.list_namespaced_pod(DEMO_NAMESPACE).items == []
    assert list(asyncio.run(helm_client.list_releases(all=True, namespace=DEMO_NAMESPACE))) == []
    assert wait_for_no_processes("demo") == []
    assert not (Path(tempfile.gettempdir()) / "areal-bandit-demo" / f"{DEMO_NAMESPACE}-demo").exists()
    assert not namespace_exists(core, DEMO_NAMESPACE)  # it made its namespace, and removed it
