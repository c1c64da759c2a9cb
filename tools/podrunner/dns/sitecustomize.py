"""Loaded by hook processes that podrunner starts: resolves the cluster DNS names of StatefulSet pods
(given in PODRUNNER_HOSTS as JSON name -> IP) the way cluster DNS would, and everything else as usual."""

import json
import os
import socket

_hosts = json.loads(os.environ.get("PODRUNNER_HOSTS", "{}"))
_getaddrinfo = socket.getaddrinfo


def _cluster_getaddrinfo(host, *args, **kwargs):
    name = host.decode() if isinstance(host, bytes) else host
    return _getaddrinfo(_hosts.get(name.rstrip(".") if name else name, host), *args, **kwargs)


socket.getaddrinfo = _cluster_getaddrinfo
