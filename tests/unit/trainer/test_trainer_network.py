"""The trainer pod's NetworkPolicy (trainer/network.py) and how `submit` finds the API server for it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from areal_workers import KubernetesSchedulerConfig
from areal_workers.cli.commands import submit
from areal_workers.cli.session import EXIT_PROBLEM, EXIT_USAGE, CliError
from areal_workers.errors import InputError
from areal_workers.release.values import base_values
from areal_workers.trainer.job import load_spec, trainer_job
from areal_workers.trainer.network import Endpoint, discover_apiserver, parse_endpoint, trainer_network_policy

JOB = trainer_job(load_spec(None, {"image": "reg/areal:1", "name": "trainer-t"}), ["python", "t.py"], "rl")


def written(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "trainer.yaml"
    path.write_text(yaml.safe_dump({"image": "reg/areal:1", "name": "trainer-t", **data}))
    return path


def test_the_policy_selects_the_jobs_pods_admits_no_ingress_and_only_workers_dns_and_the_api_server_as_egress():
    policy = trainer_network_policy(JOB, [Endpoint("192.0.2.1", 443), Endpoint("192.0.2.2", 6443)], [])
    assert policy["metadata"]["name"] == "trainer-t" and policy["metadata"]["namespace"] == "rl"
    spec = policy["spec"]
    assert spec["podSelector"] == {"matchLabels": {"batch.kubernetes.io/job-name": "trainer-t"}}
    assert spec["policyTypes"] == ["Ingress", "Egress"] and spec["ingress"] == []
    workers, dns, *apiserver = spec["egress"]
    assert workers == {"to": [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "areal-workers"}}}]}
    assert dns == {"ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}]}
    # A rule admits each of its peers on each of its ports: one rule per port, or 192.0.2.1:6443 would be open too.
    assert apiserver == [
        {"to": [{"ipBlock": {"cidr": "192.0.2.1/32"}}], "ports": [{"protocol": "TCP", "port": 443}]},
        {"to": [{"ipBlock": {"cidr": "192.0.2.2/32"}}], "ports": [{"protocol": "TCP", "port": 6443}]},
    ]
    # It is valid Kubernetes: every field known to the client's model.
    assert client.ApiClient()._ApiClient__deserialize(policy, "V1NetworkPolicy").spec.egress[2].ports[0].port == 443


def test_the_submit_files_egress_rules_are_added_and_an_empty_one_needs_no_api_server(tmp_path: Path):
    rules = [{"to": [{"ipBlock": {"cidr": "192.0.2.128/25"}}], "ports": [{"port": 443}]}]
    spec = load_spec(written(tmp_path, {"network_policy": {"egress": rules}}), {})
    assert spec.network_policy == {"enabled": True, "apiserver": [], "egress": rules}
    policy = trainer_network_policy(JOB, [Endpoint("192.0.2.1", 443)], spec.network_policy["egress"])
    assert policy["spec"]["egress"][-1] == rules[0]
    open_spec = load_spec(written(tmp_path, {"network_policy": {"egress": [{}]}}), {})
    session = SimpleNamespace(api="unused: nothing is read from the cluster")
    made = submit._network_policy(session, open_spec, JOB)
    assert made is not None and made["spec"]["egress"][-1] == {} and len(made["spec"]["egress"]) == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("192.0.2.10:6443", Endpoint("192.0.2.10", 6443)),
        ("192.0.2.0/24:443", Endpoint("192.0.2.0/24", 443)),
        ("[fd00::1]:443", Endpoint("fd00::1", 443)),
    ],
)
def test_api_server_endpoints_are_ip_or_cidr_and_port(text, expected):
    assert parse_endpoint(text, "x") == expected
    assert expected.cidr in ("192.0.2.10/32", "192.0.2.0/24", "fd00::1/128")


@pytest.mark.parametrize("text", ["kubernetes.default:443", "192.0.2.10", "192.0.2.10:0", "192.0.2.10:http"])
def test_an_api_server_endpoint_that_is_not_ip_and_port_is_a_usage_error(tmp_path: Path, text):
    with pytest.raises(InputError) as refused:
        load_spec(written(tmp_path, {"network_policy": {"apiserver": [text]}}), {})
    assert "IP:port" in str(refused.value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"ingress": []}, "unknown field(s) network_policy.ingress"),
        ({"enabled": "yes"}, "network_policy.enabled is true or false"),
        ({"egress": {"to": []}}, "network_policy.egress is a list of NetworkPolicy egress rules"),
        ({"egress": [{"peers": []}]}, "unknown field(s) peers in a network_policy.egress rule"),
        ("off", "network_policy is a mapping"),
    ],
)
def test_a_bad_network_policy_setting_is_a_usage_error(tmp_path: Path, value, message):
    with pytest.raises(InputError) as refused:
        load_spec(written(tmp_path, {"network_policy": value}), {})
    assert message in str(refused.value)


def test_the_api_server_comes_from_the_file_then_the_trainers_env_then_the_cluster(tmp_path: Path, monkeypatch):
    def egress(spec_data: dict) -> list:
        made = submit._network_policy(SimpleNamespace(api=None), load_spec(written(tmp_path, spec_data), {}), JOB)
        assert made is not None
        return [rule["to"][0]["ipBlock"]["cidr"] for rule in made["spec"]["egress"][2:]]

    monkeypatch.setattr(submit, "discover_apiserver", lambda api: [Endpoint("192.0.2.1", 443)])
    assert egress({"network_policy": {"apiserver": ["192.0.2.7:6443"]}}) == ["192.0.2.7/32"]
    env = {"KUBERNETES_SERVICE_HOST": "198.18.0.1", "KUBERNETES_SERVICE_PORT": "16443"}
    assert egress({"env": env}) == ["198.18.0.1/32"]
    assert egress({}) == ["192.0.2.1/32"]
    from_secret = {"KUBERNETES_SERVICE_HOST": {"secretKeyRef": {"name": "api", "key": "host"}}}
    assert egress({"env": from_secret}) == ["192.0.2.1/32"]  # not known before the pod runs: read from the cluster
    assert (
        submit._network_policy(None, load_spec(written(tmp_path, {"network_policy": {"enabled": False}}), {}), JOB)
        is None
    )


def test_an_api_server_submit_may_not_read_is_a_usage_error_with_the_ways_out(tmp_path: Path, monkeypatch):
    def forbidden(api):
        raise ApiException(status=403, reason="Forbidden")

    monkeypatch.setattr(submit, "discover_apiserver", forbidden)
    with pytest.raises(CliError) as refused:
        submit._network_policy(SimpleNamespace(api=None), load_spec(written(tmp_path, {}), {}), JOB)
    assert refused.value.exit_code == EXIT_USAGE
    assert "network_policy: {apiserver: ['IP:port']}" in str(refused.value) and "egress: [{}]" in str(refused.value)


def test_discovery_reads_the_kubernetes_service_and_its_endpoint_slices(monkeypatch):
    service = client.V1Service(
        spec=client.V1ServiceSpec(
            cluster_ip="192.0.2.1", cluster_ips=["192.0.2.1"], ports=[client.V1ServicePort(port=443)]
        )
    )
    endpoint_slice = client.V1EndpointSlice(
        address_type="IPv4",
        endpoints=[client.V1Endpoint(addresses=["192.0.2.2"]), client.V1Endpoint(addresses=["192.0.2.3"])],
        ports=[client.DiscoveryV1EndpointPort(port=6443)],
    )
    monkeypatch.setattr(
        client, "CoreV1Api", lambda api: SimpleNamespace(read_namespaced_service=lambda name, namespace: service)
    )
    monkeypatch.setattr(
        client,
        "DiscoveryV1Api",
        lambda api: SimpleNamespace(
            list_namespaced_endpoint_slice=lambda namespace, label_selector: SimpleNamespace(items=[endpoint_slice])
        ),
    )
    assert discover_apiserver(None) == [
        Endpoint("192.0.2.1", 443),
        Endpoint("192.0.2.2", 6443),
        Endpoint("192.0.2.3", 6443),
    ]


class Networking:
    def __init__(self, fail: int | None) -> None:
        self.fail, self.created = fail, []

    def create_namespaced_network_policy(self, namespace: str, body: dict) -> None:
        if self.fail:
            raise ApiException(status=self.fail, reason="Forbidden")
        self.created.append(body)


def test_the_policy_is_owned_by_the_job_and_without_it_the_job_is_deleted_again(monkeypatch):
    deleted: list[str] = []
    monkeypatch.setattr(submit, "delete_job", lambda session, name: deleted.append(name) or f"deleted job {name}")
    job = client.V1Job(metadata=client.V1ObjectMeta(name="trainer-t", uid="job-uid"))
    policy = trainer_network_policy(JOB, [Endpoint("192.0.2.1", 443)], [])
    session = SimpleNamespace(api=None, namespace="rl")
    networking = Networking(None)
    monkeypatch.setattr(client, "NetworkingV1Api", lambda api: networking)
    submit._create_network_policy(session, policy, job)
    [created] = networking.created
    assert created["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "trainer-t", "uid": "job-uid"}
    ]
    assert deleted == []
    monkeypatch.setattr(client, "NetworkingV1Api", lambda api: Networking(403))
    with pytest.raises(CliError) as refused:
        submit._create_network_policy(session, policy, job)
    assert deleted == ["trainer-t"] and refused.value.exit_code == EXIT_PROBLEM
    assert "job trainer-t was deleted again" in str(refused.value) and "must not run unisolated" in str(refused.value)


def test_the_trainers_job_narrows_the_releases_controller_selector_to_its_own_pods():
    values = base_values(KubernetesSchedulerConfig(trainer_job="trainer-t"), "e", "t")
    assert values["networkPolicy"] == {
        "controller": {"podSelector": {"matchLabels": {"batch.kubernetes.io/job-name": "trainer-t"}}}
    }
    assert "networkPolicy" not in base_values(KubernetesSchedulerConfig(), "e", "t")
