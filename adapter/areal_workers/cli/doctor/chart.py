"""`areal-workers doctor`'s chart check: `helm template` of the chart and values files for a one-role probe (helm
checks the values against the chart's schema on the way)."""

from __future__ import annotations

import asyncio
from typing import Any

import yaml

from ... import naming
from ...areal_types import SchedulingSpec
from ...config import KubernetesSchedulerConfig
from ...release.client import HelmError, HelmNotFoundError, Releases, find_helm, helm_error_text
from ...release.model import ReleaseModel
from ...release.values import DEFAULT_COMMAND, TopologyError, base_values, role_values
from .check import Check

PROBE_EXPERIMENT = "areal-workers-doctor"
PROBE_ROLE = "doctor"


def probe_spec(gpus: int) -> SchedulingSpec:
    return SchedulingSpec(cpu=1, mem=1, gpu=gpus, port_count=1, cmd=DEFAULT_COMMAND)


def probe_values(config: KubernetesSchedulerConfig, gpus: int, replicas: int) -> dict[str, Any]:
    """The values create_workers would apply for one role of `replicas` workers on a fresh release."""
    base = base_values(config, PROBE_EXPERIMENT, "render")
    return ReleaseModel().with_role(PROBE_ROLE, role_values(probe_spec(gpus), replicas, config), base)


def render_chart(config: KubernetesSchedulerConfig, gpus: int, workers: int) -> tuple[Check, list[dict[str, Any]]]:
    """`helm template` of the probe role (the chart's values.schema.json is checked by helm on the way)."""
    name = "chart renders"
    try:
        find_helm(config.helm_executable)
    except HelmNotFoundError as missing:
        return Check(name, "fail", f"helm not found: {missing.where}", missing.fix), []
    sources = " with " + ", ".join(config.values_files) if config.values_files else ""
    try:
        values = probe_values(config, gpus, workers)
        manifests = asyncio.run(Releases(config).render(naming.release_name(PROBE_EXPERIMENT, "render"), values))
    except TopologyError as error:
        return Check(name, "fail", str(error), "fix KubernetesSchedulerConfig (the value named above)"), []
    except HelmError as error:
        return Check(
            name,
            "fail",
            f"helm template {config.chart}{sources}: {helm_error_text(error)}",
            "fix the values files (or the chart) where helm's error points",
        ), []
    except (OSError, ValueError, yaml.YAMLError) as error:
        return Check(
            name,
            "fail",
            f"cannot load the values files: {error}",
            "values_files must name readable YAML files, each a mapping at the top level",
        ), []
    kinds = sorted({manifest.get("kind", "?") for manifest in manifests})
    return Check(
        name,
        "pass",
        f"helm template {config.chart}{sources}: {len(manifests)} objects "
        f"({', '.join(kinds)}), values accepted by the chart's schema",
    ), manifests
