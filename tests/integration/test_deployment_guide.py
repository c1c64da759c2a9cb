"""The deployment guide (docs/en/deployment.md), every command in order, as a platform engineer runs it: this
checkout's chart pushed to the local cluster's registry (TLS from the cluster's CA, a password) and pulled from there
by helm, the worker image pulled from there by the real node's kubelet with the pull Secret the guide creates, the
guide's claim bound to a volume of the one node, its smoke release tested by `helm test` on the real node.

What differs from the reader's cluster, and nothing else: REGISTRY, REGISTRY_USER and registry-password.txt are the
local registry's (the guide's `registry.example.com/areal` in its files too), VERSION is this checkout's, the claim's
volume is a host directory (claim_volume), and the guide's platform-values.yaml gets what the real node's pods need
on top (its label and taint, and AReaL's environment from the host: tools/realnode/images.py says why).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from areal_workers import __version__
from distkit.artifacts import package_chart
from distkit.publish import Publisher, Registry
from docs_pages import (
    BLOCK_TIMEOUT,
    POLICY_CLEANUP,
    namespaces,
    page_commands,
    remove_made_namespaces,
    run_script,
    sandbox,
    scripts,
)
from localkube.addons import registry as registry_addon
from localkube.cluster import LocalCluster
from localkube.rbac import apply_rbac, refused_as_controller
from real_node_trials import host_volume
from realnode.images import worker_image
from realnode.values import worker_values
from repo_paths import AREAL_WORKER_ENV, TOOLS_BIN

pytestmark = [
    pytest.mark.serial_cluster,
    pytest.mark.real_node,
    pytest.mark.fixed_names,  # the guide's namespace rl and the chart it pushes, which test_docs_commands uses too
    pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="the local registry and real node"),
]

GUIDE = "docs/en/deployment.md"
NAMESPACE = "rl"
CLAIM = "areal-shared"
READER_REGISTRY = "registry.example.com/areal"
READERS_SETTINGS = "the reader's registry: the test sets REGISTRY, REGISTRY_USER and VERSION to the local one's"
NOT_RUN = {
    f"export REGISTRY={READER_REGISTRY}": READERS_SETTINGS,
    "export REGISTRY_USER=ci": READERS_SETTINGS,
    f"export VERSION={__version__}": READERS_SETTINGS,
    (
        "areal-workers -n rl submit -f rl-trainer.yaml -- python /opt/AReaL/examples/math/gsm8k_rl.py --config "
        "/opt/AReaL/examples/math/gsm8k_grpo.yaml scheduler.type=kubernetes"
    ): "AReaL's trainer image and models: the guide's --dry-run of it runs; test_areal_trainer_job.py submits "
    "AReaL's SFT trainer the same way on the real node",
}


def test_every_command_not_run_is_in_the_guide():
    assert sorted(set(NOT_RUN) - set(page_commands(GUIDE))) == []


@pytest.fixture
def registry(real_node, tmp_path) -> Iterator[tuple[Registry, Publisher]]:
    """The local registry with this checkout's chart and the real node's worker image at VERSION."""
    cluster = LocalCluster()
    registry_addon.ensure(cluster, 60.0)
    credentials = cluster.registry_credentials()
    found = Registry(credentials.address, credentials.username, credentials.password, credentials.ca_file)
    (tmp_path / "publish").mkdir()
    publisher = Publisher(found, tmp_path / "publish")
    publisher.push_chart(package_chart(tmp_path / "dist"))
    image = f"{found.address}/areal-worker:{__version__}"
    pushed = subprocess.run(
        [str(TOOLS_BIN / "crane"), "push", str(worker_image(AREAL_WORKER_ENV)), image],
        capture_output=True,
        text=True,
        env=publisher.env,
        timeout=600,
    )
    assert pushed.returncode == 0, pushed.stderr
    yield found, publisher
    # The real node pulled it: the same content as test_image_pulls.py's image, whose image IDs must name its own.
    cluster.real_node().remove_images(image.rpartition(":")[0])


@pytest.fixture
def claim_volume(core, tmp_path):
    """A ReadWriteMany volume of the real node's host, bound ahead to the claim the guide creates: a platform's
    NFS or CephFS share."""
    directory = tmp_path / "shared"
    directory.mkdir()
    directory.chmod(0o777)  # the workers' uid 1000
    name = f"deployment-guide-{uuid.uuid4().hex[:6]}"
    host_volume(core, name, directory, NAMESPACE, CLAIM, storage_class="nfs")
    yield directory
    core.delete_persistent_volume(name)


def assert_still_protected(kubeconfig: Path, namespace: str, seconds: float = 5.0) -> None:
    """The controller of `namespace` is refused a Secret that is not Helm's (the token Secret the policy exists for)
    by the admission policy, for `seconds`: a deleted policy stops refusing once the API server's informer drops it."""
    deadline = time.monotonic() + seconds
    while True:
        refused = refused_as_controller(kubeconfig, namespace)
        assert "helm.sh/release.v1" in refused, (
            f"the controller of namespace {namespace} is no longer refused by the admission policy after another "
            f"namespace's removal: {refused or 'admitted'}"
        )
        if time.monotonic() > deadline:
            return
        time.sleep(0.5)


def on_the_real_node(values_file: Path) -> None:
    """The guide's platform values, and under them what the real node's pods need (placement, AReaL's environment)."""
    values = yaml.safe_load(values_file.read_text())
    node = worker_values(AREAL_WORKER_ENV)
    values.setdefault("workerDefaults", {}).update(node["workerDefaults"])
    values["tests"] = {**values.get("tests", {}), **node["tests"]}
    values_file.write_text(yaml.safe_dump(values, sort_keys=False))


@pytest.mark.timeout(4 * BLOCK_TIMEOUT)
def test_the_deployment_guide_runs_from_the_registry_on_the_real_node(
    registry, claim_volume, kubeconfig, core, tmp_path, make_namespace
):
    found, publisher = registry
    # Another namespace of trainers, prepared before the guide starts: the guide's removal of namespace rl must leave
    # the cluster-wide admission policy in force there (the sandbox's copy of rbac/cluster/ is bound to both).
    neighbour = make_namespace()
    apply_rbac(kubeconfig, neighbour, policy=False)
    before = namespaces(core)
    directory = tmp_path / "reader"
    directory.mkdir()
    environment = sandbox(directory, GUIDE, kubeconfig, policy_namespaces=(neighbour,))
    for name in ("platform-values.yaml", "smoke-roles.yaml", "shared-claim.yaml", "rl-trainer.yaml"):
        written = directory / name
        written.write_text(written.read_text().replace(READER_REGISTRY, found.address))
    on_the_real_node(directory / "platform-values.yaml")
    (directory / "registry-password.txt").write_text(found.password or "")
    environment.update(
        REGISTRY=found.address,
        REGISTRY_USER=found.username or "",
        VERSION=__version__,
        HELM_REGISTRY_CONFIG=str(tmp_path / "reader-helm-registry.json"),
        SSL_CERT_FILE=publisher.env["SSL_CERT_FILE"],
    )
    ran = scripts(GUIDE, NOT_RUN)
    try:
        for script, stdin in ran:
            run_script(script, stdin, directory, environment, GUIDE)
        assert NAMESPACE not in namespaces(core), "the guide's last command deletes its namespace"
        assert_still_protected(kubeconfig, neighbour)
    finally:
        subprocess.run(["bash", "-c", POLICY_CLEANUP], cwd=directory, env=environment, capture_output=True, timeout=300)
        remove_made_namespaces(core, before, GUIDE, [script for script, _ in ran])
