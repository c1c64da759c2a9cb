"""The trainer pod's NetworkPolicy, built as plain data: no ingress of its own but the metrics scrapers' to the
metrics port when the submit file serves metrics (the chart's `<release>-trainer` policy admits the release's workers
to AReaL's callback servers, docs/en/security.md#the-trainers-network), and
egress to the workers of its namespace, DNS and the API server only, plus the submit file's own rules.

The trainer holds the controller's token; AReaL's RolloutController serves unauthenticated callbacks whose
`init_weights_group` imports and calls what its payload names. Without a policy any pod could run code as the
controller."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client

from ..errors import InputError, refuse_unknown_fields
from ..naming import LABEL_JOB_NAME, LABEL_NAME

KEYS = ("enabled", "apiserver", "egress")
EXAMPLE = "network_policy: {apiserver: ['192.0.2.10:6443'], egress: [{to: [{ipBlock: {cidr: 192.0.2.128/25}}]}]}"


@dataclass(frozen=True)
class Endpoint:
    """An address and port the trainer's pod reaches the API server at."""

    address: str
    port: int

    @property
    def cidr(self) -> str:
        network = ipaddress.ip_network(self.address, strict=False)
        return str(network)


def parse_endpoint(text: str, where: str) -> Endpoint:
    """`IP[/prefix]:port` or `[IPv6[/prefix]]:port`."""
    host, _, port = str(text).rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    try:
        ipaddress.ip_network(host, strict=False)
        number = int(port)
    except ValueError:
        number = 0
    if not host or not 0 < number < 65536:
        raise InputError(
            f"{where}: {text!r} is not an API server endpoint; give IP:port or CIDR:port (e.g. 192.0.2.10:6443, "
            "[fd00::1]:443), as the trainer's pod reaches the API server"
        )
    return Endpoint(host, number)


def settings(value: Any, where: Path | None) -> dict[str, Any]:
    """A submit file's `network_policy` mapping, checked, with its defaults."""
    if not isinstance(value, dict):
        raise InputError(f"{where}: network_policy is a mapping ({EXAMPLE})")
    refuse_unknown_fields(value, KEYS, where, "it", prefix="network_policy.")
    enabled = value.get("enabled", True)
    if not isinstance(enabled, bool):
        raise InputError(f"{where}: network_policy.enabled is true or false")
    apiserver = value.get("apiserver") or []
    if not isinstance(apiserver, list):
        raise InputError(f"{where}: network_policy.apiserver is a list of IP:port ({EXAMPLE})")
    for item in apiserver:
        parse_endpoint(item, f"{where}: network_policy.apiserver")
    egress = value.get("egress") or []
    if not isinstance(egress, list) or not all(isinstance(rule, dict) for rule in egress):
        raise InputError(
            f"{where}: network_policy.egress is a list of NetworkPolicy egress rules, camelCase ({EXAMPLE}); "
            "[{}] lets the trainer reach anything"
        )
    for rule in egress:
        unknown_fields = sorted(set(rule) - set(client.V1NetworkPolicyEgressRule.attribute_map.values()))
        if unknown_fields:
            raise InputError(
                f"{where}: unknown field(s) {', '.join(unknown_fields)} in a network_policy.egress rule; a rule has "
                "to and ports"
            )
    return {"enabled": enabled, "apiserver": list(apiserver), "egress": list(egress)}


def opens_all_egress(extra_egress: list[dict[str, Any]]) -> bool:
    """An egress rule without `to` and `ports` admits every destination: no API server rule is needed."""
    return any(not rule.get("to") and not rule.get("ports") for rule in extra_egress)


def apiserver_from_env(env: dict[str, Any]) -> list[Endpoint]:
    """The API server the submit file points the trainer at (KUBERNETES_SERVICE_HOST and _PORT in its env)."""
    host, port = env.get("KUBERNETES_SERVICE_HOST"), env.get("KUBERNETES_SERVICE_PORT", "443")
    if not isinstance(host, str) or not host or not isinstance(port, (str, int)):  # unset, or from a Secret
        return []
    return [parse_endpoint(f"[{host}]:{port}", "env KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT")]


def discover_apiserver(api: client.ApiClient) -> list[Endpoint]:
    """The API server as a pod reaches it: the `kubernetes` Service's cluster IPs and port (CNIs that judge a
    connection before its service address is translated) and its EndpointSlices' addresses and ports (those that
    judge after). Raises ApiException when the caller may not read them."""
    service = client.CoreV1Api(api).read_namespaced_service("kubernetes", "default")
    found = [
        Endpoint(ip, port.port)
        for ip in (service.spec.cluster_ips or [service.spec.cluster_ip])
        if ip and ip != "None"
        for port in service.spec.ports or []
    ]
    slices = client.DiscoveryV1Api(api).list_namespaced_endpoint_slice(
        "default", label_selector="kubernetes.io/service-name=kubernetes"
    )
    for endpoint_slice in slices.items:
        ports = [p.port for p in endpoint_slice.ports or [] if p.port]
        for endpoint in endpoint_slice.endpoints or []:
            found += [Endpoint(address, port) for address in endpoint.addresses for port in ports]
    return sorted(set(found), key=lambda e: (e.address, e.port))


def _apiserver_rule(endpoints: list[Endpoint]) -> list[dict[str, Any]]:
    """One rule per port: a rule's peers and ports combine as every peer with every port."""
    rules = []
    for port in sorted({e.port for e in endpoints}):
        cidrs = sorted({e.cidr for e in endpoints if e.port == port})
        rules.append(
            {"to": [{"ipBlock": {"cidr": cidr}} for cidr in cidrs], "ports": [{"protocol": "TCP", "port": port}]}
        )
    return rules


def trainer_network_policy(
    job: dict[str, Any],
    apiserver: list[Endpoint],
    extra_egress: list[dict[str, Any]],
    ingress: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The NetworkPolicy of the pods of `job` (a Job manifest), named after it; `ingress`: its only ingress rules (the
    metrics scrapers', trainer/metrics.py)."""
    name, namespace = job["metadata"]["name"], job["metadata"]["namespace"]
    egress: list[dict[str, Any]] = [
        # The workers of the namespace's releases, every port: guards, engine servers, forks.
        {"to": [{"podSelector": {"matchLabels": {LABEL_NAME: "areal-workers"}}}]},
        # DNS, wherever the cluster serves it (a kube-dns Service, a node-local cache).
        {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]},
        *_apiserver_rule(apiserver),
        *extra_egress,
    ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(job["metadata"]["labels"])},
        "spec": {
            "podSelector": {"matchLabels": {LABEL_JOB_NAME: name}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": list(ingress or []),
            "egress": egress,
        },
    }
