"""Shared pytest wiring: markers by directory, the cluster, namespaces and helm clients."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from repo_paths import REPO, TOOLS_BIN

# The lane of a test is the first directory under tests/, however deep the test sits below it: tests/unit/cli/doctor
# is the unit lane, tests/chart/docs the chart lane.
MARKER_BY_DIRECTORY = {"unit": "unit", "chart": "chart", "integration": "integration"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test carries the marker of its top directory under tests/, so `-m unit|chart|integration` selects
    lanes."""
    for item in items:
        directory = Path(str(item.fspath)).relative_to(REPO / "tests").parts[0]
        marker = MARKER_BY_DIRECTORY.get(directory)
        # Not `marker in item.keywords`: a test's keywords already hold its directory names.
        if marker and item.get_closest_marker(marker) is None:
            item.add_marker(getattr(pytest.mark, marker))


@pytest.fixture(scope="session")
def helm_executable() -> str:
    """helm 3 by default; AREAL_WORKERS_HELM=.tools/bin/helm4 runs the same tests on helm 4."""
    return os.environ.get("AREAL_WORKERS_HELM", str(TOOLS_BIN / "helm"))


@pytest.fixture(scope="session")
def kubeconfig() -> Path:
    """The admin kubeconfig: $AREAL_WORKERS_KUBECONFIG (any cluster) or the local control plane,
    started once per session (reused when already running; `make cluster-down` stops it)."""
    external = os.environ.get("AREAL_WORKERS_KUBECONFIG")
    if external:
        return Path(external)
    from localkube.cluster import LocalCluster

    cluster = LocalCluster()
    cluster.up()
    return cluster.kubeconfig


@pytest.fixture(scope="session")
def kube_client(kubeconfig: Path):
    from kubernetes import config

    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    yield api_client
    api_client.close()


def _namespace_name(test_name: str) -> str:
    slug = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].rstrip("-")
    return f"t-{slug}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def make_namespace(kube_client, request) -> Iterator:
    """Creates namespaces (with optional labels, e.g. PodSecurity levels) deleted after the test. They are
    private (labelled areal-workers.dev/podrunner=private): the local cluster's podrunner leaves their pods to the
    test's own (the pod_runner fixture), so two runners never run one pod. private=False hands them to the
    cluster's podrunner."""
    from kubernetes import client

    from podrunner.watch import PRIVATE_LABEL, PRIVATE_VALUE

    core = client.CoreV1Api(kube_client)
    created: list[str] = []

    def make(labels: dict[str, str] | None = None, private: bool = True) -> str:
        name = _namespace_name(request.node.name)
        labels = {**({PRIVATE_LABEL: PRIVATE_VALUE} if private else {}), **(labels or {})}
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name, labels=labels or None)))
        created.append(name)
        return name

    yield make
    for name in created:
        core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def namespace(make_namespace) -> str:
    return make_namespace()


@pytest.fixture
def helm_client(kubeconfig: Path, helm_executable: str):
    from pyhelm3 import Client

    return Client(executable=helm_executable, kubeconfig=kubeconfig, history_max_revisions=10)
