"""The chart on a real apiserver with real helm: what a platform engineer's `helm install` gets."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from localkube.pki import service_account_kubeconfig
from localkube.rbac import apply_rbac
from repo_paths import REPO

CHART = REPO / "charts" / "areal-workers"
EXAMPLE = REPO / "examples" / "values-example.yaml"
# Worker pods whose processes podrunner (tools/podrunner/) runs and whose readiness it probes, as a kubelet would.
RUN_PODS = {"workerDefaults": {"podAnnotations": {"areal-workers.dev/readiness": "external"}}}
SELECTOR = "app.kubernetes.io/instance=demo,app.kubernetes.io/component=worker"
pytestmark = pytest.mark.helm4


def helm(kubeconfig: Path, helm_executable: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [helm_executable, "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, timeout=300
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def write_values(tmp_path: Path, values: dict) -> str:
    path = tmp_path / f"values-{len(list(tmp_path.glob('values-*')))}.json"
    path.write_text(json.dumps(values))
    return str(path)


def health(pod: client.V1Pod) -> dict:
    with urllib.request.urlopen(f"http://{pod.status.pod_ip}:8000/health", timeout=5) as response:
        return json.load(response)


def wait_for_health(pod: client.V1Pod, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            health(pod)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def install(kubeconfig, helm_executable, namespace, tmp_path, *extra: str) -> None:
    helm(
        kubeconfig,
        helm_executable,
        "install",
        "demo",
        str(CHART),
        "-n",
        namespace,
        "-f",
        str(EXAMPLE),
        "-f",
        write_values(tmp_path, RUN_PODS),
        *extra,
        "--wait",
        "--timeout",
        "120s",
    )


def test_helm_install_gives_ready_workers_with_real_guards_and_helm_test_passes(
    kubeconfig, helm_executable, namespace, core, pod_runner, tmp_path
):
    pod_runner(namespace)
    install(kubeconfig, helm_executable, namespace, tmp_path)

    pods = {p.metadata.name: p for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR).items}
    assert sorted(pods) == [f"demo-areal-workers-actor-{i}" for i in range(2)] + [
        f"demo-areal-workers-rollout-{i}" for i in range(3)
    ]
    for name, pod in pods.items():
        assert ipaddress.ip_address(pod.status.pod_ip).is_loopback
        role, index = pod.metadata.labels["areal.io/role"], int(name.rsplit("-", 1)[1])
        answer = health(pod)  # the guard bound the pod's own IP, with the role and ordinal the chart passed
        assert (answer["status"], answer["role"], answer["worker_index"]) == ("healthy", role, index)
        assert answer["experiment_name"] == "quickstart" and answer["trial_name"] == "trial0"

    result = helm(kubeconfig, helm_executable, "test", "demo", "-n", namespace, "--timeout", "60s")
    assert "Phase:          Succeeded" in result.stdout, result.stdout

    logs = subprocess.run(
        [
            str(REPO / ".tools" / "bin" / "kubectl"),
            "--kubeconfig",
            str(kubeconfig),
            "logs",
            "-n",
            namespace,
            "demo-areal-workers-actor-1",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert f"areal-guard listening on {pods['demo-areal-workers-actor-1'].status.pod_ip}:8000" in logs.stdout


def test_helm_test_fails_when_a_worker_is_unhealthy(kubeconfig, helm_executable, namespace, core, pod_runner, tmp_path):
    runner = pod_runner(namespace)
    install(
        kubeconfig,
        helm_executable,
        namespace,
        tmp_path,
        "--set",
        "roles.rollout.replicas=1",
        "--set",
        "workerDefaults.probes.readiness.enabled=false",
    )
    for pod in core.list_namespaced_pod(namespace, label_selector=SELECTOR).items:
        wait_for_health(pod)  # without a readiness probe, Ready does not mean the guard listens yet
    rollout = core.read_namespaced_pod("demo-areal-workers-rollout-0", namespace)
    managed = next(p for p in runner.pods.values() if p.name.endswith("/demo-areal-workers-rollout-0"))
    runner._kill(managed)  # the worker's process dies; without a readiness probe nothing marks it unready
    result = helm(kubeconfig, helm_executable, "test", "demo", "-n", namespace, "--timeout", "60s", check=False)
    assert result.returncode != 0
    hook = core.read_namespaced_pod("demo-areal-workers-test-health", namespace)
    assert hook.status.phase == "Failed"
    log = next(runner.log_dir.glob(f"{namespace}_demo-areal-workers-test-health_*.log")).read_text()
    assert f"UNHEALTHY http://demo-areal-workers-rollout-0.demo-areal-workers-rollout.{namespace}.svc" in log
    assert "2/3 workers healthy" in log
    assert rollout.status.pod_ip


def controller_revisions(apps: client.AppsV1Api, namespace: str, statefulset: str) -> set[str]:
    return {
        r.metadata.name
        for r in apps.list_namespaced_controller_revision(namespace).items
        if any(o.name == statefulset for o in r.metadata.owner_references or [])
    }


def test_scaling_one_role_leaves_every_other_role_untouched(
    kubeconfig, helm_executable, namespace, core, kube_client, pod_runner, tmp_path, ready_pods
):
    pod_runner(namespace)
    install(kubeconfig, helm_executable, namespace, tmp_path)
    apps = client.AppsV1Api(kube_client)
    before = {
        p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR).items
    }
    actor_before = apps.read_namespaced_stateful_set("demo-areal-workers-actor", namespace)
    actor_revisions = controller_revisions(apps, namespace, "demo-areal-workers-actor")

    helm(
        kubeconfig,
        helm_executable,
        "upgrade",
        "demo",
        str(CHART),
        "-n",
        namespace,
        "-f",
        str(EXAMPLE),
        "-f",
        write_values(tmp_path, RUN_PODS),
        "--set",
        "roles.rollout.replicas=5",
        "--wait",
        "--timeout",
        "120s",
    )

    after = {
        p.metadata.name: p.metadata.uid for p in core.list_namespaced_pod(namespace, label_selector=SELECTOR).items
    }
    assert len(after) == 7
    assert {name: uid for name, uid in after.items() if name in before} == before  # no pod was replaced
    actor_after = apps.read_namespaced_stateful_set("demo-areal-workers-actor", namespace)
    assert actor_after.metadata.generation == actor_before.metadata.generation
    assert actor_after.status.update_revision == actor_before.status.update_revision
    assert controller_revisions(apps, namespace, "demo-areal-workers-actor") == actor_revisions


def test_restricted_pod_security_admits_the_default_cpu_roles(
    kubeconfig, helm_executable, make_namespace, core, pod_runner, tmp_path
):
    namespace = make_namespace({"pod-security.kubernetes.io/enforce": "restricted"})
    pod_runner(namespace)
    install(kubeconfig, helm_executable, namespace, tmp_path)
    assert len(core.list_namespaced_pod(namespace, label_selector=SELECTOR).items) == 5


def test_the_controller_role_in_rbac_drives_the_whole_release_lifecycle_and_nothing_else(
    kubeconfig, helm_executable, make_namespace, tmp_path
):
    home, elsewhere = make_namespace(), make_namespace()
    apply_rbac(kubeconfig, home)  # rbac/, its admission policy bound to this namespace alone
    controller = service_account_kubeconfig(kubeconfig, home, "areal-controller", tmp_path / "controller.yaml")

    values = write_values(tmp_path, {})
    for args in (
        ["install", "demo", str(CHART), "-f", str(EXAMPLE)],
        ["upgrade", "demo", str(CHART), "-f", str(EXAMPLE), "--set", "roles.rollout.replicas=1"],
        ["rollback", "demo", "1"],
        ["history", "demo"],
        ["get", "values", "demo"],
        ["uninstall", "demo"],
    ):
        helm(controller, helm_executable, *args, "-n", home, *(["-f", values] if args[0] == "install" else []))

    denied = helm(
        controller, helm_executable, "install", "demo", str(CHART), "-n", elsewhere, "-f", str(EXAMPLE), check=False
    )
    assert denied.returncode != 0
    assert "forbidden" in denied.stderr and f"system:serviceaccount:{home}:areal-controller" in denied.stderr
