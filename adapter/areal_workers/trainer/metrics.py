"""The trainer's Prometheus metrics in `submit`, built as plain data from the submit file's `metrics` mapping: the
scheduler's setting (AREAL_K8S_METRICS_ADDRESS), the container port, the prometheus.io scrape annotations, the
ingress rule of the trainer's NetworkPolicy that admits the scrapers to that port, and a Prometheus Operator
PodMonitor when asked for (docs/en/observability.md; cli/pod_monitor.py creates it). Off unless `enabled`: the
trainer's image then needs the `metrics` extra (prometheus-client), or the scheduler refuses to start."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from kubernetes import client

from ..errors import InputError, refuse_unknown_fields
from ..naming import LABEL_JOB_NAME

KEYS = ("enabled", "port", "annotations", "scrapers", "pod_monitor", "pod_monitor_labels", "interval")
PORT_NAME = "metrics"
PATH = "/metrics"
EXAMPLE = (
    "metrics: {enabled: true, port: 9090, pod_monitor: true, pod_monitor_labels: {release: prometheus}, "
    "scrapers: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]}"
)
# Who may scrape the trainer through its NetworkPolicy by default: the pods of a Prometheus (the Prometheus
# Operator's label) in the namespace `monitoring`, where kube-prometheus-stack installs by default.
DEFAULT_SCRAPERS: list[dict[str, Any]] = [
    {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
]
POD_MONITOR_API = ("monitoring.coreos.com", "v1", "podmonitors")


POD_IP_VARIABLE = "AREAL_K8S_METRICS_POD_IP"


def settings(value: Any, where: Path | None) -> dict[str, Any]:
    """A submit file's `metrics` mapping, checked, with its defaults."""
    if not isinstance(value, dict):
        raise InputError(f"{where}: metrics is a mapping ({EXAMPLE})")
    refuse_unknown_fields(value, KEYS, where, "it", prefix="metrics.")
    merged = {
        "enabled": False,
        "port": 9090,
        "annotations": True,
        "scrapers": copy.deepcopy(DEFAULT_SCRAPERS),
        "pod_monitor": False,
        "pod_monitor_labels": {},
        "interval": "30s",
        **value,
    }
    for key in ("enabled", "annotations", "pod_monitor"):
        if not isinstance(merged[key], bool):
            raise InputError(f"{where}: metrics.{key} is true or false")
    port = merged["port"]
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise InputError(f"{where}: metrics.port is a port number (1-65535), got {port!r}")
    scrapers = merged["scrapers"]
    if not isinstance(scrapers, list) or not all(isinstance(peer, dict) for peer in scrapers):
        raise InputError(f"{where}: metrics.scrapers is a list of NetworkPolicy peers, camelCase ({EXAMPLE})")
    peer_fields = set(client.V1NetworkPolicyPeer.attribute_map.values())
    unknown_peer = sorted({key for peer in scrapers for key in peer} - peer_fields)
    if unknown_peer:
        raise InputError(
            f"{where}: unknown field(s) {', '.join(unknown_peer)} in metrics.scrapers; a peer has "
            f"{', '.join(sorted(peer_fields))}"
        )
    labels = merged["pod_monitor_labels"]
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise InputError(f"{where}: metrics.pod_monitor_labels maps label names to strings")
    if not isinstance(merged["interval"], str):
        raise InputError(f"{where}: metrics.interval is a Prometheus duration such as 30s")
    return merged


def address_env(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The scheduler's setting: the pod's own IP (from the downward API, defined first so Kubernetes expands it), at
    the port; not every interface, so a pod run on a host's network never listens beyond its address."""
    if not metrics["enabled"]:
        return []
    pod_ip = {"name": POD_IP_VARIABLE, "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
    return [pod_ip, {"name": "AREAL_K8S_METRICS_ADDRESS", "value": f"$({POD_IP_VARIABLE}):{metrics['port']}"}]


def container_ports(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"name": PORT_NAME, "containerPort": metrics["port"], "protocol": "TCP"}] if metrics["enabled"] else []


def pod_annotations(metrics: dict[str, Any]) -> dict[str, str]:
    """The prometheus.io annotations that Prometheus' kubernetes_sd scrape configs (and many charts) go by."""
    if not (metrics["enabled"] and metrics["annotations"]):
        return {}
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(metrics["port"]), "prometheus.io/path": PATH}


def ingress_rules(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """The rule of the trainer's NetworkPolicy that admits the scrapers to the metrics port, and nothing else
    (AReaL's callback servers stay closed to them); none without scrapers."""
    if not (metrics["enabled"] and metrics["scrapers"]):
        return []
    return [{"from": copy.deepcopy(metrics["scrapers"]), "ports": [{"protocol": "TCP", "port": metrics["port"]}]}]


def pod_monitor(job: dict[str, Any], metrics: dict[str, Any]) -> dict[str, Any] | None:
    """The PodMonitor of the pods of `job` (a Job manifest), named after it (None: not asked for)."""
    if not (metrics["enabled"] and metrics["pod_monitor"]):
        return None
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    group, version, _ = POD_MONITOR_API
    return {
        "apiVersion": f"{group}/{version}",
        "kind": "PodMonitor",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**job["metadata"]["labels"], **metrics["pod_monitor_labels"]},
        },
        "spec": {
            "selector": {"matchLabels": {LABEL_JOB_NAME: name}},
            "podMetricsEndpoints": [{"port": PORT_NAME, "path": PATH, "interval": metrics["interval"]}],
        },
    }
