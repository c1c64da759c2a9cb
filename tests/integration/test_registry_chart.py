"""The release pulled from a real OCI registry: `make release`'s artifacts built from this checkout, the chart pushed
to the local cluster's registry (distribution's registry, TLS from the cluster's CA, a password), then installed from
`oci://` by plain helm and by KubernetesScheduler with `chart="oci://..."` and `chart_version`, which creates,
upgrades and rolls back a trial from it. A wrong password gets the registry's 401. `make release REGISTRY=...`
pushes the chart and the reaper image."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from kubernetes import client

from areal_workers import Job, SchedulerError, __version__
from areal_workers.cli.main import main
from clusterlib import spec
from distkit.publish import Publisher, Registry
from localkube.addons import registry as registry_addon
from localkube.cluster import LocalCluster
from repo_paths import REPO, TOOLS_BIN

pytestmark = [
    pytest.mark.late,  # after the fixed_names real-node tests: it pushes the chart, as the deployment guide's test does
    pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="the registry is the local cluster's"),
]
HELM = str(TOOLS_BIN / "helm")


@pytest.fixture(scope="module")
def published(kubeconfig, tmp_path_factory) -> tuple[str, Publisher, subprocess.CompletedProcess]:
    """(chart reference, publisher, the run): this checkout's release built and pushed, the chart and the reaper image,
    by the Makefile's own recipe with the local registry's account (`make release REGISTRY=...`: one build serves
    every test here, and the docs' `make release`); the publisher holds the login the tests' helm uses. The registry
    is started when the cluster runs without it (`make test` starts it with `up --registry`)."""
    cluster = LocalCluster()
    registry_addon.ensure(cluster, 60.0)
    credentials = cluster.registry_credentials()
    workdir = tmp_path_factory.mktemp("release")
    registry = Registry(credentials.address, credentials.username, credentials.password, credentials.ca_file)
    publisher = Publisher(registry, workdir)
    password = workdir / "password"
    password.write_text(registry.password or "")
    result = subprocess.run(
        ["make", "-s", "release", f"REGISTRY={registry.address}", f"REGISTRY_USER={registry.username}"]
        + [f"REGISTRY_PASSWORD_FILE={password}", f"REGISTRY_CA={registry.ca_file}"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return f"oci://{registry.address}/charts/areal-workers", publisher, result


@pytest.fixture
def registry_env(published, monkeypatch) -> dict[str, str]:
    """helm's registry login and the CA bundle for every helm this process starts (the adapter's included)."""
    _, publisher, _ = published
    monkeypatch.setenv("HELM_REGISTRY_CONFIG", str(publisher.helm_config))
    monkeypatch.setenv("SSL_CERT_FILE", publisher.env["SSL_CERT_FILE"])
    return dict(os.environ)


def test_helm_installs_the_released_chart_from_the_registry(published, registry_env, kubeconfig, namespace):
    reference, _, _ = published
    install = subprocess.run(
        [HELM, "install", "from-oci", reference, "--version", __version__, "--kubeconfig", str(kubeconfig)]
        + ["-n", namespace, "-f", str(REPO / "examples" / "values-example.yaml"), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=300,
        env=registry_env,
    )
    assert install.returncode == 0, install.stderr
    release = json.loads(install.stdout)
    assert release["chart"]["metadata"]["name"] == "areal-workers"
    assert release["chart"]["metadata"]["version"] == __version__
    assert "StatefulSet" in release["manifest"]


def test_a_wrong_password_gets_the_registrys_refusal(published, tmp_path):
    _, publisher, _ = published
    login = subprocess.run(
        [HELM, "registry", "login", publisher.registry.address, "--username", publisher.registry.username or ""]
        + ["--password-stdin", "--ca-file", str(publisher.registry.ca_file), "--registry-config", str(tmp_path / "c")],
        input="not-the-password",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert login.returncode != 0
    assert "401" in login.stderr and "unauthorized" in login.stderr, login.stderr


def test_the_scheduler_creates_upgrades_and_rolls_back_a_trial_from_the_registry(
    published, registry_env, make_scheduler, kubeconfig, namespace, capsys
):
    reference, _, _ = published
    # No trainer's Lease: the command's rollback would wait for a live trainer to stop (test_cli.py has that case).
    scheduler = make_scheduler(chart=reference, chart_version=__version__, lease_grace_seconds=0)
    scheduler.create_workers(Job(role="actor", replicas=1, tasks=[spec(cpu=1, mem=1)]))
    scheduler.create_workers(Job(role="critic", replicas=1, tasks=[spec(cpu=1, mem=1)]))
    release = scheduler.release
    history = subprocess.run(
        [HELM, "history", release, "-n", namespace, "--kubeconfig", str(kubeconfig), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    revisions = json.loads(history.stdout)
    assert [r["chart"] for r in revisions] == [f"areal-workers-{__version__}"] * len(revisions)
    assert len(revisions) >= 2
    code = main(["--kubeconfig", str(kubeconfig), "-n", namespace, "--release", release, "rollback", "1"])
    assert code == 0, capsys.readouterr()
    values = subprocess.run(
        [HELM, "get", "values", release, "-n", namespace, "--kubeconfig", str(kubeconfig), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert set(json.loads(values.stdout)["roles"]) == {"actor"}


def test_a_chart_version_the_registry_lacks_fails_before_anything_is_installed(
    published, registry_env, make_scheduler, kube_client, namespace
):
    """The scheduler's chart really comes from the registry: a version never pushed there is an error naming it."""
    reference, _, _ = published
    scheduler = make_scheduler(chart=reference, chart_version="99.0.0")
    with pytest.raises(SchedulerError) as raised:
        scheduler.create_workers(Job(role="actor", replicas=1, tasks=[spec(cpu=1, mem=1)]))
    assert "99.0.0" in str(raised.value) and "not found" in str(raised.value), raised.value
    assert client.AppsV1Api(kube_client).list_namespaced_stateful_set(namespace).items == []


def test_make_release_pushes_the_chart_and_the_reaper_image(published):
    """The Makefile's own recipe with the local registry's account: both artifacts land, at the release's version,
    with the digests the registry reports."""
    _, publisher, result = published
    registry = publisher.registry
    pushed = dict(line.split() for line in result.stdout.splitlines() if " sha256:" in line)
    reaper = f"{registry.address}/areal-workers/reaper:{__version__}"
    assert set(pushed) == {f"oci://{registry.address}/charts/areal-workers", reaper}, result.stdout
    digest = subprocess.run(
        [str(TOOLS_BIN / "crane"), "digest", reaper], capture_output=True, text=True, env=publisher.env, timeout=120
    )
    assert digest.returncode == 0, digest.stderr
    assert digest.stdout.strip() == pushed[reaper]
