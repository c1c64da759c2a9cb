"""Why a worker whose pod is alive does not answer: what the release's NetworkPolicy admits (the chart records it
in the topology), and what a trainer must be to get in. Said beside an RPCConnectionError (or a call's connection
failures), after the liveness check found the pod alive."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def unreachable_advice(network_policy: Mapping[str, Any] | None, worker_address: str) -> str:
    """`network_policy`: the topology's `network_policy` entry (None: the release renders none)."""
    if not network_policy:
        return (
            f"the worker's pod is alive but {worker_address} did not answer, and the release has no NetworkPolicy: "
            "check that this host routes to the pod network (a trainer outside the cluster usually cannot reach pod "
            "IPs) and that no other policy or firewall drops the connection"
        )
    pods, namespaces = network_policy.get("controller_pods") or {}, network_policy.get("controller_namespaces") or {}
    admitted = []
    if pods or namespaces:
        who = f"pods matching {_selector_text(pods)}" if pods else "any pod"
        where = f"in namespaces matching {_selector_text(namespaces)}" if namespaces else "in the release's namespace"
        admitted.append(f"{who} {where}")
    cidrs = network_policy.get("cidrs") or []
    admitted.append(
        f"the addresses {', '.join(cidrs)}"
        if cidrs
        else "no address outside the cluster's pods (networkPolicy.controller.cidrs is empty)"
    )
    return (
        f"the worker's pod is alive but {worker_address} did not answer: if the cluster enforces NetworkPolicies, "
        f"NetworkPolicy {network_policy.get('name')} admits the guard only from the release's own pods, "
        f"from {' and from '.join(admitted)}. A trainer in a pod: label it areal.io/controller=true "
        "(areal-workers submit does) or widen networkPolicy.controller.podSelector; a trainer outside the cluster: "
        "add the address the workers see it from to networkPolicy.controller.cidrs (it must also route to pod IPs)"
    )


def _selector_text(selector: Mapping[str, Any] | None) -> str:
    if not selector:
        return "anything"
    terms = [f"{key}={value}" for key, value in sorted((selector.get("matchLabels") or {}).items())]
    for expression in selector.get("matchExpressions") or []:
        values = ",".join(expression.get("values") or [])
        terms.append(f"{expression.get('key')} {expression.get('operator')}" + (f" ({values})" if values else ""))
    return ",".join(terms) or "anything"
