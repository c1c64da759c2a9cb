"""Workers never outlive their trainer by more than a bounded time: a trainer killed with SIGKILL stops renewing
its release's Lease and `areal-workers reap` uninstalls the release once it has seen the Lease unchanged for longer
than the grace (two looks); a trainer that restarts within the grace period takes the Lease over and keeps its
workers. A live trainer is never reaped, whatever its clock says; a second live controller of the trial is refused;
a trainer whose Lease was reaped gets an error, not fresh workers."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from areal_workers import KubernetesSchedulerConfig, naming
from areal_workers.cli.main import main
from repo_paths import TOOLS_BIN

pytestmark = pytest.mark.late
GRACE = 3
TRAINER = textwrap.dedent("""
    import json, sys, time
    from areal_workers import Job, KubernetesScheduler, KubernetesSchedulerConfig, SchedulingSpec
    settings = json.loads(sys.argv[1])
    settings["values_files"] = tuple(settings["values_files"])
    behind = settings.pop("clock_behind_seconds", 0)
    if behind:  # the trainer's clock (its Lease's renewTime) runs this far behind the reaper's
        from datetime import datetime, timedelta
        import areal_workers.runtime.lease as lease
        class Behind(datetime):
            @classmethod
            def now(cls, tz=None):
                return datetime.now(tz) - timedelta(seconds=behind)
        lease.datetime = Behind
    scheduler = KubernetesScheduler(config=KubernetesSchedulerConfig(**settings), experiment_name="exp",
                                    trial_name="trainer")
    scheduler.create_workers(Job(role="actor", replicas=2, tasks=[SchedulingSpec(
        cpu=1, mem=1, gpu=0, cmd="python -m areal.infra.rpc.rpc_server")]))
    workers = scheduler.get_workers("actor")
    print(json.dumps([[w.ip, w.worker_ports[0]] for w in workers]), flush=True)
    time.sleep(3600)
""")


def start_trainer(
    config: KubernetesSchedulerConfig, tmp_path: Path, clock_behind_seconds: int = 0
) -> tuple[subprocess.Popen, list]:
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    settings = {
        **dataclasses.asdict(config),
        "lease_grace_seconds": GRACE,
        "clock_behind_seconds": clock_behind_seconds,
    }
    trainer = subprocess.Popen([sys.executable, str(script), json.dumps(settings)], stdout=subprocess.PIPE, text=True)
    line = trainer.stdout.readline()
    assert line, f"the trainer ended before its workers were ready (exit {trainer.wait(60)})"
    return trainer, json.loads(line)


def answers(address: list) -> bool:
    try:
        with urllib.request.urlopen(f"http://{address[0]}:{address[1]}/health", timeout=2):
            return True
    except (urllib.error.URLError, OSError):
        return False


def reap(capsys, kubeconfig: Path, namespace: str) -> dict:
    assert main(["--kubeconfig", str(kubeconfig), "-n", namespace, "reap", "-o", "json", "--timeout", "120"]) == 0
    return {lease["release"]: lease["action"] for lease in json.loads(capsys.readouterr().out)["leases"]}


@pytest.fixture
def trainer_config(make_scheduler, monkeypatch):
    """The settings of make_scheduler's schedulers (its podrunner runs the namespace's pods), for trainers in
    subprocesses; helm on PATH for the command."""
    monkeypatch.setenv("PATH", f"{TOOLS_BIN}{os.pathsep}{os.environ['PATH']}")
    probe = make_scheduler("settings", lease_grace_seconds=0)
    return probe.config


def test_a_killed_trainers_release_is_reaped_after_the_grace_period(
    trainer_config, kubeconfig, namespace, core, tmp_path, capsys
):
    trainer, addresses = start_trainer(trainer_config, tmp_path)
    release = naming.release_name("exp", "trainer")
    assert all(answers(address) for address in addresses)
    assert core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={release}").items
    assert reap(capsys, kubeconfig, namespace) == {release: "alive"}
    assert main(["--kubeconfig", str(kubeconfig), "-n", namespace, "status", "-o", "json"]) == 0
    trainer_text = json.loads(capsys.readouterr().out)["trials"][0]["trainer"]
    assert " renewing (lease renewed since " in trainer_text or " quiet: lease unchanged for " in trainer_text

    trainer.send_signal(signal.SIGKILL)
    trainer.wait(30)
    killed = time.monotonic()
    assert reap(capsys, kubeconfig, namespace) == {release: "alive"}  # the first look at the unchanged Lease
    time.sleep(GRACE + 1)
    assert main(["--kubeconfig", str(kubeconfig), "-n", namespace, "status", "-o", "json"]) == 0
    [trial] = json.loads(capsys.readouterr().out)["trials"]
    assert "silent: lease unchanged for " in trial["trainer"] and "areal-workers reap" in trial["trainer"]
    assert reap(capsys, kubeconfig, namespace) == {release: "reaped"}
    gone = time.monotonic() - killed
    print(f"trainer killed -> last worker gone: {gone:.1f}s (grace {GRACE}s, reaped once it expired)", file=sys.stderr)
    assert core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={release}").items == []
    assert not any(answers(address) for address in addresses)  # no worker process remains
    assert reap(capsys, kubeconfig, namespace) == {}  # the lease went with the release


def test_a_trainer_restarted_within_the_grace_period_keeps_its_workers(
    trainer_config, kubeconfig, namespace, tmp_path, capsys, make_scheduler
):
    trainer, addresses = start_trainer(trainer_config, tmp_path)
    trainer.send_signal(signal.SIGKILL)
    trainer.wait(30)
    successor = make_scheduler("trainer", lease_grace_seconds=GRACE)  # adopts the release and takes the lease
    time.sleep(GRACE + 1)
    assert set(reap(capsys, kubeconfig, namespace).values()) == {"alive"}
    workers = successor.get_workers("actor", timeout=60)
    assert [[w.ip, w.worker_ports[0]] for w in workers] == addresses and all(answers(a) for a in addresses)


def test_a_live_trainer_whose_clock_is_an_hour_behind_is_never_reaped(
    trainer_config, kubeconfig, namespace, tmp_path, capsys
):
    trainer, addresses = start_trainer(trainer_config, tmp_path, clock_behind_seconds=3600)
    release = naming.release_name("exp", "trainer")
    try:
        for _ in range(3):  # looks further apart than the grace, while the trainer renews
            assert reap(capsys, kubeconfig, namespace) == {release: "alive"}
            time.sleep(GRACE + 1)
        assert all(answers(address) for address in addresses)
    finally:
        trainer.kill()
        trainer.wait(30)


def test_a_second_live_controller_is_refused_unless_it_takes_over(
    trainer_config, kubeconfig, namespace, kube_client, tmp_path, make_scheduler
):
    from kubernetes import client

    from areal_workers.errors import LeaseHeldError
    from areal_workers.runtime.lease import lease_name

    trainer, addresses = start_trainer(trainer_config, tmp_path)
    release = naming.release_name("exp", "trainer")
    coordination = client.CoordinationV1Api(kube_client)
    try:
        holder = coordination.read_namespaced_lease(lease_name(release), namespace).spec.holder_identity
        with pytest.raises(LeaseHeldError, match="another controller of this trial is alive"):
            make_scheduler("trainer", lease_grace_seconds=GRACE)
        assert coordination.read_namespaced_lease(lease_name(release), namespace).spec.holder_identity == holder
        second = make_scheduler("trainer", lease_grace_seconds=GRACE, lease_takeover=True)
        assert coordination.read_namespaced_lease(lease_name(release), namespace).spec.holder_identity == (
            second.lease.holder
        )
        time.sleep(GRACE)  # the first trainer's renewals find the Lease taken and stop
        assert coordination.read_namespaced_lease(lease_name(release), namespace).spec.holder_identity == (
            second.lease.holder
        )
        assert [[w.ip, w.worker_ports[0]] for w in second.get_workers("actor", timeout=60)] == addresses
    finally:
        trainer.kill()
        trainer.wait(30)


def test_a_trainer_whose_lease_was_reaped_gets_an_error_not_fresh_workers(
    make_scheduler, kubeconfig, namespace, core, capsys
):
    from areal_workers import Job, SchedulingSpec
    from areal_workers.errors import LeaseLostError

    scheduler = make_scheduler("stalled", lease_grace_seconds=GRACE)
    task = SchedulingSpec(cpu=1, mem=1, gpu=0, cmd="python -m areal.infra.rpc.rpc_server")
    scheduler.create_workers(Job(role="actor", replicas=1, tasks=[task]))
    scheduler.get_workers("actor")
    scheduler.lease.stop()  # the trainer stalls: no renewals for longer than the grace
    try:
        assert reap(capsys, kubeconfig, namespace) == {scheduler.release: "alive"}
        time.sleep(GRACE + 1)
        assert reap(capsys, kubeconfig, namespace) == {scheduler.release: "reaped"}
        # It wakes up and writes before its renewal thread's next turn: the write confirms the Lease first.
        with pytest.raises(LeaseLostError, match="was deleted"):
            scheduler.create_workers(Job(role="critic", replicas=1, tasks=[task]))
        selector = naming.release_selector(scheduler.release)
        assert core.list_namespaced_pod(namespace, label_selector=selector).items == []
        assert reap(capsys, kubeconfig, namespace) == {}  # and no Lease was re-created
    finally:
        scheduler.close()  # nothing left to delete: the reaper removed it
