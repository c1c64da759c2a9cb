"""The chart under a real Argo CD (docs/en/gitops.md): examples/argocd-application.yaml syncs the chart from a git
repository this module creates, on the local cluster's Argo CD (`localcluster.py up --argocd`, which `make test`
runs; the fixture starts it when it is not running). The tests run in file order on one Application:

sync from Git -> workers Ready; a values commit rolls out; self-heal reverts a manual scale; replicas another owner
sets stay under ignoreDifferences; the adapter (ownership="external") discovers and calls the workers; a managed
scheduler cannot take the release over; removing a role from Git prunes it.

Argo CD's repo-server caches a resolved revision for minutes, so every commit is followed by a hard refresh. The
sync latencies (commit to workers Ready) are printed and recorded as test properties (docs/en/gitops.md)."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from areal_workers import KubernetesScheduler, KubernetesSchedulerConfig
from areal_workers.errors import WorkerCreationError
from clusterlib import RUN_PODS, counter_engine, lane_values, selected_lane
from repo_paths import REPO, TOOLS_BIN

APPLICATION = REPO / "examples" / "argocd-application.yaml"
VALUES = "examples/values-argocd.yaml"  # in the test's git repository as in this one
LOCAL_VALUES = "local-cluster.yaml"  # the test's addition: pods podrunner runs and probes
GROUP, VERSION, PLURAL, ARGOCD_NAMESPACE = "argoproj.io", "v1alpha1", "applications", "argocd"
SYNC_TIMEOUT = 240.0  # a sync takes seconds; generous for a loaded 2-core machine


@dataclass
class GitOps:
    """The git repository, the Application syncing it and the namespace it syncs to."""

    repo: Path
    namespace: str
    application: dict[str, Any]
    release: str
    kubeconfig: Path
    api: client.ApiClient
    latencies: dict[str, float] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.application["metadata"]["name"]

    def git(self, *args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(self.repo), *args], check=True, capture_output=True, text=True
        ).stdout.strip()

    def commit_values(self, change, message: str) -> str:
        """Edits the values file in Git with `change(values)`, commits, asks Argo CD for a hard refresh."""
        path = self.repo / VALUES
        values = yaml.safe_load(path.read_text())
        change(values)
        path.write_text(yaml.safe_dump(values, sort_keys=False))
        self.git("commit", "-qam", message)
        self.refresh()
        return self.git("rev-parse", "HEAD")

    def refresh(self) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            ARGOCD_NAMESPACE,
            PLURAL,
            self.name,
            {"metadata": {"annotations": {"argocd.argoproj.io/refresh": "hard"}}},
        )

    @property
    def custom(self) -> client.CustomObjectsApi:
        return client.CustomObjectsApi(self.api)

    def status(self) -> dict[str, Any]:
        return (
            self.custom.get_namespaced_custom_object(GROUP, VERSION, ARGOCD_NAMESPACE, PLURAL, self.name).get("status")
            or {}
        )

    def wait_synced(self, revision: str, timeout: float = SYNC_TIMEOUT) -> dict[str, Any]:
        """The Application's status once it is Synced and Healthy at `revision` (its operation finished)."""
        return wait_for(
            lambda: _synced(self.status(), revision),
            timeout,
            lambda: (
                f"Application {self.name} not Synced/Healthy at {revision[:8]}: {json.dumps(_summary(self.status()))}"
            ),
        )

    def statefulset(self, role: str) -> client.V1StatefulSet | None:
        items = (
            client.AppsV1Api(self.api)
            .list_namespaced_stateful_set(
                self.namespace, label_selector=f"app.kubernetes.io/instance={self.release},areal.io/role={role}"
            )
            .items
        )
        return items[0] if items else None

    def ready_pods(self, role: str) -> int:
        pods = (
            client.CoreV1Api(self.api)
            .list_namespaced_pod(
                self.namespace, label_selector=f"app.kubernetes.io/instance={self.release},areal.io/role={role}"
            )
            .items
        )
        return sum(
            1
            for p in pods
            if p.metadata.deletion_timestamp is None
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        )

    def wait_ready(self, role: str, replicas: int, timeout: float = SYNC_TIMEOUT) -> None:
        """`replicas` Ready pods of `role` and its StatefulSet asking for exactly that many."""

        def done() -> bool:
            statefulset = self.statefulset(role)
            return (
                statefulset is not None
                and statefulset.spec.replicas == replicas
                and (statefulset.status.ready_replicas or 0) == replicas
                and self.ready_pods(role) == replicas
            )

        wait_for(done, timeout, lambda: f"{role}: {self.ready_pods(role)} Ready pods, wanted {replicas}")


def _synced(status: dict[str, Any], revision: str) -> dict[str, Any] | None:
    sync, health = status.get("sync") or {}, status.get("health") or {}
    operation = status.get("operationState") or {}
    if (
        sync.get("status") == "Synced"
        and sync.get("revision") == revision
        and health.get("status") == "Healthy"
        and operation.get("phase") == "Succeeded"
        and operation.get("syncResult", {}).get("revision") == revision
    ):
        return status
    return None


def _summary(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "sync": status.get("sync"),
        "health": status.get("health"),
        "operation": {k: (status.get("operationState") or {}).get(k) for k in ("phase", "message")},
        "conditions": status.get("conditions"),
    }


def wait_for(check, timeout: float, describe):
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {describe()}")
        time.sleep(0.5)


def make_repository(path: Path) -> str:
    """A git repository laid out like this one (the chart and the values file), on branch main."""
    shutil.copytree(REPO / "charts" / "areal-workers", path / "charts" / "areal-workers")
    (path / "examples").mkdir()
    shutil.copy(REPO / VALUES, path / VALUES)
    local = {**copy.deepcopy(RUN_PODS), **lane_values(selected_lane(), path.parent / "areal")}
    (path / LOCAL_VALUES).write_text(yaml.safe_dump(local))
    run = lambda *args: subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)  # noqa: E731
    run("init", "-q", "-b", "main")
    run("config", "user.email", "gitops-test@areal-workers.local")
    run("config", "user.name", "gitops test")
    run("add", "-A")
    run("commit", "-qm", "the chart and the worker group's values")
    return subprocess.run(
        ["git", "-C", str(path), "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def application_for(repo: Path, server: str, namespace: str) -> dict[str, Any]:
    """The example Application with only the site-specific fields replaced."""
    application = yaml.safe_load(APPLICATION.read_text())
    source = application["spec"]["source"]
    source["repoURL"] = f"file://{repo}"
    source["helm"]["valueFiles"].append(f"../../{LOCAL_VALUES}")
    application["spec"]["destination"] = {"server": server, "namespace": namespace}
    return application


@pytest.fixture(scope="module")
def gitops(kubeconfig, kube_client, tmp_path_factory):
    from localkube.cluster import LocalCluster
    from podrunner.watch import PRIVATE_LABEL, PRIVATE_VALUE, PodRunner

    if os.environ.get("AREAL_WORKERS_KUBECONFIG"):
        pytest.skip("runs Argo CD and worker processes beside the local cluster: local cluster only")
    cluster = LocalCluster()
    cluster.ensure_argocd()
    core = client.CoreV1Api(kube_client)
    namespace = f"t-argocd-{time.monotonic_ns() % 10**8}"
    core.create_namespace(
        client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace, labels={PRIVATE_LABEL: PRIVATE_VALUE}))
    )
    workdir = tmp_path_factory.mktemp("gitops")
    lane = selected_lane()
    runner = PodRunner(
        kubeconfig,
        namespace,
        workdir / "pods",
        module_map=lane.module_map,
        python=lane.python,
        pythonpath=lane.pythonpath,
    ).start()
    revision = make_repository(workdir / "repo")
    application = application_for(workdir / "repo", cluster.server, namespace)
    state = GitOps(
        repo=workdir / "repo",
        namespace=namespace,
        application=application,
        release=application["spec"]["source"]["helm"]["releaseName"],
        kubeconfig=kubeconfig,
        api=kube_client,
    )
    custom = state.custom
    try:
        custom.delete_namespaced_custom_object(GROUP, VERSION, ARGOCD_NAMESPACE, PLURAL, state.name)
    except client.ApiException as error:
        if error.status != 404:
            raise
    started = time.monotonic()
    custom.create_namespaced_custom_object(GROUP, VERSION, ARGOCD_NAMESPACE, PLURAL, application)
    state.wait_synced(revision)
    for role in ("actor", "rollout"):
        state.wait_ready(role, 2)
    state.latencies["first sync (Application created -> 4 workers Ready)"] = time.monotonic() - started
    yield state
    custom.delete_namespaced_custom_object(GROUP, VERSION, ARGOCD_NAMESPACE, PLURAL, state.name)
    core.delete_namespace(namespace, propagation_policy="Background")
    # The workers hold GPUs of the shared nodes: later tests count on them being free.
    wait_for(
        lambda: namespace not in {n.metadata.name for n in core.list_namespace().items},
        SYNC_TIMEOUT,
        lambda: f"namespace {namespace} not deleted",
    )
    runner.stop()
    for what, seconds in state.latencies.items():
        print(f"[argocd] {what}: {seconds:.1f}s")
    assert runner.errors == [], runner.errors


def test_the_application_syncs_the_chart_from_git_and_the_workers_come_up(gitops, helm_executable, record_property):
    status = gitops.status()
    kinds = {(r["kind"], r["name"]) for r in status["resources"]}
    assert {"StatefulSet", "Service", "ConfigMap"} <= {kind for kind, _ in kinds}
    for role in ("actor", "rollout"):
        assert gitops.ready_pods(role) == 2
    # `helm template` applied, no `helm install`: the cluster holds the workers but no helm release.
    listed = subprocess.run(
        [helm_executable, "list", "-a", "-q", "-n", gitops.namespace, f"--kubeconfig={gitops.kubeconfig}"],
        check=True,
        capture_output=True,
        text=True,
    )
    assert listed.stdout.strip() == ""
    # The chart renders its `helm test` Pod (hook "test") from these values; Argo CD neither creates it nor reports
    # it missing.
    chart = gitops.repo / gitops.application["spec"]["source"]["path"]
    rendered = subprocess.run(
        [
            helm_executable,
            "template",
            gitops.release,
            str(chart),
            "-n",
            gitops.namespace,
            *(
                arg
                for name in gitops.application["spec"]["source"]["helm"]["valueFiles"]
                for arg in ("-f", str((chart / name).resolve()))
            ),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    hooks = [
        d
        for d in yaml.safe_load_all(rendered)
        if d and d["kind"] == "Pod" and d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"
    ]
    assert len(hooks) == 1
    pods = (
        client.CoreV1Api(gitops.api)
        .list_namespaced_pod(gitops.namespace, label_selector="app.kubernetes.io/component=test")
        .items
    )
    assert pods == [] and not any(kind == "Pod" for kind, _ in kinds)
    for what, seconds in gitops.latencies.items():
        record_property(what, round(seconds, 1))


def test_a_values_change_committed_to_git_rolls_out(gitops, record_property):
    started = time.monotonic()
    revision = gitops.commit_values(lambda v: v["roles"]["rollout"].update(replicas=3), "rollout: 3 workers")
    gitops.wait_synced(revision)
    gitops.wait_ready("rollout", 3)
    gitops.latencies["values commit -> rollout scaled 2 -> 3, all Ready"] = time.monotonic() - started
    record_property("commit_to_ready_seconds", round(time.monotonic() - started, 1))
    assert gitops.ready_pods("actor") == 2


def test_self_heal_reverts_a_manual_scale(gitops):
    name = gitops.statefulset("actor").metadata.name
    client.AppsV1Api(gitops.api).patch_namespaced_stateful_set_scale(name, gitops.namespace, {"spec": {"replicas": 1}})
    gitops.wait_ready("actor", 2)
    wait_for(
        lambda: gitops.status()["sync"]["status"] == "Synced",
        SYNC_TIMEOUT,
        lambda: f"not Synced after the heal: {json.dumps(_summary(gitops.status()))}",
    )


def test_ignore_differences_leaves_replicas_to_another_owner(gitops):
    """The pattern for an owner of replicas other than Git (an autoscaler, an operator): ignoreDifferences on
    /spec/replicas with RespectIgnoreDifferences, so self-heal and syncs leave the live count alone. A second,
    unprotected change (the topology ConfigMap's data) proves that a self-heal sync ran after the scale."""
    spec = {
        "ignoreDifferences": [{"group": "apps", "kind": "StatefulSet", "jsonPointers": ["/spec/replicas"]}],
        "syncPolicy": {
            **gitops.application["spec"]["syncPolicy"],
            "syncOptions": [*gitops.application["spec"]["syncPolicy"]["syncOptions"], "RespectIgnoreDifferences=true"],
        },
    }
    apps, core = client.AppsV1Api(gitops.api), client.CoreV1Api(gitops.api)
    gitops.custom.patch_namespaced_custom_object(GROUP, VERSION, ARGOCD_NAMESPACE, PLURAL, gitops.name, {"spec": spec})
    try:
        name = gitops.statefulset("actor").metadata.name
        apps.patch_namespaced_stateful_set_scale(name, gitops.namespace, {"spec": {"replicas": 3}})
        gitops.wait_ready("actor", 3)
        (topology,) = core.list_namespaced_config_map(
            gitops.namespace,
            label_selector=(f"app.kubernetes.io/instance={gitops.release},app.kubernetes.io/component=topology"),
        ).items
        rendered = topology.data["topology.json"]
        core.patch_namespaced_config_map(topology.metadata.name, gitops.namespace, {"data": {"topology.json": "{}"}})
        wait_for(
            lambda: (
                core.read_namespaced_config_map(topology.metadata.name, gitops.namespace).data["topology.json"]
                == rendered
            ),
            SYNC_TIMEOUT,
            lambda: f"the ConfigMap was not healed: {json.dumps(_summary(gitops.status()))}",
        )
        wait_for(
            lambda: gitops.status()["sync"]["status"] == "Synced",
            SYNC_TIMEOUT,
            lambda: f"not Synced after the heal: {json.dumps(_summary(gitops.status()))}",
        )
        assert apps.read_namespaced_stateful_set(name, gitops.namespace).spec.replicas == 3
        assert gitops.ready_pods("actor") == 3
    finally:
        gitops.custom.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            ARGOCD_NAMESPACE,
            PLURAL,
            gitops.name,
            {"spec": {"ignoreDifferences": None, "syncPolicy": gitops.application["spec"]["syncPolicy"]}},
        )
    gitops.wait_ready("actor", 2)  # self-heal applies Git's count again once the exception is gone


def test_the_adapter_discovers_and_calls_the_workers_of_the_argo_owned_release(gitops, helm_executable):
    values = yaml.safe_load((gitops.repo / VALUES).read_text())
    config = KubernetesSchedulerConfig(
        namespace=gitops.namespace,
        kubeconfig=str(gitops.kubeconfig),
        helm_executable=helm_executable,
        ownership="external",
        release_name=gitops.release,
    )
    scheduler = KubernetesScheduler(config=config, experiment_name=values["experiment"], trial_name=values["trial"])
    try:
        actors = scheduler.get_workers("actor", timeout=120)
        assert [w.id for w in actors] == ["actor/0", "actor/1"]
        assert [w.id for w in scheduler.get_workers("rollout", timeout=120)] == [f"rollout/{i}" for i in range(3)]

        async def engines() -> list[int]:
            for worker in actors:
                await scheduler.create_engine(worker.id, counter_engine(), None, 10)
            return [await scheduler.async_call_engine(w.id, "increment", w.id, 1) for w in actors]

        assert asyncio.run(engines()) == [11, 11]
        assert scheduler.call_engine("actor/1", "increment", "actor/1", n=2) == 13
        with pytest.raises(WorkerCreationError, match="external"):
            scheduler.scale_workers("actor", 3)
    finally:
        scheduler.close()


def test_the_cli_shows_the_argo_owned_group_and_leaves_its_changes_to_git(gitops, capsys, monkeypatch):
    """The 3 a.m. view works without a helm release (the chart's topology ConfigMap is the model); history,
    rollback and down, which are helm operations, refuse and say where the revisions live."""
    from areal_workers.cli.main import main
    from areal_workers.cli.session import EXIT_OK, EXIT_USAGE

    monkeypatch.setenv("PATH", f"{TOOLS_BIN}{os.pathsep}{os.environ['PATH']}")

    def cli(*argv: str) -> tuple[int, str, str]:
        code = main(["--kubeconfig", str(gitops.kubeconfig), "-n", gitops.namespace, *argv])
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    code, out, err = cli("status", "-o", "json")
    assert code == EXIT_OK, out + err
    [trial] = json.loads(out)["trials"]
    assert trial["release"] == gitops.release and trial["revision"] is None
    assert trial["helm_status"] == "applied without helm"
    assert {(r["name"], r["ready"], r["replicas"]) for r in trial["roles"]} == {("actor", 2, 2), ("rollout", 3, 3)}
    code, table, _ = cli("status")
    assert code == EXIT_OK and "applied without helm" in table and "5/5 workers ready" in table
    code, out, err = cli("diagnose", "actor/0")
    assert code == EXIT_OK, out + err
    for argv in (("history",), ("rollback",), ("down", "--yes")):
        code, out, err = cli(*argv)
        assert code == EXIT_USAGE and "applied without helm" in err and "Git" in err, (argv, out, err)
    assert gitops.statefulset("actor").spec.replicas == 2
    assert gitops.status()["sync"]["status"] == "Synced"


def test_a_managed_scheduler_cannot_take_the_argo_owned_release_over(gitops, helm_executable):
    """The adapter's own changes are helm upgrades: helm refuses objects it did not create, so nothing of the
    Argo-owned group changes (the adapter scales a group only when it owns it; Git does here)."""
    from clusterlib import job

    values = yaml.safe_load((gitops.repo / VALUES).read_text())
    config = KubernetesSchedulerConfig(
        namespace=gitops.namespace,
        kubeconfig=str(gitops.kubeconfig),
        helm_executable=helm_executable,
        release_name=gitops.release,
        lease_grace_seconds=0,
    )
    scheduler = KubernetesScheduler(config=config, experiment_name=values["experiment"], trial_name=values["trial"])
    try:
        with pytest.raises(WorkerCreationError) as refused:
            scheduler.create_workers(job("actor", 3))
        assert "exists and cannot be imported into the current release" in str(refused.value)
    finally:
        scheduler.close()
    assert gitops.statefulset("actor").spec.replicas == 2
    assert gitops.status()["sync"]["status"] == "Synced"


def test_removing_a_role_from_git_prunes_it(gitops):
    revision = gitops.commit_values(lambda v: v["roles"].pop("rollout"), "remove the rollout role")
    gitops.wait_synced(revision)
    wait_for(
        lambda: gitops.statefulset("rollout") is None and gitops.ready_pods("rollout") == 0,
        SYNC_TIMEOUT,
        lambda: "rollout's StatefulSet or pods are still there",
    )
    services = (
        client.CoreV1Api(gitops.api)
        .list_namespaced_service(
            gitops.namespace, label_selector=f"app.kubernetes.io/instance={gitops.release},areal.io/role=rollout"
        )
        .items
    )
    assert services == []
    assert gitops.ready_pods("actor") == 2
