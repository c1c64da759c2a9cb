"""Requests counted by the apiserver itself, from its /metrics endpoint (read with the admin kubeconfig).

`apiserver_request_total` counts every client's requests by verb and resource; a long-running WATCH is counted
when it ends. `apiserver_flowcontrol_dispatched_requests_total` counts them by API Priority and Fairness flow
schema as they are dispatched: the flow schema `service-accounts` holds ServiceAccounts outside kube-system, so
when the scheduler (and its helm) acts as the rbac/ controller ServiceAccount and nothing else in the cluster
does, its delta is exactly the adapter's requests plus helm's.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from kubernetes import client

REQUESTS = "apiserver_request_total"
DISPATCHED = "apiserver_flowcontrol_dispatched_requests_total"
CONTROLLER_FLOW = "service-accounts"
_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>.*)\} (?P<value>\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Snapshot:
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (verb, resource[/subresource])
    flows: Counter[str] = field(default_factory=Counter)  # flow schema -> dispatched requests

    def __sub__(self, earlier: Snapshot) -> Snapshot:
        requests = Counter({k: v - earlier.requests[k] for k, v in self.requests.items() if v > earlier.requests[k]})
        flows = Counter({k: v - earlier.flows[k] for k, v in self.flows.items() if v > earlier.flows[k]})
        return Snapshot(requests, flows)

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    @property
    def controller(self) -> int:
        return self.flows[CONTROLLER_FLOW]


def parse(text: str) -> Snapshot:
    """Resource requests by (verb, resource) and dispatched requests by flow schema; non-resource requests
    (/metrics, /healthz, discovery) are left out."""
    requests: Counter[tuple[str, str]] = Counter()
    flows: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith((REQUESTS, DISPATCHED)):
            continue
        match = _LINE.match(line)
        if match is None:
            continue
        labels = dict(_LABEL.findall(match["labels"]))
        value = int(float(match["value"]))
        if match["name"] == REQUESTS and labels.get("resource"):
            resource = labels["resource"] + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            requests[(labels.get("verb", ""), resource)] += value
        elif match["name"] == DISPATCHED:
            flows[labels.get("flow_schema", "")] += value
    return Snapshot(requests, flows)


def scrape(api: client.ApiClient) -> Snapshot:
    response = api.call_api("GET", api.configuration.host + "/metrics", header_params={"Accept": "text/plain"})
    response.read()
    return parse(response.data.decode())
