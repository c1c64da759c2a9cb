"""The trainer's metrics in `submit` (trainer/metrics.py, cli/pod_monitor.py): off by default; when a submit file
enables them, the scheduler's setting, the named port, the prometheus.io annotations, one ingress rule for the
scrapers to that port only, and the PodMonitor when asked for, all shown by --dry-run."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from areal_workers import KubernetesSchedulerConfig
from areal_workers.cli import pod_monitor
from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_OK
from areal_workers.errors import InputError
from areal_workers.trainer import metrics
from areal_workers.trainer.job import load_spec, trainer_job
from areal_workers.trainer.network import Endpoint, trainer_network_policy

COMMAND = ["python", "train.py"]


def written(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "trainer.yaml"
    path.write_text(
        yaml.safe_dump(
            {"image": "reg/areal:1", "name": "trainer-t", "network_policy": {"apiserver": ["10.0.0.1:6443"]}, **data}
        )
    )
    return path


def job_with(tmp_path: Path, metrics_settings: dict | None) -> tuple[dict, dict]:
    data = {} if metrics_settings is None else {"metrics": metrics_settings}
    spec = load_spec(written(tmp_path, data), {})
    return trainer_job(spec, COMMAND, "rl"), spec.metrics


def pod_of(job: dict) -> tuple[dict, dict]:
    template = job["spec"]["template"]
    return template, template["spec"]["containers"][0]


def test_metrics_are_off_unless_the_submit_file_enables_them(tmp_path):
    job, settings = job_with(tmp_path, None)
    template, container = pod_of(job)
    assert "AREAL_K8S_METRICS_ADDRESS" not in {e["name"] for e in container["env"]}
    assert "ports" not in container and "annotations" not in template["metadata"]
    assert metrics.ingress_rules(settings) == [] and metrics.pod_monitor(job, settings) is None


def test_enabled_metrics_set_the_address_name_the_port_and_annotate_the_pod(tmp_path):
    job, _ = job_with(tmp_path, {"enabled": True, "port": 9400})
    template, container = pod_of(job)
    env = {e["name"]: e for e in container["env"]}
    assert env["AREAL_K8S_METRICS_ADDRESS"] == {
        "name": "AREAL_K8S_METRICS_ADDRESS",
        "value": "$(AREAL_K8S_METRICS_POD_IP):9400",
    }
    assert env["AREAL_K8S_METRICS_POD_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert KubernetesSchedulerConfig(metrics_address=env["AREAL_K8S_METRICS_ADDRESS"]["value"]).metrics_address
    assert container["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert template["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9400",
        "prometheus.io/path": "/metrics",
    }
    assert template["metadata"]["labels"]["areal.io/controller"] == "true"  # the chart's policy still admits it


def test_the_submit_files_own_address_wins_and_annotations_may_be_left_out(tmp_path):
    spec = load_spec(
        written(
            tmp_path,
            {"metrics": {"enabled": True, "annotations": False}, "env": {"AREAL_K8S_METRICS_ADDRESS": "[::]:9090"}},
        ),
        {},
    )
    template, container = pod_of(trainer_job(spec, COMMAND, "rl"))
    addresses = [e for e in container["env"] if e["name"] == "AREAL_K8S_METRICS_ADDRESS"]
    assert addresses == [{"name": "AREAL_K8S_METRICS_ADDRESS", "value": "[::]:9090"}]
    assert "annotations" not in template["metadata"]


def test_the_policy_admits_the_scrapers_to_the_metrics_port_only(tmp_path):
    scraper = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "obs"}}}
    job, settings = job_with(tmp_path, {"enabled": True, "scrapers": [scraper]})
    policy = trainer_network_policy(job, [Endpoint("10.0.0.1", 6443)], [], metrics.ingress_rules(settings))
    assert policy["spec"]["ingress"] == [{"from": [scraper], "ports": [{"protocol": "TCP", "port": 9090}]}]
    _, defaults = job_with(tmp_path, {"enabled": True})
    assert metrics.ingress_rules(defaults)[0]["from"] == metrics.DEFAULT_SCRAPERS
    _, none = job_with(tmp_path, {"enabled": True, "scrapers": []})
    assert metrics.ingress_rules(none) == []  # no rule: the policy still admits no ingress


def test_the_pod_monitor_selects_the_jobs_pods_by_the_named_port_with_the_given_labels(tmp_path):
    job, settings = job_with(
        tmp_path, {"enabled": True, "pod_monitor": True, "pod_monitor_labels": {"release": "kps"}, "interval": "15s"}
    )
    monitor = metrics.pod_monitor(job, settings)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "PodMonitor"
    assert monitor["metadata"]["name"] == "trainer-t" and monitor["metadata"]["namespace"] == "rl"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["selector"] == {"matchLabels": {"batch.kubernetes.io/job-name": "trainer-t"}}
    assert monitor["spec"]["podMetricsEndpoints"] == [{"port": "metrics", "path": "/metrics", "interval": "15s"}]


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("on", "metrics is a mapping"),
        ({"enabled": "yes"}, "metrics.enabled is true or false"),
        ({"port": 70000}, "metrics.port is a port number"),
        ({"scrapers": [{"podSelecter": {}}]}, "unknown field(s) podSelecter in metrics.scrapers"),
        ({"pod_monitor_labels": {"release": 1}}, "pod_monitor_labels maps label names to strings"),
        ({"portt": 9090}, "unknown field(s) metrics.portt"),
    ],
)
def test_a_wrong_metrics_mapping_is_refused_with_what_to_write(tmp_path, value, problem):
    with pytest.raises(InputError) as refused:
        load_spec(written(tmp_path, {"metrics": value}), {})
    assert problem in str(refused.value)


def test_dry_run_shows_the_job_the_policys_ingress_and_the_pod_monitor(tmp_path, capsys):
    spec_file = written(tmp_path, {"metrics": {"enabled": True, "pod_monitor": True}})
    code = main(["-n", "rl", "submit", "-f", str(spec_file), "--dry-run", "-o", "json", "--", *COMMAND])
    assert code == EXIT_OK
    job, policy, monitor = json.loads(capsys.readouterr().out)["items"]
    assert job["kind"] == "Job" and policy["kind"] == "NetworkPolicy" and monitor["kind"] == "PodMonitor"
    assert policy["spec"]["ingress"][0]["ports"] == [{"protocol": "TCP", "port": 9090}]


class FakeCustomObjects:
    def __init__(self, status: int | None) -> None:
        self.status, self.created = status, []

    def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        if self.status is not None:
            raise ApiException(status=self.status, reason="Not Found")
        self.created.append((group, version, namespace, plural, body))


@pytest.mark.parametrize(("status", "problem"), [(None, None), (404, "no PodMonitor API")])
def test_the_pod_monitor_is_owned_by_the_job_and_a_missing_crd_is_reported_not_raised(
    tmp_path, monkeypatch, status, problem
):
    fake = FakeCustomObjects(status)
    monkeypatch.setattr(client, "CustomObjectsApi", lambda api: fake)
    job, settings = job_with(tmp_path, {"enabled": True, "pod_monitor": True})
    created_job = client.V1Job(metadata=client.V1ObjectMeta(name="trainer-t", uid="uid-7"))
    session = SimpleNamespace(api=None, namespace="rl")
    said = pod_monitor.create_pod_monitor(session, metrics.pod_monitor(job, settings), created_job)  # type: ignore[arg-type]
    if problem is None:
        assert said is None
        [(_, _, namespace, plural, body)] = fake.created
        assert (namespace, plural) == ("rl", "podmonitors")
        assert body["metadata"]["ownerReferences"] == [
            {"apiVersion": "batch/v1", "kind": "Job", "name": "trainer-t", "uid": "uid-7"}
        ]
    else:
        assert problem in said
