"""Without the real node (a local cluster started with NODE=kwok), each test that needs it fails at its setup naming
the command that starts it, before any fixture runs (conftest.py's pytest_runtest_setup): checked in a pytest of its
own that sees an empty cluster state, whether or not this session's cluster has the node."""

from __future__ import annotations

import os
import subprocess
import sys

from repo_paths import REPO

NEEDING = (
    "tests/integration/test_real_node.py::test_readiness_comes_from_the_kubelets_probe",  # the real_node fixture
    "tests/integration/test_trainer_isolation.py",  # usefixtures("real_node")
)


def test_a_test_that_needs_the_real_node_fails_at_setup_naming_the_command_that_starts_it(tmp_path):
    state = tmp_path / "cluster"
    env = {
        **os.environ,
        "AREAL_WORKERS_CLUSTER_DIR": str(state),
        # Where a cluster would start if a fixture ran: nowhere near this session's.
        "AREAL_WORKERS_CLUSTER_PORT_BASE": "26440",
        "AREAL_WORKERS_CLUSTER_POD_OCTET": "70",
    }
    env.pop("AREAL_WORKERS_KUBECONFIG", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-o", "addopts=", *NEEDING],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=300,
    )
    out = result.stdout
    assert result.returncode == 1, out + result.stderr
    assert out.count("ERROR at setup of ") == 2, out
    assert "the local cluster runs no real node (it was started without one, e.g. NODE=kwok)" in out
    assert "start it with `make cluster-up NODE=real`" in out
    assert "Or leave out the tests that need it: -m 'not real_node'" in out
    assert "skipped" not in out and "passed" not in out
    assert not state.exists()  # no fixture started a cluster
