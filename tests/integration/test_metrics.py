"""The scheduler's Prometheus endpoint on the local cluster: a scheduler with metrics_address set goes through a real
failed update and its rollback, and what it serves over HTTP is valid exposition (prometheus_client's parser) whose
counters moved by exactly what happened: one rollback, one worker failure by its diagnosed reason, the waits by
outcome, the guard requests, and each role's workers ready again at the revision the release rolled back to. And
`submit` with a submit file's `metrics`: what it renders is accepted by the real apiserver."""

from __future__ import annotations

import asyncio
import os
import urllib.request

import pytest
import yaml
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from areal_workers import WorkerFailedError
from areal_workers.runtime.metrics import failure_kind
from clusterlib import job, spec, submit_trainer
from localkube.rbac import apply_rbac
from repo_paths import REPO

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(scheduler) -> Samples:
    host, port = scheduler.observer.address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)  # raises on text that is not valid exposition
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def test_counters_move_across_a_real_failed_update_and_its_rollback(make_scheduler):
    scheduler = make_scheduler(metrics_address="127.0.0.1:0")
    assert scheduler.observer.address[0] == "127.0.0.1"
    release = scheduler.release
    scheduler.create_workers(job("actor", 2))
    scheduler.create_workers(job("critic", 1))
    scheduler.get_workers("actor")
    scheduler.get_workers("critic")
    asyncio.run(scheduler.set_worker_env("actor/1", {"RANK": "1"}))  # through the guard: /set_env

    before = scrape(scheduler)
    assert value(before, "areal_workers_workers_ready", release=release, role="actor") == 2
    assert value(before, "areal_workers_release_revision", release=release) == 2
    assert value(before, "areal_workers_release_ready_revision", release=release) == 2
    assert value(before, "areal_workers_guard_request_seconds_count", release=release, endpoint="/set_env") == 1
    assert 0 <= value(before, "areal_workers_lease_renewal_age_seconds", release=release) < 60

    scheduler.update_workers(job("actor", 2, [spec(cmd="python -c 'import sys; sys.exit(4)'")]))
    with pytest.raises(WorkerFailedError) as failed:
        scheduler.get_workers("actor", timeout=60)
    reason = failure_kind(failed.value)
    assert reason not in ("Other", "Timeout"), failed.value  # the diagnosis' reason word, e.g. CrashLoopBackOff
    scheduler.get_workers("actor", timeout=60)
    after = scrape(scheduler)

    def moved(name: str, **labels: str) -> float:
        return value(after, name, release=release, **labels) - value(before, name, release=release, **labels)

    assert moved("areal_workers_rollbacks_total", action="rolled_back", reason=reason) == 1
    assert sum(v for (name, _), v in after.items() if name == "areal_workers_rollbacks_total") == 1
    assert moved("areal_workers_worker_failures_total", role="actor", reason=reason) == 1
    assert moved("areal_workers_wait_seconds_count", operation="get_workers", role="actor", outcome="failed") == 1
    assert moved("areal_workers_wait_seconds_count", operation="get_workers", role="actor", outcome="ok") == 1
    assert moved("areal_workers_wait_seconds_count", operation="update_workers", role="actor", outcome="ok") == 1
    # create, create, the failed update, the rollback to revision 2: the rollback's revision is the all-ready one.
    assert value(after, "areal_workers_release_revision", release=release) == 4
    assert value(after, "areal_workers_release_ready_revision", release=release) == 4
    for role, count in (("actor", 2), ("critic", 1)):
        assert value(after, "areal_workers_workers_desired", release=release, role=role) == count
        assert value(after, "areal_workers_workers_ready", release=release, role=role) == count

    scheduler.delete_workers()
    scheduler.close()
    with pytest.raises(OSError):  # the endpoint goes with the scheduler
        scrape(scheduler)


@pytest.fixture
def trainer_namespace(namespace, pod_runner, kubeconfig, monkeypatch):
    """The namespace with rbac/ applied (the trainer's ServiceAccount), its pods run by a podrunner of the test."""
    apply_rbac(kubeconfig, namespace)
    pod_runner(namespace)
    monkeypatch.setenv("PATH", f"{REPO / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    return namespace


def test_submit_with_metrics_creates_the_port_the_scrapers_rule_and_reports_a_missing_pod_monitor_api(
    trainer_namespace, kubeconfig, kube_client, capsys, tmp_path
):
    """On the real apiserver: the Job with its named port and annotations and the policy with its one ingress rule are
    accepted; the local cluster has no Prometheus Operator, so the PodMonitor is reported missing and the trainer runs
    on (the local trainer environment lacks the metrics extra, so this trainer does not start a scheduler)."""
    namespace = trainer_namespace
    submit_file = tmp_path / "trainer.yaml"
    scraper = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "obs"}}}
    submit_file.write_text(
        yaml.safe_dump({"metrics": {"enabled": True, "port": 9464, "pod_monitor": True, "scrapers": [scraper]}})
    )
    command = ["python", "-c", "import os; print('metrics at', os.environ['AREAL_K8S_METRICS_ADDRESS'])"]
    code, out, err = submit_trainer(
        capsys, kubeconfig, namespace, "-f", str(submit_file), "--name", "trainer-metrics", "--", *command
    )
    assert code == 0, err
    [pod] = (
        client.CoreV1Api(kube_client).list_namespaced_pod(namespace, label_selector="job-name=trainer-metrics").items
    )
    assert pod.status.pod_ip, "the trainer pod has no IP"
    assert f"metrics at {pod.status.pod_ip}:9464" in out  # the pod's own address (downward API), not every interface
    assert "PodMonitor trainer-metrics not created: the cluster has no PodMonitor API" in err
    job = client.BatchV1Api(kube_client).read_namespaced_job("trainer-metrics", namespace)
    template = job.spec.template
    assert template.metadata.annotations["prometheus.io/port"] == "9464"
    [port] = template.spec.containers[0].ports
    assert (port.name, port.container_port) == ("metrics", 9464)
    policy = client.NetworkingV1Api(kube_client).read_namespaced_network_policy("trainer-metrics", namespace)
    [rule] = policy.spec.ingress
    assert [p.port for p in rule.ports] == [9464]
    assert rule._from[0].namespace_selector.match_labels == {"kubernetes.io/metadata.name": "obs"}
