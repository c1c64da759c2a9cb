"""The address AReaL's controllers advertise to the workers (KubernetesSchedulerConfig.trainer_address).

RolloutController binds its callback server to AReaL's `gethostip()` and tells every worker to call it there (a
finished rollout, a train engine's weight update, pausing generation); its proxy gateway does the same. AReaL 1.0.4
has no setting for that address: `gethostip()` returns the first non-loopback address the host name resolves to,
else the source address of the route to 8.8.8.8. Inside a pod that is the pod IP, which the workers reach. On a
machine outside the cluster it is often one the pods cannot reach (a laptop's Wi-Fi, a VM's private NIC), and
rollouts time out without a word. `advertise(address)` makes AReaL's `gethostip()` return the address given, for
this trainer process only.
"""

from __future__ import annotations

import errno
import importlib
import ipaddress
import socket
import sys
from typing import Any

from .config import ConfigError

NETWORK_MODULE = "areal.utils.network"


def check_local_address(address: str) -> None:
    """Refuses an address no interface of this machine holds: a server bound there cannot start."""
    parsed = ipaddress.ip_address(address)  # KubernetesSchedulerConfig checked the form
    family = socket.AF_INET6 if parsed.version == 6 else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((address, 0))
        except OSError as error:
            if error.errno != errno.EADDRNOTAVAIL:
                raise
            raise ConfigError(
                f"trainer_address {address} is not an address of this machine: give the address of one of its "
                "interfaces that the worker pods can reach (`ip -brief address` lists them), or leave it unset "
                "when the trainer runs in a pod"
            ) from None


def advertise(address: str) -> list[str]:
    """Makes AReaL's `gethostip()` return `address` in this process: in its network module and in every module
    that already imported the function by name. Modules imported later take the replacement from the network
    module. Returns the names of the modules changed ([] when AReaL is not installed: nothing advertises)."""
    check_local_address(address)
    network = sys.modules.get(NETWORK_MODULE)
    if network is None:
        try:
            network = importlib.import_module(NETWORK_MODULE)
        except ImportError:
            return []
    original = getattr(network, "gethostip", None)
    if original is None:
        return []
    original = getattr(original, "__wrapped__", original)

    def gethostip(*args: Any, **kwargs: Any) -> str:
        return address

    gethostip.__wrapped__ = original  # type: ignore[attr-defined]
    changed = []
    for name, module in list(sys.modules.items()):
        bound = getattr(module, "__dict__", {}).get("gethostip")  # getattr would run lazy modules' __getattr__
        if bound is original or getattr(bound, "__wrapped__", None) is original:
            module.__dict__["gethostip"] = gethostip
            changed.append(name)
    return sorted(changed)
