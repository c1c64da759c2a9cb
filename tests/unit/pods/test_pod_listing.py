"""A pod listing is never waited on forever: every PodWatch.list carries a request time-out (a metrics scrape lists
from the exporter's thread, which a hung API server would otherwise keep, one thread per scrape)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from areal_workers.pods.watch import LIST_TIMEOUT_SECONDS, PodWatch


def test_every_listing_carries_a_request_time_out():
    asked: list[dict[str, Any]] = []

    def list_namespaced_pod(namespace: str, **kwargs: Any) -> SimpleNamespace:
        asked.append({"namespace": namespace, **kwargs})
        return SimpleNamespace(items=["pod"], metadata=SimpleNamespace(resource_version="9"))

    pods = PodWatch(SimpleNamespace(list_namespaced_pod=list_namespaced_pod), "rl")  # type: ignore[arg-type]
    assert pods.list("app.kubernetes.io/instance=aw-x") == (["pod"], "9")
    assert asked == [
        {
            "namespace": "rl",
            "label_selector": "app.kubernetes.io/instance=aw-x",
            "_request_timeout": LIST_TIMEOUT_SECONDS,
        }
    ]
    assert 0 < LIST_TIMEOUT_SECONDS <= 60
