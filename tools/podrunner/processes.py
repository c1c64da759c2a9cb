"""Processes as /proc sees them: process trees, killing them whole, and the ledger of what a runner started.

Standard library only, so that `localcluster.py down` can clear what a crashed podrunner left without the
kubernetes client.
"""

from __future__ import annotations

import os
import signal
import socket
import struct
import time
from pathlib import Path

TCP_LISTEN = "0A"


def proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...), None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot: with the pid, it names one process for good."""
    fields = proc_stat(pid)
    return fields[19] if fields else None


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, also those in sessions of their own (forked workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = proc_stat(int(stat.parent.name))
        if fields:
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, pending = [], [pid]
    while pending:
        kids = children.get(pending.pop(), [])
        found.extend(kids)
        pending.extend(kids)
    return found


def send_signal(pid: int, signum: signal.Signals, group: bool = True) -> None:
    """To the process group of `pid` (or the process alone); one already gone is no error."""
    try:
        (os.killpg if group else os.kill)(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int) -> None:
    """SIGKILL to a process, its process group and every descendant with theirs."""
    for member in [pid, *descendants(pid)]:
        send_signal(member, signal.SIGKILL)
        send_signal(member, signal.SIGKILL, group=False)


def listening_ports(ip: str, table: Path = Path("/proc/net/tcp")) -> list[int]:
    """The TCP ports some process of this network namespace listens on at `ip` (IPv4)."""
    local = f"{struct.unpack('=I', socket.inet_aton(ip))[0]:08X}"  # /proc/net/tcp prints the raw word
    ports = []
    for line in table.read_text().splitlines()[1:]:
        fields = line.split()
        address, port = fields[1].split(":")
        if address == local and fields[3] == TCP_LISTEN:
            ports.append(int(port, 16))
    return sorted(ports)


class ProcessLedger:
    """The processes a runner started, on disk: one file per process, named by its pid and holding its start time,
    so that whoever stops the runner (or a runner started after a crash) can stop what it left behind."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def record(self, pid: int) -> None:
        (self.directory / str(pid)).write_text(start_time(pid) or "")

    def forget(self, pid: int) -> None:
        (self.directory / str(pid)).unlink(missing_ok=True)

    def kill_leftovers(self, timeout: float = 10.0) -> list[int]:
        """SIGKILLs every recorded process still alive (and its descendants); returns their pids."""
        killed = []
        for entry in sorted(self.directory.iterdir()):
            pid = int(entry.name)
            if entry.read_text() and start_time(pid) == entry.read_text():  # not a reused pid
                kill_tree(pid)
                killed.append(pid)
            entry.unlink(missing_ok=True)
        deadline = time.monotonic() + timeout
        while any(start_time(pid) for pid in killed) and time.monotonic() < deadline:
            time.sleep(0.05)
        return killed


class StartFailure:
    """Stands in for a process whose command could not be started (the kubelet's StartError)."""

    pid = None
    returncode = 128
    stdout = None
    reason = "StartError"

    def __init__(self, message: str) -> None:
        self.message = message

    def poll(self) -> int:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode
