"""Images pulled for real: the real node's kubelet and containerd pull the worker image from the local cluster's
registry (distribution's, TLS from the cluster's CA, a password) with the pull policy and pull Secrets the
scheduler's config gives, and the chart's reaper CronJob pulls the release's reaper image. A missing tag, no
credentials and a wrong password each fail as the real kubelet reports them (ErrImagePull, then ImagePullBackOff) and
reach AReaL as WorkerFailedError with the advice for that cause. The digest a revision's pods ran is recorded with
the revision, so a tag moved between two revisions shows in the history. The worker image is the one the real node
runs everywhere else (tools/realnode/images.py), pushed by crane."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import uuid

import pytest
from kubernetes import client

from areal_workers import KubernetesScheduler, __version__, naming
from areal_workers.cli.main import main
from areal_workers.errors import WorkerFailedError
from clusterlib import job
from distkit.artifacts import build_python
from distkit.images import REAPER, build_reaper
from distkit.publish import Publisher, Registry
from localkube.addons import registry as registry_addon
from localkube.cluster import LocalCluster
from localkube.rbac import apply_rbac
from real_node_trials import close_all, scheduler_factory, task
from realnode.images import worker_image
from realnode.values import placement
from repo_paths import AREAL_WORKER_ENV, REPO, TOOLS_BIN

pytestmark = [
    pytest.mark.serial_cluster,
    pytest.mark.real_node,
    pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="the local cluster's real node only"),
]

CHART = REPO / "charts" / "areal-workers"
LOGIN_SECRET = "registry-login"
WRONG_SECRET = "registry-wrong-password"
FAILS_WITHIN = 240.0  # a pull fails in a second; the kubelet's first back-off and a loaded machine take longer


@pytest.fixture(scope="module")
def publisher(real_node, tmp_path_factory) -> Publisher:
    cluster = LocalCluster()
    registry_addon.ensure(cluster, 60.0)
    credentials = cluster.registry_credentials()
    registry = Registry(credentials.address, credentials.username, credentials.password, credentials.ca_file)
    return Publisher(registry, tmp_path_factory.mktemp("image-pushes"))


def push_worker(publisher: Publisher) -> tuple[str, str]:
    """(reference, digest) of the real node's worker image pushed under a tag of this test's own."""
    return publisher.push_image(worker_image(AREAL_WORKER_ENV), "areal-worker", f"pull-{uuid.uuid4().hex[:8]}")


def move_tag(publisher: Publisher, reference: str) -> str:
    """Points `reference`'s tag at a new image (the same layers, one more label); returns its digest."""
    result = subprocess.run(
        [str(TOOLS_BIN / "crane"), "mutate", reference, "--label", f"areal.io/build={uuid.uuid4().hex[:8]}"],
        capture_output=True,
        text=True,
        env=publisher.env,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().rpartition("@")[2]


def docker_config(address: str, username: str, password: str) -> str:
    auth = base64.b64encode(f"{username}:{password}".encode()).decode()
    return json.dumps({"auths": {address: {"username": username, "password": password, "auth": auth}}})


@pytest.fixture(scope="module")
def namespace(publisher, kube_client):
    """A namespace of this module's own with two pull Secrets: the registry's account, and a wrong password."""
    core = client.CoreV1Api(kube_client)
    name = f"t-pulls-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    registry = publisher.registry
    for secret, password in ((LOGIN_SECRET, registry.password or ""), (WRONG_SECRET, "not-the-password")):
        core.create_namespaced_secret(
            name,
            client.V1Secret(
                metadata=client.V1ObjectMeta(name=secret),
                type="kubernetes.io/dockerconfigjson",
                string_data={".dockerconfigjson": docker_config(registry.address, registry.username or "", password)},
            ),
        )
    yield name
    core.delete_namespace(name, propagation_policy="Background")


@pytest.fixture
def make(namespace, kubeconfig, helm_executable, tmp_path):
    make_scheduler, made = scheduler_factory(kubeconfig, helm_executable, namespace, tmp_path)
    trials = iter(range(100))

    def build(**overrides) -> KubernetesScheduler:
        return make_scheduler(trial=f"pull{next(trials)}-{uuid.uuid4().hex[:4]}", **overrides)

    yield build
    close_all(made)


def role_pods(kube_client, namespace: str, scheduler: KubernetesScheduler, role: str) -> list[client.V1Pod]:
    selector = f"{naming.release_selector(scheduler.release)},{naming.LABEL_ROLE}={role}"
    return client.CoreV1Api(kube_client).list_namespaced_pod(namespace, label_selector=selector).items


def worker_image_ids(kube_client, namespace: str, scheduler: KubernetesScheduler, role: str) -> list[str]:
    pods = role_pods(kube_client, namespace, scheduler, role)
    return sorted(s.image_id for p in pods for s in p.status.container_statuses or [] if s.name == "worker")


def pod_events(kube_client, namespace: str, scheduler: KubernetesScheduler, role: str) -> list[str]:
    core = client.CoreV1Api(kube_client)
    names = {p.metadata.name for p in role_pods(kube_client, namespace, scheduler, role)}
    events = core.list_namespaced_event(namespace).items
    return [f"{e.reason}: {e.message}" for e in events if e.involved_object.name in names]


def failure_of(scheduler: KubernetesScheduler) -> str:
    scheduler.create_workers(job("actor", 1, [task()]))
    with pytest.raises(WorkerFailedError) as raised:
        scheduler.get_workers("actor", timeout=FAILS_WITHIN)
    return str(raised.value)


def test_a_pull_secret_pulls_the_image_and_the_revision_records_the_digest_the_node_ran(
    publisher, namespace, make, kube_client, kubeconfig, capsys
):
    reference, digest = push_worker(publisher)
    scheduler = make(image=reference, image_pull_policy="Always", image_pull_secrets=(LOGIN_SECRET,))
    scheduler.create_workers(job("actor", 1, [task()]))
    assert len(scheduler.get_workers("actor")) == 1
    repository = reference.rpartition(":")[0]
    assert worker_image_ids(kube_client, namespace, scheduler, "actor") == [f"{repository}@{digest}"]
    assert any(e.startswith("Pulling:") for e in pod_events(kube_client, namespace, scheduler, "actor"))

    moved = move_tag(publisher, reference)
    assert moved != digest
    scheduler.scale_workers("actor", 2)  # a new revision; its new pod pulls the tag again (Always)
    assert len(scheduler.get_workers("actor")) == 2
    both = sorted([f"{repository}@{digest}", f"{repository}@{moved}"])
    assert worker_image_ids(kube_client, namespace, scheduler, "actor") == both

    first, second = (entry["images"] for entry in scheduler.history())
    assert first == {"actor": [f"{repository}@{digest}"]}
    assert second == {"actor": both}  # the tag moved between the revisions: pod 0 runs the old image
    capsys.readouterr()
    arguments = ["--kubeconfig", str(kubeconfig), "-n", namespace, "--release", scheduler.release, "history"]
    assert main(arguments) == 0
    table = capsys.readouterr().out
    assert f"actor=areal-worker@{digest[:19]}" in table and f"actor=areal-worker@{moved[:19]}" in table


def test_if_not_present_runs_the_image_the_node_has_without_asking_the_registry(
    publisher, namespace, make, kube_client
):
    reference, digest = push_worker(publisher)
    pulling = make(image=reference, image_pull_policy="IfNotPresent", image_pull_secrets=(LOGIN_SECRET,))
    pulling.create_workers(job("actor", 1, [task()]))
    pulling.get_workers("actor")
    assert any(e.startswith("Pulling:") for e in pod_events(kube_client, namespace, pulling, "actor"))

    present = make(image=reference, image_pull_policy="IfNotPresent")  # no credentials: the node has it
    present.create_workers(job("actor", 1, [task()]))
    present.get_workers("actor")
    events = pod_events(kube_client, namespace, present, "actor")
    assert any("already present on machine" in e for e in events), events
    assert not any(e.startswith("Pulling:") for e in events), events
    repository = reference.rpartition(":")[0]
    assert worker_image_ids(kube_client, namespace, present, "actor") == [f"{repository}@{digest}"]


def test_a_missing_tag_is_diagnosed_as_a_missing_image(publisher, make):
    reference = f"{publisher.registry.address}/areal-workers/areal-worker:never-pushed"
    failure = failure_of(make(image=reference, image_pull_policy="Always", image_pull_secrets=(LOGIN_SECRET,)))
    assert "ErrImagePull" in failure or "ImagePullBackOff" in failure, failure
    assert "not found" in failure, failure  # containerd's words, from the kubelet's event
    assert f"image {reference} does not exist: check image.repository and image.tag" in failure, failure


@pytest.mark.parametrize("secrets", [(), (WRONG_SECRET,)], ids=["no-pull-secret", "wrong-password"])
def test_a_refused_pull_is_diagnosed_as_missing_credentials(publisher, make, secrets):
    reference, _ = push_worker(publisher)
    failure = failure_of(make(image=reference, image_pull_policy="Always", image_pull_secrets=secrets))
    assert "ErrImagePull" in failure or "ImagePullBackOff" in failure, failure
    assert "401 Unauthorized" in failure or "unauthorized" in failure.lower(), failure
    assert f"the registry refused {reference}" in failure, failure
    if secrets:
        assert f"with the login of image pull Secret(s) {WRONG_SECRET}" in failure, failure
    else:
        assert "the pod has no image pull Secret" in failure and "image.pullSecrets" in failure, failure


def test_the_released_reaper_image_is_pulled_and_runs_on_the_real_node(
    publisher, namespace, kube_client, kubeconfig, helm_executable, tmp_path
):
    """`make release`'s reaper image, pushed as the release pushes it, run by the chart's CronJob at its default tag
    (the chart's version) with the pull Secret. The real node's pods have no route to the apiserver (it listens on
    127.0.0.1 only), so the Job shows what the image holds; reaping itself runs in test_reaper_cronjob.py."""
    wheel, _ = build_python(tmp_path / "dist")
    reference, digest = publisher.push_image(build_reaper(wheel, tmp_path, __version__), REAPER, __version__)
    repository = reference.rpartition(":")[0]
    apply_rbac(kubeconfig, namespace, policy=False)  # the areal-reaper ServiceAccount (rbac/reaper.yaml)
    reaper = {
        "enabled": True,
        "schedule": "0 0 1 1 *",  # never during the test: a Job is made from it
        "serviceAccountName": "areal-reaper",
        "image": {"repository": repository, "pullPolicy": "Always"},
        "command": ["sh", "-c", "areal-workers --version && helm version --short"],
        **placement(),
    }
    values = tmp_path / "reaper.json"
    values.write_text(json.dumps({"roles": {}, "image": {"pullSecrets": [LOGIN_SECRET]}, "reaper": reaper}))
    helm = [helm_executable, "--kubeconfig", str(kubeconfig), "-n", namespace]
    subprocess.run([*helm, "install", "reaper", str(CHART), "-f", str(values)], check=True, timeout=300)
    try:
        kubectl = [str(TOOLS_BIN / "kubectl"), "--kubeconfig", str(kubeconfig), "-n", namespace]
        run = [*kubectl, "create", "job", "reap-now", "--from=cronjob/reaper-areal-workers-reaper"]
        subprocess.run(run, check=True, capture_output=True, timeout=60)
        waited = subprocess.run(
            [*kubectl, "wait", "--for=condition=complete", "job/reap-now", "--timeout=300s"],
            capture_output=True,
            text=True,
            timeout=330,
        )
        logs = subprocess.run([*kubectl, "logs", "job/reap-now"], capture_output=True, text=True, timeout=60)
        assert waited.returncode == 0, (waited.stderr, logs.stdout, logs.stderr)
        assert f"areal-workers {__version__} (chart areal-workers {__version__}" in logs.stdout, logs.stdout
        assert "v3." in logs.stdout, logs.stdout  # helm's version: the image's own helm ran
        pods = client.CoreV1Api(kube_client).list_namespaced_pod(namespace, label_selector="job-name=reap-now").items
        assert [s.image_id for p in pods for s in p.status.container_statuses] == [f"{repository}@{digest}"]
    finally:
        subprocess.run([*helm, "uninstall", "reaper", "--wait"], capture_output=True, timeout=300)
