"""`areal-workers history` after a real OOM kill: on the real node (kubelet, containerd, runc, the kernel's memory
cgroup) an upgrade adds a worker that allocates past its memory limit; the kernel kills it, the scheduler diagnoses
OOMKilled and rolls back, and `history` shows that revision as failed with the OOM kill as its reason, and the
rollback after it."""

from __future__ import annotations

import json
import os

import pytest

from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_OK
from areal_workers.errors import WorkerFailedError
from clusterlib import job
from real_node_trials import close_all, scheduler_factory, task
from repo_paths import TOOLS_BIN

pytestmark = [
    pytest.mark.serial_cluster,  # the real node's few cores (tools/test_lanes.py)
    pytest.mark.real_node,
    # The node joins this checkout's local cluster; against another cluster ($AREAL_WORKERS_KUBECONFIG) there is none.
    pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="the local cluster's real node only"),
]
# Zero-filled, so every page is touched: 3 GiB past the 1Gi limit the chart sets from mem=1.
HOG = "python3 -c 'x = bytearray(3 * 2**30)'"


def test_history_shows_an_oom_killed_upgrade_as_failed_with_its_reason(
    real_node, kubeconfig, helm_executable, namespace, tmp_path, capsys, monkeypatch
):
    monkeypatch.setenv("PATH", f"{TOOLS_BIN}{os.pathsep}{os.environ['PATH']}")  # helm, for the command

    def cli(*argv: str) -> tuple[int, str]:
        code = main(["--kubeconfig", str(kubeconfig), "-n", namespace, *argv])
        return code, capsys.readouterr().out

    make, made = scheduler_factory(kubeconfig, helm_executable, namespace, tmp_path)
    try:
        scheduler = make(lease_grace_seconds=0)
        scheduler.create_workers(job("actor", 1, [task()]))
        scheduler.get_workers("actor")  # revision 1: all ready
        scheduler.create_workers(job("hog", 1, [task(cmd=HOG, mem=1)]))  # revision 2
        with pytest.raises(WorkerFailedError) as failed:
            scheduler.get_workers("hog", timeout=180)
        assert failed.value.exit_code == 137 and "OOMKilled" in failed.value.stderr, failed.value.stderr
        assert "rolled back release" in "\n".join(failed.value.__notes__)  # revision 3: back to revision 1

        code, out = cli("history", "-o", "json")
        assert code == EXIT_OK
        recorded = json.loads(out)
        rows = {r["revision"]: r for r in recorded["revisions"]}
        assert sorted(rows) == [1, 2, 3], rows
        assert rows[2]["note"] == "workers failed: OOMKilled (hog/0)", rows[2]
        assert rows[3]["note"] == "after revision 2 failed: OOMKilled (hog/0)", rows[3]
        assert rows[1]["note"] == "" and recorded["ready_revision"] == 3, recorded

        code, out = cli("history")
        assert code == EXIT_OK
        lines = {int(line.split()[0]): line for line in out.splitlines() if line.split() and line.split()[0].isdigit()}
        assert lines[2].split()[3] == "failed" and "(workers failed: OOMKilled (hog/0))" in lines[2], out
        assert "(after revision 2 failed: OOMKilled (hog/0))" in lines[3], out
    finally:
        close_all(made)
