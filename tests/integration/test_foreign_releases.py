"""Releases of another chart on the local cluster: `down`, `rollback` and `reap` refuse a release whose chart is not
areal-workers, and acting on a trial's own release leaves another chart's StatefulSet alone even when it carries
the trial's app.kubernetes.io/instance label (Argo CD labels what it syncs with it). Release names helm accepts but
the chart's Services cannot carry are refused before any release exists."""

from __future__ import annotations

import json
import os
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig
from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE
from areal_workers.config import BUNDLED_CHART, ConfigError
from areal_workers.runtime.lease import lease_body
from areal_workers.runtime.lease_record import OBSERVED_ANNOTATION, Observation, observation_text, record_of
from clusterlib import job

FOREIGN_CHART = "other-app"
STATEFULSET = """\
{{- define "labels" -}}
app.kubernetes.io/name: other-app
app.kubernetes.io/instance: {{ .Values.instance | default .Release.Name | quote }}
{{- end -}}
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: {{ printf "%s-db" .Release.Name | quote }}
  labels: {{- include "labels" . | nindent 4 }}
spec:
  replicas: {{ int .Values.replicas }}
  podManagementPolicy: Parallel
  serviceName: {{ printf "%s-db" .Release.Name | quote }}
  selector:
    matchLabels: {{- include "labels" . | nindent 6 }}
  template:
    metadata:
      labels: {{- include "labels" . | nindent 8 }}
      annotations:
        generation: {{ .Values.generation | quote }}
    spec:
      nodeSelector:
        example.com/no-such-node: "true"  # never scheduled: Pending, never Ready, no image needed
      containers:
        - name: db
          image: registry.invalid/db:1
"""


@pytest.fixture
def foreign_chart(tmp_path: Path) -> Path:
    """A tiny chart of another name: one StatefulSet whose instance label can be set to any release's."""
    chart = tmp_path / FOREIGN_CHART
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text(yaml.safe_dump({"apiVersion": "v2", "name": FOREIGN_CHART, "version": "0.1.0"}))
    (chart / "values.yaml").write_text(yaml.safe_dump({"replicas": 2, "instance": "", "generation": "1"}))
    (chart / "templates" / "statefulset.yaml").write_text(STATEFULSET)
    return chart


@pytest.fixture
def cli(kubeconfig, namespace, helm_executable, capsys, monkeypatch):
    """areal-workers in this process, aimed at the test's namespace; returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("PATH", f"{Path(helm_executable).parent}{os.pathsep}{os.environ['PATH']}")  # helm

    def call(*argv: str) -> tuple[int, str, str]:
        code = main(["--kubeconfig", str(kubeconfig), "-n", namespace, *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


@pytest.fixture
def helm(helm_executable, kubeconfig, namespace):
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [helm_executable, "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args)} failed:\n{proc.stderr}")
        return proc

    return run


def releases(helm) -> dict[str, dict]:
    return {entry["name"]: entry for entry in json.loads(helm("list", "-a", "-o", "json").stdout)}


def revisions(helm, release: str) -> list[int]:
    return [entry["revision"] for entry in json.loads(helm("history", release, "-o", "json").stdout)]


def install_foreign(helm, chart: Path, release: str, **values: str) -> None:
    settings = [f"{key}={value}" for key, value in values.items()]
    helm("upgrade", "--install", release, str(chart), *(arg for s in settings for arg in ("--set-string", s)))


def statefulset_state(kube_client, namespace: str, name: str) -> tuple[int, list[str]]:
    """The StatefulSet's replicas and its pods' uids (raises 404 when it is gone)."""
    apps, core = client.AppsV1Api(kube_client), client.CoreV1Api(kube_client)
    statefulset = apps.read_namespaced_stateful_set(name, namespace)
    selector = ",".join(f"{k}={v}" for k, v in statefulset.spec.selector.match_labels.items())
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    return statefulset.spec.replicas, sorted(pod.metadata.uid for pod in pods)


def expire_lease(kube_client, namespace: str, release: str) -> None:
    """A Lease naming `release` whose trainer stopped renewing it an hour ago, as a reaper's look then saw it."""
    old = datetime.now(UTC) - timedelta(hours=1)
    body = lease_body(release, "gone/1", 1, old)
    body.metadata.annotations = {OBSERVED_ANNOTATION: observation_text(Observation(record_of(body), old))}
    client.CoordinationV1Api(kube_client).create_namespaced_lease(namespace, body)


# --- a release of another chart, named directly --------------------------------------------------------------


def test_down_refuses_a_release_of_another_chart(cli, helm, foreign_chart):
    install_foreign(helm, foreign_chart, "other")
    code, _, err = cli("down", "--release", "other", "--yes")
    assert code == EXIT_USAGE, err
    assert "cannot delete other: release other" in err and f"chart '{FOREIGN_CHART}', not 'areal-workers'" in err
    assert releases(helm)["other"]["status"] == "deployed"


def test_rollback_refuses_a_release_of_another_chart(cli, helm, foreign_chart):
    install_foreign(helm, foreign_chart, "other")
    install_foreign(helm, foreign_chart, "other", generation="2")
    code, _, err = cli("rollback", "--release", "other", "--no-wait")
    assert code == EXIT_USAGE, err
    assert "cannot roll back other" in err and f"'{FOREIGN_CHART}'" in err
    assert revisions(helm, "other") == [1, 2]


def test_rollback_refuses_a_revision_of_another_chart_under_a_reused_name(cli, helm, foreign_chart):
    """The name was another chart's (revision 1) before this chart took it over (revision 2): returning to
    revision 1 would hand the name back to that chart's objects."""
    install_foreign(helm, foreign_chart, "reused")
    helm("upgrade", "reused", str(BUNDLED_CHART))
    code, _, err = cli("rollback", "1", "--release", "reused", "--no-wait")
    assert code == EXIT_USAGE, err
    assert "cannot roll back reused: revision 1 of release reused" in err and f"'{FOREIGN_CHART}'" in err
    assert revisions(helm, "reused") == [1, 2]


def test_reap_refuses_a_release_of_another_chart_named_by_a_lease(cli, helm, foreign_chart, kube_client, namespace):
    install_foreign(helm, foreign_chart, "other")
    expire_lease(kube_client, namespace, "other")
    code, _, err = cli("reap")
    assert code == EXIT_PROBLEM, err
    assert "cannot reap other" in err and "release is left as it is" in err
    assert releases(helm)["other"]["status"] == "deployed"


# --- a trial's own release next to another chart's objects with its instance label --------------------------


@pytest.fixture
def shadowed_trial(make_scheduler, helm, foreign_chart, kube_client, namespace):
    """A trial with two revisions (actor, then actor scaled) and another chart's StatefulSet labelled with the
    trial's release as its instance; returns (release, foreign StatefulSet name, its state)."""
    scheduler = make_scheduler(lease_grace_seconds=0)  # no trainer's Lease: `rollback` and `down` act on it
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    scheduler.scale_workers("actor", 2)
    install_foreign(helm, foreign_chart, "shadow", instance=scheduler.release)
    name = "shadow-db"
    # The StatefulSet controller creates its two pods after helm returns: the state to keep is the one with both.
    deadline = time.monotonic() + 60
    while len(statefulset_state(kube_client, namespace, name)[1]) < 2:
        assert time.monotonic() < deadline, "the other chart's StatefulSet never had its 2 pods"
        time.sleep(0.2)
    return scheduler, name, statefulset_state(kube_client, namespace, name)


def test_rollback_and_down_of_a_trial_leave_another_charts_statefulset_with_its_instance_label(
    cli,
    shadowed_trial,
    helm,
    kube_client,
    namespace,
):
    scheduler, name, before = shadowed_trial
    code, _, err = cli("rollback", "--release", scheduler.release, "--no-wait")
    assert code == EXIT_OK, err
    assert statefulset_state(kube_client, namespace, name) == before
    code, out, err = cli("down", "--release", scheduler.release, "--yes", "--rank-zero-last", "-o", "json")
    assert code == EXIT_OK, err
    assert not any(pod.startswith(name) for pod in json.loads(out)["deleted_pods"])
    assert statefulset_state(kube_client, namespace, name) == before
    assert scheduler.release not in releases(helm) and releases(helm)["shadow"]["status"] == "deployed"


def test_reaping_a_trial_leaves_another_charts_statefulset_with_its_instance_label(
    cli,
    shadowed_trial,
    helm,
    kube_client,
    namespace,
):
    scheduler, name, before = shadowed_trial
    scheduler.close()  # the trainer is gone; its Lease is replaced by one long expired
    client.CoordinationV1Api(kube_client).delete_collection_namespaced_lease(
        namespace, label_selector=f"areal-workers.dev/lease-of={scheduler.release}"
    )
    expire_lease(kube_client, namespace, scheduler.release)
    code, _, err = cli("reap", "--timeout", "2m")
    assert code == EXIT_OK, err  # not a time-out waiting for the other chart's Pending pods
    assert scheduler.release not in releases(helm)
    assert statefulset_state(kube_client, namespace, name) == before


# --- release names helm accepts but the chart's Services cannot carry ---------------------------------------


@pytest.mark.parametrize("release", ["1abc", "a.b"])
def test_a_release_name_the_services_cannot_carry_is_refused_before_any_release_exists(
    release,
    cli,
    helm,
    helm_executable,
    kubeconfig,
    namespace,
    tmp_path,
):
    with pytest.raises(ConfigError):
        KubernetesScheduler(
            config=KubernetesSchedulerConfig(
                namespace=namespace, kubeconfig=str(kubeconfig), helm_executable=helm_executable, release_name=release
            ),
            experiment_name="exp",
            trial_name="t",
        )
    job_file = tmp_path / "job.yaml"
    job_file.write_text(yaml.safe_dump({"experiment": "exp", "trial": "t", "jobs": [{"role": "actor", "replicas": 1}]}))
    code, _, err = cli("up", "-f", str(job_file), "--release", release, "--no-wait")
    assert code == EXIT_USAGE and "DNS-1035" in err, err
    # helm itself, given the chart directly: the chart's preflight refuses before anything is applied
    proc = helm(
        "install", release, str(BUNDLED_CHART), "--set", "experiment=exp,trial=t,roles.actor.replicas=1", check=False
    )
    assert proc.returncode != 0 and f'release name "{release}" cannot start' in proc.stderr
    assert releases(helm) == {}
