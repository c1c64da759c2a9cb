"""NetworkPolicy enforcement on the real node: kube-network-policies' packet evaluator, fed by NFQUEUE rules of ours.

kube-network-policies decides, for the first packet of each connection, whether the cluster's NetworkPolicies admit
it, and answers the kernel through NFQUEUE. Upstream installs its queue rules with nftables' `queue` expression,
which this kernel lacks (CONFIG_NFT_QUEUE unset); its controller logs that failure and serves the queue anyway. So
the queue rules here are iptables' NFQUEUE target (built in), on the hooks upstream uses: after routing and DNAT
(mangle POSTROUTING: pod to pod across the bridge, host to pod) and on input (pod to host). As upstream, processes of
the host running as root (the kubelet's probes, CoreDNS, the tests' own controller) are not filtered; tests that
need the host's traffic filtered connect as another user.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from localkube.processes import Component
from localkube.settings import ClusterError
from realnode.config import NETWORK, NODE_NAME

QUEUE = 100
TABLE = "mangle"
CHAIN = "AREAL-NETPOL"  # the queue rules, for packets from and to the pod network
HOST_CHAIN = "AREAL-NETPOL-HOST"  # on POSTROUTING: root's own sockets skip the queue
UPSTREAM_NFT_TABLE = ("inet", "kube-network-policies")
QUEUES = Path("/proc/net/netfilter/nfnetlink_queue")


def enforcer(binary: str, kubeconfig: Path, metrics_port: int, state: Path) -> Component:
    """kube-network-policies for NODE_NAME: drops what no policy admits (fail-open only when its queue overflows),
    and evaluates new connections only (strict mode would also cut established ones on every policy change)."""
    return Component(
        "network-policies",
        [
            binary,
            f"--kubeconfig={kubeconfig}",
            f"--hostname-override={NODE_NAME}",
            f"--metrics-bind-address=127.0.0.1:{metrics_port}",
            f"--nfqueue-id={QUEUE}",
            "--disable-nri",  # containerd 1.6 has no NRI: pod addresses come from the apiserver
            "--netfilter-bug-1766-fix=false",  # not needed on kernels 6.12+
            "--strict-mode=false",
            "--fail-open=false",
        ],
        state,
        health_url=f"http://127.0.0.1:{metrics_port}/metrics",
    )


def queue_rules() -> list[list[str]]:
    """iptables arguments (after `-t TABLE`), in order: the chains, their rules, then the jumps into them."""
    queue = ["-j", "NFQUEUE", "--queue-num", str(QUEUE)]
    return [
        ["-N", CHAIN],
        ["-A", CHAIN, "-m", "conntrack", "!", "--ctstate", "NEW", "-j", "RETURN"],
        ["-A", CHAIN, "-s", NETWORK, *queue],
        ["-A", CHAIN, "-d", NETWORK, *queue],
        ["-N", HOST_CHAIN],
        ["-A", HOST_CHAIN, "-m", "owner", "--uid-owner", "0", "-j", "RETURN"],
        ["-A", HOST_CHAIN, "-j", CHAIN],
        ["-I", "INPUT", "1", "-j", CHAIN],
        ["-I", "POSTROUTING", "1", "-j", HOST_CHAIN],
    ]


def install_rules() -> None:
    """Adds the queue rules (host.restore removes them with the node's other new chains)."""
    for rule in queue_rules():
        result = subprocess.run(["iptables", "-t", TABLE, *rule], capture_output=True, text=True)
        if result.returncode != 0:
            raise ClusterError(f"iptables -t {TABLE} {' '.join(rule)} failed: {result.stderr.strip()}")


def remove_leftover_rules() -> bool:
    """Removes the queue rules a killed run left (host.restore removes those of a stopped one); True if any."""
    found = subprocess.run(["iptables", "-t", TABLE, "-S", CHAIN], capture_output=True).returncode == 0
    for hook, chain in (("INPUT", CHAIN), ("POSTROUTING", HOST_CHAIN)):
        while subprocess.run(["iptables", "-t", TABLE, "-D", hook, "-j", chain], capture_output=True).returncode == 0:
            found = True
    for chain in (HOST_CHAIN, CHAIN):
        subprocess.run(["iptables", "-t", TABLE, "-F", chain], capture_output=True)
        subprocess.run(["iptables", "-t", TABLE, "-X", chain], capture_output=True)
    return found


def remove_upstream_table() -> None:
    """The nftables table upstream's controller tries to create (none when the kernel refused its rules)."""
    nft = shutil.which("nft")
    if nft:
        subprocess.run([nft, "delete", "table", *UPSTREAM_NFT_TABLE], capture_output=True)


def queue_bound(queue: int = QUEUE) -> bool:
    """A process listens on the queue (the kernel's table of bound queues lists it)."""
    try:
        lines = QUEUES.read_text().splitlines()
    except FileNotFoundError:
        return False
    return any(line.split() and line.split()[0] == str(queue) for line in lines)


def wait_bound(component: Component, deadline: float) -> None:
    """Until the enforcer listens on its queue: before that, queued packets would be dropped."""
    while time.monotonic() < deadline:
        if component.pid() is None:
            raise ClusterError(f"{component.name} exited during start-up; last log lines:\n{component.log_tail()}")
        if queue_bound():
            return
        time.sleep(0.2)
    raise ClusterError(
        f"{component.name} did not bind NFQUEUE {QUEUE} in time (is CONFIG_NETFILTER_NETLINK_QUEUE set?); last log "
        f"lines:\n{component.log_tail()}"
    )
