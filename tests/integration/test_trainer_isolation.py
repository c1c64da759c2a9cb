"""The trainer pod is isolated, for real: AReaL's RolloutController (1.0.4, unmodified) runs in the pod of
`areal-workers submit` on the real node, where kube-network-policies enforces NetworkPolicies, with its workers
there too. Its callback server is unauthenticated and `/callback/init_weights_group` imports and calls what the
payload names: the probe below asks it to open a marker file, which is what an attacker's code would do first.

From an unlabelled pod of the namespace, and from a pod of another namespace carrying the release's labels, the POST
times out and no marker appears; from a pod carrying the release's labels in the namespace (the control: what a
worker of the release may do) it is answered and the marker appears; then the trainer's own workers complete their
rollouts and weight update through the same server, and the trainer (which reaches only the API server, DNS and the
workers) finishes.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from areal_controller_runs import trial_setup
from localkube.cluster import LocalCluster
from localkube.rbac import apply_rbac
from real_node_trials import kubectl
from repo_paths import REPO

pytestmark = [
    pytest.mark.serial_cluster,
    pytest.mark.real_node,
    pytest.mark.usefixtures("real_node"),  # its trainer and workers run there: fails at setup without it
    pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="the local cluster's real node only"),
]

CLI = REPO / ".venv" / "bin" / "areal-workers"
RUN = REPO / "tests" / "support" / "rollout_controller_run.py"
JOB = "isolated-trainer"
TIMEOUT = 900
DENIED_AFTER = 8.0  # a dropped connection never answers; an admitted one answers within a second
ADMITTED_WITHIN = 60.0

# POSTs AReaL's init_weights_group callback with a payload that opens argv[2] for writing in the trainer; prints
# "answered <status>", "timeout" or "error <reason>".
EXPLOIT = """
import json, socket, sys, urllib.error, urllib.request
meta = {"type": "dataclass", "class_path": "builtins.open", "data": {"file": sys.argv[2], "mode": "w"}}
request = urllib.request.Request(sys.argv[1], data=json.dumps({"meta": meta}).encode(),
                                 headers={"Content-Type": "application/json"})
try:
    print("answered", urllib.request.urlopen(request, timeout=float(sys.argv[3])).status)
except urllib.error.HTTPError as error:
    print("answered", error.code)
except (TimeoutError, socket.timeout):
    print("timeout")
except urllib.error.URLError as error:
    timed_out = isinstance(error.reason, (TimeoutError, socket.timeout))
    print("timeout" if timed_out else f"error {error.reason}")
"""


def submit_file(directory: Path) -> Path:
    """The real node's submit file (image, placement, AReaL's environment, helm, the API relay) with the test's
    directory and this checkout's test support mounted at their own paths."""
    spec = yaml.safe_load(LocalCluster().real_node().paths.trainer_submit.read_text())
    spec.update(name=JOB, cpu="500m", memory="3Gi", restarts=0)
    mounts = {"run": directory, "support": REPO / "tests" / "support", "examples": REPO / "examples" / "bandit_demo"}
    for name, path in mounts.items():
        spec["volumes"].append({"name": name, "hostPath": {"path": str(path), "type": "Directory"}})
        spec["volume_mounts"].append({"name": name, "mountPath": str(path)})
    paths = [spec["env"]["PYTHONPATH"], str(mounts["support"]), str(mounts["examples"])]
    spec["env"]["PYTHONPATH"] = os.pathsep.join(paths)
    path = directory / "submit.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def follow(process: subprocess.Popen) -> queue.Queue:
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in process.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    return lines


def first_json(lines: queue.Queue, key: str, seen: list[str], timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            line = lines.get(timeout=1)
        except queue.Empty:
            continue
        if line is None:
            break
        seen.append(line)
        if line.startswith(f'{{"{key}"'):
            return json.loads(line)
    raise AssertionError(f"no {key} line from the trainer within {timeout:.0f}s:\n{''.join(seen)[-4000:]}")


def probe_pod(api: client.ApiClient, trainer: client.V1Pod, name: str, labels: dict[str, str]) -> dict:
    """The trainer pod's spec (image, node, AReaL's environment), sleeping, without its identity."""
    spec = api.sanitize_for_serialization(trainer.spec)
    for key in ("nodeName", "serviceAccountName", "serviceAccount"):
        spec.pop(key, None)
    spec.update(automountServiceAccountToken=False, terminationGracePeriodSeconds=0, restartPolicy="Never")
    [container] = spec["containers"]
    container.update(command=["sleep", "infinity"], name="probe")
    container["resources"] = {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "512Mi"}}
    container.pop("args", None)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def exploit_from(core, api, kubeconfig, trainer, namespace, labels, url, marker: Path, timeout: float) -> str:
    name = f"probe-{uuid.uuid4().hex[:6]}"
    core.create_namespaced_pod(namespace, probe_pod(api, trainer, name, labels))
    try:
        deadline = time.monotonic() + 180
        while core.read_namespaced_pod(name, namespace).status.phase != "Running":
            assert time.monotonic() < deadline, f"probe pod {namespace}/{name} did not start"
            time.sleep(1)
        result = kubectl(
            kubeconfig,
            "-n",
            namespace,
            "exec",
            name,
            "--",
            "python",
            "-c",
            EXPLOIT,
            url,
            str(marker),
            str(timeout),
            timeout=timeout + 120,
        )
        assert result.returncode == 0, result.stderr
        return result.stdout.strip()
    finally:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


@pytest.mark.timeout(2 * TIMEOUT)
def test_only_the_releases_pods_reach_the_trainers_callback_server(make_namespace, kube_client, kubeconfig, tmp_path):
    core = client.CoreV1Api(kube_client)
    namespace, shared, values_file = trial_setup("real", make_namespace, tmp_path)
    # The real node's workers mount AReaL's environment from the host, which the admission policy refuses the
    # controller unless an administrator allows it for the namespace.
    core.patch_namespace(namespace, {"metadata": {"labels": {"areal-workers.dev/allow-host-path": "true"}}})
    assert apply_rbac(kubeconfig, namespace), "the controller's Role and admission policy"
    other_namespace = make_namespace()
    tmp_path.chmod(0o777)  # the trainer runs as uid 1000 and writes the markers here
    settings = {
        "values_files": [str(values_file)],
        "helm_executable": "helm",
        "termination_grace_seconds": 5,
        "ready_timeout": 300.0,
        "helm_timeout": 300.0,
        "trial": f"t{uuid.uuid4().hex[:6]}",
        "cpu": 0.25,
        "fileroot": str(shared),
        "hold_file": str(tmp_path / "go"),
    }
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    command = [str(CLI), "--kubeconfig", str(kubeconfig), "-n", namespace, "submit", "-f", str(submit_file(tmp_path))]
    command += ["--start-timeout", "5m", "--", "python", str(RUN), str(tmp_path / "settings.json")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines, seen = follow(process), []
        ready = first_json(lines, "callback_ready", seen, TIMEOUT)
        url = f"http://{ready['callback_ready']}/callback/init_weights_group"
        [trainer] = core.list_namespaced_pod(namespace, label_selector=f"job-name={JOB}").items
        release = {"app.kubernetes.io/name": "areal-workers", "app.kubernetes.io/instance": ready["release"]}
        policies = client.NetworkingV1Api(kube_client).list_namespaced_network_policy(namespace).items
        assert {p.metadata.name for p in policies} >= {JOB, f"{ready['release']}-areal-workers-trainer"}

        def exploit(where: str, labels: dict[str, str], marker: str, timeout: float) -> tuple[str, bool]:
            path = tmp_path / marker
            answer = exploit_from(core, kube_client, kubeconfig, trainer, where, labels, url, path, timeout)
            return answer, path.exists()

        assert exploit(namespace, {}, "unlabelled", DENIED_AFTER) == ("timeout", False)
        assert exploit(other_namespace, release, "other-namespace", DENIED_AFTER) == ("timeout", False)
        # The control: a pod of the release is admitted, and the payload runs in the trainer (AReaL's to fix).
        assert exploit(namespace, release, "release-pod", ADMITTED_WITHIN) == ("answered 500", True)

        (tmp_path / "go").touch()
        result = first_json(lines, "callback", seen, TIMEOUT)
        assert process.wait(timeout=300) == 0, "".join(seen)[-4000:]
    finally:
        if process.poll() is None:
            process.kill()
    # The workers' rollouts after the probes came back through the callback server, and so did the weight update.
    assert len(result["after"]) == 4 and all(item["version"] == 1 for item in result["after"]), result["after"]
    assert result["published_removed"]
