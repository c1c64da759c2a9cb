"""runtime/backend.py: the kubernetes client from the config (an explicit kubeconfig or context, else in-cluster,
else the default kubeconfig), and connect() wiring one release's Backend: every part on the config's namespace
and the release, the guard checking liveness only after a failure, and a trainer Lease only for a managed release
with a grace period. Nothing here reaches a cluster: the client is built and never used."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config as kube_config

from areal_workers.config import KubernetesSchedulerConfig
from areal_workers.guard.client import GuardClient
from areal_workers.pods.inspector import ReleaseInspector
from areal_workers.pods.watch import PodWatch
from areal_workers.runtime import backend
from areal_workers.runtime.lease import ReleaseLease

RELEASE = "aw-exp-t-1a2b3c4d"


def settings(**fields: Any) -> KubernetesSchedulerConfig:
    return KubernetesSchedulerConfig(**{"namespace": "rl", "release_name": RELEASE, **fields})


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []


@pytest.fixture
def api() -> Iterator[client.ApiClient]:
    made = client.ApiClient(client.Configuration(host="https://cluster.invalid"))
    yield made
    made.close()


@pytest.fixture
def no_helm(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    """Releases(config) stands in for the helm client (which looks for a helm executable)."""
    made = Recorder()
    monkeypatch.setattr(backend, "Releases", lambda config: made.calls.append(("Releases", config)) or made)
    return made


def connected(config: KubernetesSchedulerConfig, api: client.ApiClient, liveness: Any = None) -> backend.Backend:
    made = backend.connect(config, RELEASE, liveness or (lambda worker: None), api)
    assert isinstance(made.guard, GuardClient)
    made.guard.close()
    return made


# --- kube_client ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields", [{"kubeconfig": "/k/config"}, {"context": "kind-rl"}, {"kubeconfig": "/k/config", "context": "kind-rl"}]
)
def test_an_explicit_kubeconfig_or_context_is_used_as_given(fields, monkeypatch):
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(backend.kube_config, "new_client_from_config", lambda **kwargs: made.append(kwargs) or "c")
    monkeypatch.setattr(backend.kube_config, "load_incluster_config", lambda: pytest.fail("not in-cluster"))
    assert backend.kube_client(settings(**fields)) == "c"
    assert made == [{"config_file": fields.get("kubeconfig"), "context": fields.get("context")}]


def test_without_either_the_in_cluster_service_account_comes_first(monkeypatch):
    loaded: list[str] = []
    monkeypatch.setattr(backend.kube_config, "load_incluster_config", lambda: loaded.append("incluster"))
    monkeypatch.setattr(backend.kube_config, "load_kube_config", lambda: loaded.append("kubeconfig"))
    assert isinstance(backend.kube_client(settings()), client.ApiClient)
    assert loaded == ["incluster"]


def test_outside_a_cluster_the_default_kubeconfig_is_loaded(monkeypatch):
    loaded: list[str] = []

    def not_in_a_pod() -> None:
        loaded.append("incluster")
        raise kube_config.ConfigException("Service host/port is not set.")

    monkeypatch.setattr(backend.kube_config, "load_incluster_config", not_in_a_pod)
    monkeypatch.setattr(backend.kube_config, "load_kube_config", lambda: loaded.append("kubeconfig"))
    assert isinstance(backend.kube_client(settings()), client.ApiClient)
    assert loaded == ["incluster", "kubeconfig"]


# --- connect ----------------------------------------------------------------------------------------------


def test_connect_wires_every_part_to_the_namespace_and_the_release(api, no_helm, monkeypatch):
    monkeypatch.setattr(backend, "kube_client", lambda config: pytest.fail("the given client is used"))
    config = settings(namespace="team-a")

    def liveness(worker: Any) -> None:
        return None

    made = connected(config, api, liveness)
    assert made.releases is no_helm and no_helm.calls == [("Releases", config)]
    assert isinstance(made.pods, PodWatch) and made.pods.namespace == "team-a"
    assert made.pods.core.api_client is api
    assert isinstance(made.inspector, ReleaseInspector)
    assert (made.inspector.namespace, made.inspector.release) == ("team-a", RELEASE)
    assert made.inspector.admission is not None and made.inspector.admission.namespace == "team-a"
    assert isinstance(made.statefulsets, client.AppsV1Api) and made.statefulsets.api_client is api
    # The guard checks a worker's pod before retries and after connection errors, not before every call.
    assert made.guard._liveness is liveness and made.guard._check_first_attempt is False


def test_without_a_client_one_is_made_from_the_config(api, no_helm, monkeypatch):
    asked: list[KubernetesSchedulerConfig] = []
    monkeypatch.setattr(backend, "kube_client", lambda config: asked.append(config) or api)
    config = settings()
    made = backend.connect(config, RELEASE, lambda worker: None)
    made.guard.close()
    assert asked == [config] and made.pods.core.api_client is api


def test_a_managed_release_with_a_grace_period_gets_the_trainers_lease(api, no_helm):
    made = connected(settings(lease_grace_seconds=45, lease_takeover=True), api)
    assert isinstance(made.lease, ReleaseLease)
    assert (made.lease.namespace, made.lease.release, made.lease.grace_seconds) == ("rl", RELEASE, 45)
    assert made.lease.takeover is True and made.lease.coordination.api_client is api


@pytest.mark.parametrize("fields", [{"lease_grace_seconds": 0}, {"ownership": "external"}])
def test_no_lease_without_a_grace_period_or_for_an_external_release(fields, api, no_helm):
    assert connected(settings(**fields), api).lease is None


def test_the_access_check_is_the_namespace_check_on_the_config_namespace(api, no_helm, monkeypatch):
    checked: list[tuple[Any, str]] = []
    monkeypatch.setattr(backend.cluster_access, "check_namespace", lambda core, ns: checked.append((core, ns)))
    made = connected(settings(namespace="team-b"), api)
    assert checked == []  # checked when the scheduler asks, not when connecting
    made.check_access()
    assert len(checked) == 1 and checked[0][1] == "team-b" and checked[0][0].api_client is api


def test_a_backend_built_by_hand_keeps_no_lease_and_checks_no_access():
    made = backend.Backend(releases=None, pods=None, inspector=None, statefulsets=None, guard=None)  # type: ignore[arg-type]
    assert made.lease is None
    assert made.check_access() is None
