"""`areal-workers status --watch` and `logs` as subprocesses against the local cluster's pods: a watch follows a
failed upgrade and a `rollback -y` in its frames' headers (the release read again on every frame) and ends with 130
at SIGINT; `logs ROLE` prints that role's rank 0 and `logs --since` leaves out the lines older than its duration."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from areal_workers.cli.session import EXIT_INTERRUPTED, EXIT_OK
from clusterlib import default_sigint, job, spec, wait_for
from repo_paths import REPO, TOOLS_BIN

CLI = [sys.executable, "-m", "areal_workers.cli"]
WITH_HELM = {**os.environ, "PATH": f"{TOOLS_BIN}{os.pathsep}{os.environ['PATH']}"}
CHART = REPO / "charts" / "areal-workers"
# One line a second: the pod's name and the time it was written, to check which pod and which window a log shows.
TICKER = (
    "python -c 'import os, time; "
    '[print(os.environ["POD_NAME"], time.time(), flush=True) or time.sleep(1) for _ in iter(int, 1)]\''
)


def cli(kubeconfig: Path, namespace: str, *argv: str) -> subprocess.CompletedProcess[str]:
    command = [*CLI, "--kubeconfig", str(kubeconfig), "-n", namespace, *argv]
    return subprocess.run(command, capture_output=True, text=True, env=WITH_HELM, timeout=300)


def header(frame: dict[str, Any]) -> tuple[Any, ...]:
    (trial,) = frame["trials"]
    return trial["revision"], trial["helm_status"], trial["ready_revision"]


def test_a_watch_follows_a_failed_upgrade_and_a_rollback_then_ends_with_130_at_sigint(
    kubeconfig, namespace, make_scheduler, helm_executable
):
    scheduler = make_scheduler(lease_grace_seconds=0)  # no live trainer: rollback does not refuse
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")  # revision 1, all ready
    watch = subprocess.Popen(
        [*CLI, "--kubeconfig", str(kubeconfig), "-n", namespace, "status", "--watch", "-o", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=WITH_HELM,
        preexec_fn=default_sigint,
    )
    frames: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: frames.extend(json.loads(line) for line in watch.stdout))
    reader.start()
    try:
        wait_for(lambda: frames, 60, "the watch's first frame")
        assert header(frames[0]) == (1, "deployed", 1), frames[0]

        # An upgrade no node can hold: helm waits, gives up and records the revision as failed.
        upgraded = subprocess.run(
            [
                helm_executable,
                "--kubeconfig",
                str(kubeconfig),
                "upgrade",
                scheduler.release,
                str(CHART),
                "-n",
                namespace,
                "--reuse-values",
                "--set",
                "roles.actor.resources.cpu=1000",
                "--wait",
                "--timeout",
                "15s",
            ],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert upgraded.returncode != 0, upgraded.stdout
        wait_for(lambda: any(header(f)[:2] == (2, "failed") for f in frames), 60, "a frame of the failed revision 2")

        rolled = cli(kubeconfig, namespace, "rollback", "-y", "--release", scheduler.release)
        assert rolled.returncode == EXIT_OK, rolled.stdout + rolled.stderr
        wait_for(
            lambda: any(header(f) == (3, "deployed", 3) and f["trials"][0]["all_ready"] for f in frames),
            60,
            "a frame of revision 3 (the rollback), every worker ready and recorded as the last all-ready revision",
        )
        alive = watch.poll() is None
        watch.send_signal(signal.SIGINT)  # Ctrl-C
        code = watch.wait(60)
    finally:
        watch.kill()
        reader.join(30)
    errors = watch.stderr.read()
    assert alive, f"the watch ended on its own: {errors}"
    assert code == EXIT_INTERRUPTED, f"exit {code}: {errors}"

    seen = list(dict.fromkeys(header(f) for f in frames))  # each header once, in the order the watch showed them
    failed = next(h for h in seen if h[:2] == (2, "failed"))
    assert failed[2] == 1, seen  # the failed upgrade left revision 1 as the last all-ready one
    rolled_back = [h for h in seen if h[:2] == (3, "deployed")]
    assert seen.index(failed) < seen.index(rolled_back[0]), seen
    assert seen[0] == (1, "deployed", 1) and seen[-1] == (3, "deployed", 3), seen
    failed_frame = next(f for f in frames if header(f)[:2] == (2, "failed"))
    assert failed_frame["trials"][0]["helm_error"], failed_frame  # helm's error, read with that revision
    assert frames[-1]["trials"][0]["helm_error"] == "", frames[-1]


def test_logs_of_a_role_is_its_rank_0_and_since_leaves_out_older_lines(kubeconfig, namespace, make_scheduler):
    make_scheduler(lease_grace_seconds=0).create_workers(
        job("ticker", 2, [spec(cmd=TICKER)])
    )  # no guard, never ready: not waited for

    def lines(result: subprocess.CompletedProcess[str]) -> list[tuple[str, float]]:
        assert result.returncode == EXIT_OK, result.stderr
        return [(pod, float(at)) for pod, at in (line.split() for line in result.stdout.splitlines())]

    def logged_for(seconds: float) -> list[tuple[str, float]]:
        found = lines(cli(kubeconfig, namespace, "logs", "ticker/0"))
        return found if found and found[-1][1] - found[0][1] >= seconds else []

    wait_for(lambda: logged_for(20), 180, "ticker/0 logging for 20 s", interval=2)
    wait_for(lambda: lines(cli(kubeconfig, namespace, "logs", "ticker/1")), 120, "ticker/1 logging", interval=2)

    (trial,) = json.loads(cli(kubeconfig, namespace, "status", "-o", "json").stdout)["trials"]
    pods = {w["id"]: w["pod"] for w in trial["workers"]}
    assert pods["ticker/0"] and pods["ticker/1"] and pods["ticker/0"] != pods["ticker/1"], pods
    whole = cli(kubeconfig, namespace, "logs", "ticker")
    assert "ticker has 2 workers; showing ticker/0" in whole.stderr, whole.stderr
    assert {pod for pod, _ in lines(whole)} == {pods["ticker/0"]}

    asked = time.time()
    recent = lines(cli(kubeconfig, namespace, "logs", "ticker", "--since", "5s"))
    everything = lines(cli(kubeconfig, namespace, "logs", "ticker"))
    assert recent, "logs --since 5s printed nothing from a worker that logs every second"
    assert {pod for pod, _ in recent} == {pods["ticker/0"]}
    # Written at most 5 s before the question (a second's slack for the kubelet's timestamp after the write).
    assert min(at for _, at in recent) >= asked - 6, (asked, recent)
    older = [line for line in everything if line[1] < asked - 6]
    assert len(older) >= 10 and not set(older) & set(recent), (len(older), recent)
    assert set(recent) <= set(everything)
