"""Addresses the guard binds and advertises, and the ports /alloc_ports hands out."""

from __future__ import annotations

import random
import socket
import threading

from .protocol import internal_error

PORT_RANGE = (10000, 32767)  # AReaL's find_free_ports range
PORT_ATTEMPTS_PER_PORT = 10
WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


def format_hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def address_family_for(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


def advertised_host(bind_host: str) -> str:
    """The address peers should use: the bind address, or this host's IP for a wildcard bind."""
    if bind_host not in WILDCARD_HOSTS:
        return bind_host
    try:
        # In a Kubernetes pod the hostname resolves to the pod IP (kubelet writes /etc/hosts).
        return socket.gethostbyname(socket.gethostname())
    except OSError:
        return "127.0.0.1"


class PortAllocator:
    """Hands out ports free on the guard's host, each at most once per guard lifetime, as AReaL does.

    Ports come from PORT_RANGE, below Linux's ephemeral range, so that an outgoing connection cannot
    take a port between its allocation and its use.  They are never returned to the pool: the guard
    cannot know when the process it allocated them for has stopped using them.
    """

    def __init__(self, bind_host: str) -> None:
        self._bind_host = "" if bind_host in WILDCARD_HOSTS else bind_host
        self._family = address_family_for(bind_host)
        self._held_ports: set[int] = set()
        self._lock = threading.Lock()

    def hold(self, port: int) -> None:
        with self._lock:
            self._held_ports.add(port)

    def allocate(self, count: int) -> list[int]:
        low, high = PORT_RANGE
        with self._lock:
            available = high - low + 1 - len(self._held_ports)
            if count > available:
                raise internal_error(
                    f"Cannot find {count} ports in range {PORT_RANGE}. Only {available} ports available."
                )
            max_attempts = count * PORT_ATTEMPTS_PER_PORT
            tried: set[int] = set()
            found: list[int] = []
            for _ in range(max_attempts):
                if len(found) == count:
                    break
                port = random.randint(low, high)
                if port in tried or port in self._held_ports:
                    continue
                tried.add(port)
                if self._is_free(port):
                    found.append(port)
            if len(found) < count:
                raise internal_error(
                    f"Could only find {len(found)} free ports out of {count} requested after {max_attempts} attempts"
                )
            self._held_ports.update(found)
            return sorted(found)

    def _is_free(self, port: int) -> bool:
        for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):  # AReaL checks TCP and UDP
            try:
                with socket.socket(self._family, kind) as probe:
                    probe.bind((self._bind_host, port))
            except OSError:
                return False
        return True
