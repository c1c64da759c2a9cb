"""What the real node changes on the host, and putting it back: sysctls, the bridge, iptables chains, cgroups,
network namespace files and the processes of its mount namespace."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

from localkube.settings import ClusterError
from realnode.config import BRIDGE, CGROUP_ROOT, KUBEPODS, NETWORK, NODE_IP, SYSCTLS, NodePaths

NETNS_DIR = Path("/run/netns")
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle")


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(argv, capture_output=True, text=True)
    if check and result.returncode != 0:
        raise ClusterError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
    return result


def preflight(paths: NodePaths) -> None:
    """Fails before anything changes when the node cannot start here, saying what to do."""
    if os.geteuid() != 0:
        raise ClusterError("the real node needs root (containerd, runc, the kubelet's cgroups and mounts)")
    if not (CGROUP_ROOT / "memory").is_dir():
        raise ClusterError(f"no cgroup v1 memory hierarchy under {CGROUP_ROOT}: the real node is set up for cgroup v1")
    live = live_node()
    if live:
        raise ClusterError(
            f"another real node runs on this machine ({live}); there can be one per machine (the "
            f"bridge {BRIDGE} and {NETWORK} are fixed). Stop it with `tools/localcluster.py down` in "
            f"its checkout"
        )


def live_node() -> str:
    """What shows that a real node runs here ("" when nothing does): processes in the kubelet's cgroups, or
    sockets bound to the node's IP (its kubelet and CoreDNS). Both are visible across checkouts and PID namespaces
    that share this machine's network and cgroups."""
    procs = CGROUP_ROOT / "memory" / KUBEPODS
    if procs.is_dir():
        pids = [line for f in procs.rglob("cgroup.procs") for line in f.read_text().split()]
        if pids:
            return f"{len(pids)} process(es) in {procs}"
    bound = sockets_on(NODE_IP)
    return f"a socket on {bound[0]}" if bound else ""


TCP_LISTEN = "0A"  # /proc/net/tcp's st column


def sockets_on(ip: str) -> list[str]:
    """ "<proto> <ip>:<port>" of the listening TCP and the UDP sockets of this network namespace bound to `ip`
    (IPv4). Not the other TCP states: a node stopped a moment ago leaves connections in TIME_WAIT for a minute."""
    address = "".join(f"{int(octet):02X}" for octet in reversed(ip.split(".")))
    found = []
    for table in ("tcp", "udp"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            local, state = fields[1], fields[3]
            if table == "tcp" and state != TCP_LISTEN:
                continue
            if local.startswith(address + ":"):
                found.append(f"{table} {ip}:{int(local.split(':')[1], 16)}")
    return found


def reclaim_leftovers() -> list[str]:
    """Removes what a real node that was killed (not stopped with `down`) left behind: its bridge and its empty
    cgroups. Only called once live_node() found nothing; returns what was removed."""
    removed = []
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "del", BRIDGE)
        removed.append(f"interface {BRIDGE}")
    cgroups = [str(CGROUP_ROOT / c / KUBEPODS) for c in _controllers() if (CGROUP_ROOT / c / KUBEPODS).exists()]
    if cgroups:
        _remove_cgroups()
        removed.append(f"{len(cgroups)} empty {KUBEPODS} cgroup(s)")
    return removed


def _controllers() -> list[str]:
    return sorted(p.name for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink())


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _chains() -> dict[str, list[str]]:
    """ "<command> <table>" -> chain names, for the iptables commands this machine has."""
    chains: dict[str, list[str]] = {}
    for command in IPTABLES:
        for table in TABLES:
            result = subprocess.run([command + "-save", "-t", table], capture_output=True, text=True)
            if result.returncode == 0:
                chains[f"{command} {table}"] = [
                    line[1:].split()[0] for line in result.stdout.splitlines() if line.startswith(":")
                ]
    return chains


def save(paths: NodePaths) -> None:
    before = {
        "sysctls": {name: _sysctl_path(name).read_text().strip() for name in SYSCTLS if _sysctl_path(name).exists()},
        "chains": _chains(),
        "netns": sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.is_dir() else [],
    }
    paths.saved_host.write_text(json.dumps(before, indent=2))


def create_bridge() -> None:
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    _run("ip", "addr", "add", f"{NODE_IP}/{NETWORK.split('/')[1]}", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")


def mount_namespace(pid: int | None) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt") if pid else None
    except OSError:
        return None


def _processes() -> dict[int, tuple[int, str | None]]:
    """pid -> (parent pid, mount namespace) of every process."""
    table = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            table[int(entry.name)] = (parent, os.readlink(entry / "ns" / "mnt"))
        except (OSError, IndexError, ValueError):
            continue
    return table


def kill_namespace_processes(namespace: str, keep: int | None) -> int:
    """SIGKILLs every process of the mount namespace (containerd, its shims) and their descendants (the containers,
    in mount namespaces of their own) but `keep`; returns how many died. Never the host's namespace (this process's
    or init's): a record left by a holder that died may name it, and every process of the machine would die."""
    if namespace in {mount_namespace(os.getpid()), mount_namespace(1)}:
        return 0
    table = _processes()
    doomed = {pid for pid, (_, ns) in table.items() if ns == namespace and pid != keep}
    grew = True
    while grew:
        children = {pid for pid, (parent, _) in table.items() if parent in doomed and pid not in doomed}
        grew = bool(children)
        doomed |= children
    doomed.discard(os.getpid())
    for pid in doomed:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() and _alive(pid) for pid in doomed):
        time.sleep(0.1)
    return len(doomed)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    if state == "Z":
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        return False
    return True


def _remove_cgroups() -> None:
    for controller in _controllers():
        top = CGROUP_ROOT / controller / KUBEPODS
        if not top.is_dir():
            continue
        deadline = time.monotonic() + 30
        while top.exists():
            for directory in sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
                try:
                    directory.rmdir()
                except OSError:
                    pass
            try:
                top.rmdir()
            except OSError:
                if time.monotonic() > deadline:
                    raise ClusterError(f"cannot remove {top}: processes still in it ({top / 'cgroup.procs'})") from None
                time.sleep(0.2)


def _remove_chains(before: dict[str, list[str]]) -> None:
    for key, chains in _chains().items():
        command, table = key.split()
        new = [chain for chain in chains if chain not in before.get(key, [])]
        if not new:
            continue
        rules = _run(command + "-save", "-t", table).stdout.splitlines()
        for rule in rules:  # jumps into the new chains from chains that stay
            parts = rule.split()
            if rule.startswith("-A ") and "-j" in parts and parts[parts.index("-j") + 1] in new and parts[1] not in new:
                _run(command, "-t", table, "-D", *parts[1:], check=False)
        for chain in new:
            _run(command, "-t", table, "-F", chain, check=False)
        for chain in new:
            _run(command, "-t", table, "-X", chain, check=False)


def restore(paths: NodePaths) -> None:
    """After every process of the node is gone: cgroups, network namespace files, bridge, iptables, sysctls."""
    try:
        before = json.loads(paths.saved_host.read_text())
    except FileNotFoundError:
        before = {"sysctls": {}, "chains": {}, "netns": []}
    _remove_cgroups()
    if NETNS_DIR.is_dir():
        for entry in NETNS_DIR.iterdir():
            if entry.name.startswith("cni-") and entry.name not in before["netns"]:
                subprocess.run(["umount", str(entry)], capture_output=True)
                entry.unlink(missing_ok=True)
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        _run("ip", "link", "del", BRIDGE)
    _remove_chains(before["chains"])
    for name, value in before["sysctls"].items():
        if _sysctl_path(name).read_text().strip() != value:
            _sysctl_path(name).write_text(value)


def leftovers(paths: NodePaths) -> list[str]:
    """What of the node is still on the host (empty after a clean `down`)."""
    found = []
    mounts = Path("/proc/self/mountinfo").read_text()
    if str(paths.root) in mounts or str(paths.containerd_state) in mounts:
        found.append(f"mounts under {paths.root}")
    if Path(f"/sys/class/net/{BRIDGE}").exists():
        found.append(f"interface {BRIDGE}")
    found += [str(CGROUP_ROOT / c / KUBEPODS) for c in _controllers() if (CGROUP_ROOT / c / KUBEPODS).exists()]
    return found
