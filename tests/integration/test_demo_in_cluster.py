"""`make demo IN_CLUSTER=1`'s path: the demo as the trainer pod of `areal-workers submit`, in a namespace of its own
that enforces PodSecurity `restricted`. Its workers run on KWOK nodes (the pods the cluster's podrunner runs), so it
needs neither the real node nor the demo's fixed namespace, and runs beside other tests after the busy start."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from demo_runs import DEMO, STEPS, wait_for_no_processes
from localkube.cluster import LocalCluster
from localkube.rbac import apply_rbac
from repo_paths import AREAL_WORKER_PYTHON, REPO

pytestmark = [
    pytest.mark.late,
    pytest.mark.skipif(
        bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")),
        reason="the demo's trainer image and workers are the local cluster's; other clusters run `make demo` as "
        "docs/en/demo.md says",
    ),
]

ITERATIONS = 6
# AReaL's worker takes about 12 s to start on 2 idle cores and much longer on a loaded machine; 4 pods, 2 forks
# and a replaced pod start one role after the other.
DEMO_TIMEOUT = 900
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


@pytest.mark.timeout(DEMO_TIMEOUT + 60)
def test_the_demo_runs_as_a_trainer_pod_submitted_with_areal_workers(make_namespace, kubeconfig, core, tmp_path):
    """`make demo IN_CLUSTER=1`: the demo is the trainer of a Job (areal-workers submit, as the rbac/ ServiceAccount)
    whose pod reaches the workers at their pod IPs; its log and exit code come back to the command. The namespace
    enforces PodSecurity `restricted` (docs/en/security.md): the trainer's pod, its workers and forks pass it."""
    from podrunner.watch import PodRunner

    if LocalCluster().podrunner_workers() == "areal":
        namespace, runner = make_namespace(RESTRICTED, private=False), None
    else:  # the pods need AReaL's server: a runner of this test (the trainer pod gets podrunner's interpreter)
        namespace = make_namespace(RESTRICTED)
        runner = PodRunner(
            str(kubeconfig),
            namespace,
            tmp_path / "pods",
            module_map={},
            python=str(AREAL_WORKER_PYTHON),
            pythonpath=(str(DEMO.parent),),
        ).start()
    try:
        apply_rbac(kubeconfig, namespace)  # rbac/, its admission policy bound to this namespace alone
        trial = f"t{uuid.uuid4().hex[:6]}"
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "areal_workers.cli",
                "--kubeconfig",
                str(kubeconfig),
                "-n",
                namespace,
                "submit",
                "--image",
                "local/areal-trainer:dev",
                "--name",
                "demo-trainer",
                "--start-timeout",
                "300",
                "--",
                "python",
                str(DEMO),
                "--namespace",
                namespace,
                "--trial",
                trial,
                "--iterations",
                str(ITERATIONS),
                "--local-cluster-pod",
            ],
            capture_output=True,
            text=True,
            timeout=DEMO_TIMEOUT,
            cwd=REPO,
            env={**os.environ, "PATH": f"{REPO / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}"},
        )
    finally:
        if runner is not None:
            runner.stop()
    output = result.stdout
    assert result.returncode == 0, f"exit {result.returncode}\n{output}\n{result.stderr}"
    assert "trainer demo-trainer-" in result.stderr and "succeeded with exit code 0" in result.stderr
    missing = [step for step in STEPS if step not in output]
    assert not missing, f"steps missing: {missing}\n{output}"
    assert "release uninstalled, no pods left, nothing answers on the 6 worker addresses" in output
    assert wait_for_no_processes(trial) == []
