"""Helm's records of a release are Secrets the controller identity may write (helm needs it), so a compromised
controller can write a revision of its own: a manifest or hooks holding a ClusterRoleBinding, which an administrator's
`areal-workers rollback`, `down` or `reap` would then apply, delete or run with the administrator's rights. On the
local cluster, the controller ServiceAccount of rbac/ (its admission policy in force) forges such revisions in helm's
storage format, and each command refuses them, naming the revision and the object, with nothing applied or
deleted; so does the adapter's own Releases, below the command line."""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client, config as kube_config
from kubernetes.client.exceptions import ApiException

from areal_workers import KubernetesSchedulerConfig
from areal_workers.cli.main import main
from areal_workers.cli.session import EXIT_PROBLEM, EXIT_USAGE
from areal_workers.config import BUNDLED_CHART
from areal_workers.release.client import Releases
from areal_workers.release.ownership import UntrustedRevisionError
from areal_workers.runtime.lease import lease_body
from areal_workers.runtime.lease_record import OBSERVED_ANNOTATION, Observation, observation_text, record_of
from clusterlib import controller_kubeconfig

RELEASE = "forged"


@pytest.fixture
def cli(kubeconfig, namespace, helm_executable, capsys, monkeypatch):
    """areal-workers in this process, as the administrator, aimed at the test's namespace: (exit code, out, err)."""
    monkeypatch.setenv("PATH", f"{Path(helm_executable).parent}{os.pathsep}{os.environ['PATH']}")

    def call(*argv: str) -> tuple[int, str, str]:
        code = main(["--kubeconfig", str(kubeconfig), "-n", namespace, *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return call


@pytest.fixture
def helm(helm_executable, kubeconfig, namespace):
    def run(*args: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [helm_executable, "--kubeconfig", str(kubeconfig), "-n", namespace, *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, f"helm {' '.join(args)} failed:\n{proc.stderr}"
        return proc

    return run


@pytest.fixture
def forger(kubeconfig, namespace, tmp_path):
    """A CoreV1Api of the controller ServiceAccount of rbac/, the admission policy in force: it may write helm's
    release Secrets, and nothing else of the kind."""
    api = kube_config.new_client_from_config(
        config_file=controller_kubeconfig(kubeconfig, namespace, tmp_path / "controller.yaml")
    )
    yield client.CoreV1Api(api)
    api.close()


@pytest.fixture
def bindings(kube_client, namespace):
    """The names of the ClusterRoleBindings a test forges (cluster-scoped: deleted after it, whatever happened)."""
    rbac = client.RbacAuthorizationV1Api(kube_client)
    names = {what: f"{namespace}-{what}" for what in ("applied", "hooked", "victim")}
    yield names
    for name in names.values():
        try:
            rbac.delete_cluster_role_binding(name)
        except ApiException as error:
            if error.status != 404:
                raise


def binding(name: str, namespace: str) -> str:
    """A ClusterRoleBinding as a forged manifest holds it: harmless here (view, for a ServiceAccount nobody has)."""
    return (
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\n"
        f"metadata:\n  name: {name}\n"
        "roleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: view\n"
        f"subjects:\n  - kind: ServiceAccount\n    name: nobody\n    namespace: {namespace}\n"
    )


def exists(kube_client, name: str) -> bool:
    try:
        client.RbacAuthorizationV1Api(kube_client).read_cluster_role_binding(name)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def secret_name(version: int) -> str:
    return f"sh.helm.release.v1.{RELEASE}.v{version}"


def forge(forger: client.CoreV1Api, namespace: str, version: int, manifest: str = "", hook: str = "") -> None:
    """Rewrites revision `version` in helm's storage format (data.release: base64 of gzip of the release's JSON), as
    the forger: `manifest` appended to its manifest, `hook` added as a hook run before a rollback or an uninstall."""
    secret = forger.read_namespaced_secret(secret_name(version), namespace)
    record = json.loads(gzip.decompress(base64.b64decode(base64.b64decode(secret.data["release"]))))
    if manifest:
        record["manifest"] += f"\n---\n# Source: areal-workers/templates/configmap-topology.yaml\n{manifest}"
    if hook:
        record["hooks"].append(
            {
                "name": "hooked",
                "kind": "ClusterRoleBinding",
                "path": "areal-workers/templates/tests/test-health.yaml",
                "manifest": hook,
                "events": ["pre-rollback", "pre-delete"],
                "last_run": {"phase": ""},
            }
        )
    encoded = base64.b64encode(gzip.compress(json.dumps(record).encode())).decode()
    secret.data["release"] = base64.b64encode(encoded.encode()).decode()
    forger.replace_namespaced_secret(secret_name(version), namespace, secret)


def install(helm) -> None:
    """Revision 1, and revision 2 with another value: something to roll back to."""
    helm("install", RELEASE, str(BUNDLED_CHART), "--set", "experiment=e,trial=t")
    helm("upgrade", RELEASE, str(BUNDLED_CHART), "--set", "experiment=e,trial=t,networkPolicy.egress.enabled=true")


def history(helm) -> list[tuple[int, str]]:
    return [(e["revision"], e["status"]) for e in json.loads(helm("history", RELEASE, "-o", "json").stdout)]


@pytest.mark.parametrize("where", ["manifest", "hook"])
def test_rollback_to_a_forged_revision_is_refused_and_applies_nothing(
    where, cli, helm, forger, bindings, kube_client, namespace
):
    install(helm)
    name = bindings["applied"]
    if where == "manifest":
        forge(forger, namespace, 1, manifest=binding(name, namespace))
        named = f"ClusterRoleBinding {name} without a namespace in its manifest"
    else:
        forge(forger, namespace, 1, hook=binding(name, namespace))
        named = f"ClusterRoleBinding {name} without a namespace in its hook hooked"
    code, _, err = cli("rollback", "1", "--release", RELEASE, "--no-wait")
    assert code == EXIT_USAGE, err
    assert f"cannot roll back {RELEASE}: revision 1 of release {RELEASE} in namespace {namespace} holds {named}" in err
    assert f"helm get manifest {RELEASE} --revision 1 -n {namespace}" in err and "Nothing was changed" in err
    assert not exists(kube_client, name)
    assert history(helm) == [(1, "superseded"), (2, "deployed")]


def test_down_and_reap_refuse_a_forged_current_revision_and_delete_nothing(
    cli, helm, forger, bindings, kube_client, namespace
):
    """The current revision lists a ClusterRoleBinding that exists (an uninstall would delete it) and holds a
    pre-delete hook that would create another."""
    install(helm)
    victim, planted = bindings["victim"], bindings["hooked"]
    rbac = client.RbacAuthorizationV1Api(kube_client)
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=victim),
            role_ref=client.V1RoleRef(api_group="rbac.authorization.k8s.io", kind="ClusterRole", name="view"),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name="nobody", namespace=namespace)],
        )
    )
    forge(forger, namespace, 2, manifest=binding(victim, namespace), hook=binding(planted, namespace))
    code, _, err = cli("down", "--release", RELEASE, "--yes")
    assert code == EXIT_USAGE, err
    assert f"cannot delete {RELEASE}: revision 2 of release {RELEASE} in namespace {namespace} holds " in err
    assert exists(kube_client, victim) and not exists(kube_client, planted)
    assert history(helm)[-1] == (2, "deployed")
    # A reaper finds the release's trainer dead: it refuses the same revision, and reports it.
    expire_lease(kube_client, namespace)
    code, _, err = cli("reap")
    assert code == EXIT_PROBLEM, err
    assert f"cannot reap {RELEASE}: revision 2 of release {RELEASE}" in err and "Lease stays marked" in err
    assert exists(kube_client, victim) and not exists(kube_client, planted)
    assert history(helm)[-1] == (2, "deployed")


def test_the_adapters_releases_refuse_a_forged_revision_below_the_command_line(
    helm, forger, bindings, kube_client, kubeconfig, helm_executable, namespace
):
    """Releases.rollback and .uninstall check the revisions themselves (the scheduler's and the commands' path):
    a record forged after a command's own check is refused all the same."""
    install(helm)
    name = bindings["applied"]
    forge(forger, namespace, 1, manifest=binding(name, namespace))
    config = KubernetesSchedulerConfig(namespace=namespace, kubeconfig=str(kubeconfig), helm_executable=helm_executable)
    releases = Releases(config)
    with pytest.raises(UntrustedRevisionError) as refused:
        asyncio.run(releases.rollback(RELEASE, 1))
    assert f"revision 1 of release {RELEASE} in namespace {namespace} holds ClusterRoleBinding {name}" in str(
        refused.value
    )
    assert asyncio.run(releases.untrusted(RELEASE)) is None  # revision 2, the current one, is the chart's
    forge(forger, namespace, 2, hook=binding(name, namespace))
    with pytest.raises(UntrustedRevisionError):
        asyncio.run(releases.uninstall(RELEASE))
    assert not exists(kube_client, name)
    assert history(helm) == [(1, "superseded"), (2, "deployed")]


def expire_lease(kube_client, namespace: str) -> None:
    """A Lease naming the release whose trainer stopped renewing it long ago, as a reaper's earlier look saw it."""
    old = datetime.now(UTC) - timedelta(hours=1)
    body = lease_body(RELEASE, "gone/1", 1, old)
    body.metadata.annotations = {OBSERVED_ANNOTATION: observation_text(Observation(record_of(body), old))}
    client.CoordinationV1Api(kube_client).create_namespaced_lease(namespace, body)
