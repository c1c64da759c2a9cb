"""The real node's `down` kills the processes of the node's mount namespace, never of the host's: a record left by a
holder that died named the host's own namespace once, and `down` then killed every process of the machine."""

from __future__ import annotations

import os

from realnode import host


def test_the_hosts_own_namespace_is_never_killed_and_the_nodes_is(monkeypatch):
    own = host.mount_namespace(os.getpid())
    table = {4101: (1, own), 4102: (1, "mnt:[1234]"), 4103: (4102, "mnt:[5678]")}
    killed: list[int] = []
    monkeypatch.setattr(host, "_processes", lambda: table)
    monkeypatch.setattr(host.os, "kill", lambda pid, sig: killed.append(pid))
    monkeypatch.setattr(host, "_alive", lambda pid: False)

    assert host.kill_namespace_processes(own, keep=None) == 0 and killed == []
    assert host.kill_namespace_processes(host.mount_namespace(1), keep=None) == 0 and killed == []
    assert host.kill_namespace_processes("mnt:[1234]", keep=None) == 2  # the node's process and its container child
    assert sorted(killed) == [4102, 4103]
