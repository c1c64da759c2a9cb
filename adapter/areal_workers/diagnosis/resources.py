"""What a pod requests, in base units (cores, bytes, devices), and amounts written for people."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal

from kubernetes.client import V1Container, V1Pod
from kubernetes.utils import parse_quantity


def format_quantity(resource: str, value: Decimal) -> str:
    """A base-unit amount for people: memory in Ki/Mi/Gi/Ti, fractional cpu in millicores, the rest as a number."""
    if resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-"):
        for unit, power in (("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)):
            scaled = value / (1024**power)
            if abs(scaled) >= 1:
                return f"{_trim(scaled.quantize(Decimal('0.1')))}{unit}"
        return _trim(value)
    if resource == "cpu" and value != value.to_integral_value():
        return f"{_trim((value * 1000).quantize(Decimal('1')))}m"
    return _trim(value)


def _trim(value: Decimal) -> str:
    text = f"{value.normalize():f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _container_requests(container: V1Container) -> dict[str, Decimal]:
    resources = container.resources
    if resources is None:
        return {}
    # The API server defaults a missing request to the limit (extended resources such as GPUs are often limit-only).
    merged = {**(resources.limits or {}), **(resources.requests or {})}
    return {name: parse_quantity(value) for name, value in merged.items()}


def pod_requests(pod: V1Pod) -> dict[str, Decimal]:
    """What the scheduler reserves for the pod: containers and sidecars summed, the largest init container, overhead."""
    spec = pod.spec
    sidecars = [c for c in spec.init_containers or [] if c.restart_policy == "Always"]
    total: dict[str, Decimal] = {}
    for container in [*(spec.containers or []), *sidecars]:
        add_to(total, _container_requests(container))
    for container in spec.init_containers or []:
        if container.restart_policy != "Always":
            for name, value in _container_requests(container).items():
                total[name] = max(total.get(name, Decimal(0)), value)
    add_to(total, {name: parse_quantity(value) for name, value in (spec.overhead or {}).items()})
    return {name: value for name, value in total.items() if value > 0}


def add_to(total: dict[str, Decimal], more: Mapping[str, Decimal]) -> None:
    for name, value in more.items():
        total[name] = total.get(name, Decimal(0)) + value
