"""Requests counted on the client side, in this process: the adapter's Kubernetes client (by verb and resource, as
the apiserver names them) and the workers' guard HTTP API (requests and aiohttp, which GuardClient uses).

The counters patch the transport classes while they are active, so they see every request of the process; the
benchmarks use them only while no other Kubernetes or HTTP client of theirs runs.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlparse

import aiohttp
import requests
from kubernetes.client import rest


class RequestCounter:
    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()
        self._lock = threading.Lock()

    def add(self, key: tuple[str, str]) -> None:
        with self._lock:
            self.counts[key] += 1

    def take(self) -> Counter[tuple[str, str]]:
        """The counts so far, and a fresh start."""
        with self._lock:
            counts, self.counts = self.counts, Counter()
        return counts


def kube_verb_resource(method: str, url: str) -> tuple[str, str]:
    """("LIST", "pods"), ("PATCH", "configmaps"), ("WATCH", "pods"), ... for an API URL."""
    parsed = urlparse(url)
    parts = [p for p in parsed.path.split("/") if p]
    rest_parts = parts[2:] if parts[:1] == ["api"] else parts[3:]  # after /api/v1 or /apis/<group>/<version>
    if len(rest_parts) > 2 and rest_parts[0] == "namespaces":
        rest_parts = rest_parts[2:]
    if not rest_parts:
        return method, parsed.path
    resource, named = rest_parts[0], len(rest_parts) > 1
    if len(rest_parts) > 2:
        resource += "/" + rest_parts[2]
    watching = parse_qs(parsed.query).get("watch", [""])[0].lower() in ("true", "1")
    if method == "GET":
        verb = "WATCH" if watching else ("GET" if named else "LIST")
    elif method == "DELETE" and not named:
        verb = "DELETECOLLECTION"
    else:
        verb = method
    return verb, resource


@contextmanager
def kube_requests() -> Iterator[RequestCounter]:
    """Counts requests of every kubernetes.client ApiClient in the process by (verb, resource)."""
    counter = RequestCounter()
    original = rest.RESTClientObject.request

    def counted(self: Any, method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if "/metrics" not in url:  # the benchmark's own scrapes
            counter.add(kube_verb_resource(method.upper(), url))
        return original(self, method, url, *args, **kwargs)

    rest.RESTClientObject.request = counted  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        rest.RESTClientObject.request = original  # type: ignore[method-assign]


@contextmanager
def guard_requests() -> Iterator[RequestCounter]:
    """Counts HTTP requests sent with requests or aiohttp by (method, path): the guard client's transports."""
    counter = RequestCounter()
    original_send = requests.Session.send
    original_request = aiohttp.ClientSession._request

    def send(self: requests.Session, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        counter.add((str(request.method), urlparse(str(request.url)).path))
        return original_send(self, request, **kwargs)

    async def request(self: aiohttp.ClientSession, method: str, url: Any, **kwargs: Any) -> Any:
        counter.add((method.upper(), urlparse(str(url)).path))
        return await original_request(self, method, url, **kwargs)

    requests.Session.send = send  # type: ignore[method-assign]
    aiohttp.ClientSession._request = request  # type: ignore[method-assign]
    try:
        yield counter
    finally:
        requests.Session.send = original_send  # type: ignore[method-assign]
        aiohttp.ClientSession._request = original_request  # type: ignore[method-assign]
