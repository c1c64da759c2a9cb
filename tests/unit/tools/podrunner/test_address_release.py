"""podrunner waits to start a pod until no process listens on its IP any more (tools/podrunner/supervisor.py):
KWOK hands a deleted pod's IP to the next pod while the old pod's processes may still serve on it."""

from __future__ import annotations

import socket
import sys
import threading
from pathlib import Path

import pytest

from podrunner import supervisor
from podrunner.pods import ManagedPod
from podrunner.processes import kill_tree, listening_ports
from podrunner.supervisor import PodSupervisor

pytestmark = pytest.mark.unit

POD_IP = "127.20.250.7"


def listener(ip: str) -> socket.socket:
    server = socket.socket()
    server.bind((ip, 0))
    server.listen()
    return server


def pod(tmp_path: Path, kind: str = "worker", **fields) -> ManagedPod:
    return ManagedPod(
        kind=kind,
        uid="uid-1",
        name="ns/worker-0",
        container="worker",
        ip=POD_IP,
        argv=[sys.executable, "-c", "import time; time.sleep(60)"],
        env={},
        probe_url=None,
        probe_period=10.0,
        grace=1.0,
        log=tmp_path / "worker-0.log",
        **fields,
    )


class HookResults:
    """Stands in for the StatusWriter: what a hook pod's end would write into its status."""

    def __init__(self) -> None:
        self.finished: list[tuple[str, int]] = []

    def hook_finished(self, pod: ManagedPod, code: int) -> None:
        self.finished.append((pod.name, code))


@pytest.fixture
def runner():
    made = PodSupervisor(status=HookResults(), stopping=threading.Event(), hosts={}, pythonpath=(), ledger=None)
    started: list[ManagedPod] = []
    yield made, started
    for managed in started:
        if managed.process is not None:
            kill_tree(managed.process.pid)


def test_listening_ports_are_those_of_the_address_only():
    with listener(POD_IP) as held, listener("127.20.250.8"):
        assert listening_ports(POD_IP) == [held.getsockname()[1]]
    assert listening_ports(POD_IP) == []


def test_a_pod_starts_only_once_the_old_pods_server_is_gone(runner, tmp_path):
    made, started = runner
    managed = pod(tmp_path)
    started.append(managed)
    with listener(POD_IP):
        made.launch(managed)
        assert managed.process is None
        assert managed.restart_at > 0  # the probe loop tries again then
        made.launch(managed)
        assert managed.process is None
    made.launch(managed)
    assert managed.process is not None and managed.process.poll() is None


def test_an_address_never_released_delays_the_start_by_a_bounded_wait(runner, tmp_path, monkeypatch):
    made, started = runner
    monkeypatch.setattr(supervisor, "ADDRESS_RELEASE_WAIT", 0.0)
    managed = pod(tmp_path)
    started.append(managed)
    with listener(POD_IP):
        made.launch(managed)
        assert managed.process is not None


def test_host_network_pods_share_the_nodes_address_and_do_not_wait(runner, tmp_path):
    made, started = runner
    managed = pod(tmp_path, host_network=True)
    started.append(managed)
    with listener(POD_IP):
        made.launch(managed)
        assert managed.process is not None


def test_test_hooks_start_at_once(runner, tmp_path):
    """The probe loop retries workers only, so a hook (a helm test's pod) must never be held back."""
    made, started = runner
    managed = pod(tmp_path, kind="hook")
    started.append(managed)
    with listener(POD_IP):
        made.launch(managed)
        assert managed.process is not None
