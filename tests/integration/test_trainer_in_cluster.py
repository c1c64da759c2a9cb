"""The trainer in the cluster: `areal-workers submit` runs it as a Job whose pod (run by podrunner, with its
ServiceAccount's credentials) creates workers at their pod IPs, calls engines and exits; its log and exit code
reach the command. With one attempt its workers are owned by its pod: deleting the pod garbage-collects them. With
restarts they are owned by the Job: a killed attempt's successor takes over its Lease and gets the same worker pods,
restarted in place."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
import yaml
from kubernetes import client

from areal_workers.cli.main import main
from clusterlib import RUN_PODS, TRAINER_IMAGE, lane_values, submit_trainer
from localkube.rbac import apply_rbac
from repo_paths import REPO, TOOLS_BIN

TRAINER = textwrap.dedent("""
    import asyncio, json, os, signal, sys, time
    from pathlib import Path
    from areal_workers import Job, KubernetesScheduler, KubernetesSchedulerConfig, SchedulingSpec, naming
    config = KubernetesSchedulerConfig.from_env(values_files=(sys.argv[1],), ready_timeout=120.0)
    scheduler = KubernetesScheduler(config=config, experiment_name="exp", trial_name="in-cluster")
    scheduler.create_workers(Job(role="actor", replicas=2, tasks=[SchedulingSpec(
        cpu=1, mem=1, gpu=0, cmd="python -m areal.infra.rpc.rpc_server")]))
    workers = scheduler.get_workers("actor")
    for worker in workers:  # "already exists" if a worker still ran an earlier attempt's process
        asyncio.run(scheduler.create_engine(worker.id, "localworker.engines.Counter", "counter", 40))
    total = sum(scheduler.call_engine(w.id, "increment", "counter", 1) for w in workers)
    print(f"trainer: {len(workers)} workers at {[w.ip for w in workers]}, counters sum to {total}", flush=True)
    listed, _ = scheduler.finder.pods.list(naming.release_selector(scheduler.release))
    pods = {p.metadata.name: [p.metadata.uid, p.status.container_statuses[0].restart_count] for p in listed}
    print("trainer pods: " + json.dumps(pods), flush=True)
    mode = sys.argv[2]  # an exit code, "hold", or "die-once:MARKER" (SIGKILLed unless MARKER exists)
    if mode == "hold":
        print("trainer: holding", flush=True)
        time.sleep(3600)
    if mode.startswith("die-once:") and not Path(mode.split(":", 1)[1]).exists():
        Path(mode.split(":", 1)[1]).touch()
        os.kill(os.getpid(), signal.SIGKILL)  # OOM-killed, say: no clean-up, its Lease left unrenewed
    scheduler.delete_workers()
    sys.exit(0 if mode.startswith("die-once:") else int(mode))
""")


@pytest.fixture
def trainer_namespace(namespace, pod_runner, kubeconfig, tmp_path, worker_lane, monkeypatch):
    """The namespace with rbac/ applied (the trainer's ServiceAccount), its pods run by a podrunner of the test
    (a trainer pod's python is podrunner's own interpreter, which has the kubernetes client and this package)."""
    apply_rbac(kubeconfig, namespace)  # rbac/, its admission policy bound to this namespace alone
    pod_runner(namespace)
    monkeypatch.setenv("PATH", f"{REPO / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    values = tmp_path / "run-pods.json"
    values.write_text(json.dumps({**RUN_PODS, **lane_values(worker_lane, tmp_path / "areal")}))
    script = tmp_path / "train.py"
    script.write_text(TRAINER)
    return namespace, script, values


def test_a_submitted_trainer_creates_workers_calls_engines_and_its_exit_code_reaches_the_command(
    trainer_namespace, kubeconfig, capsys, core
):
    namespace, script, values = trainer_namespace
    code, out, err = submit_trainer(
        capsys, kubeconfig, namespace, "--name", "trainer-ok", "--", "python", str(script), str(values), "0"
    )
    assert code == 0, err
    assert "trainer: 2 workers at ['127." in out and "counters sum to 82" in out  # 41 + 41, at loopback pod IPs
    assert "succeeded with exit code 0" in err
    code, out, err = submit_trainer(
        capsys,
        kubeconfig,
        namespace,
        "--name",
        "trainer-fails",
        "--restarts",
        "0",
        "--",
        "python",
        str(script),
        str(values),
        "7",
    )
    assert code == 7 and "counters sum to 82" in out and "failed with exit code 7" in err
    job = yaml.safe_load(
        subprocess.run(
            [
                str(TOOLS_BIN / "kubectl"),
                "--kubeconfig",
                str(kubeconfig),
                "-n",
                namespace,
                "get",
                "job",
                "trainer-fails",
                "-o",
                "yaml",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    assert any(c["type"] == "Failed" and c["status"] == "True" for c in job["status"]["conditions"])


def test_deleting_the_trainers_pod_garbage_collects_its_workers(trainer_namespace, kubeconfig, capsys, core):
    namespace, script, values = trainer_namespace
    settings = script.parent / "trainer.yaml"
    settings.write_text(yaml.safe_dump({"image": TRAINER_IMAGE, "lease_grace_seconds": 2, "restarts": 0}))
    code, _, err = submit_trainer(
        capsys,
        kubeconfig,
        namespace,
        "-f",
        str(settings),
        "--name",
        "trainer-held",
        "--detach",
        "--",
        "python",
        str(script),
        str(values),
        "hold",
    )
    assert code == 0, err
    deadline = time.monotonic() + 180
    workers: list = []
    while time.monotonic() < deadline and len(workers) < 2:
        workers = [
            p
            for p in core.list_namespaced_pod(namespace, label_selector="areal.io/role=actor").items
            if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])
        ]
        time.sleep(0.5)
    assert len(workers) == 2, "the trainer's workers never became ready"
    [trainer] = core.list_namespaced_pod(namespace, label_selector="job-name=trainer-held").items
    statefulset = client_apps(kubeconfig).list_namespaced_stateful_set(namespace).items[0]
    assert [(o.kind, o.name, o.uid) for o in statefulset.metadata.owner_references] == [
        ("Pod", trainer.metadata.name, trainer.metadata.uid)
    ]
    deleted = time.monotonic()
    core.delete_namespaced_pod(trainer.metadata.name, namespace, grace_period_seconds=0)
    while time.monotonic() < deadline:
        left = core.list_namespaced_pod(namespace, label_selector="areal.io/role=actor").items
        if not left and not client_apps(kubeconfig).list_namespaced_stateful_set(namespace).items:
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"workers left after the trainer's pod was deleted: {[p.metadata.name for p in left]}")
    print(f"trainer pod deleted -> last worker gone: {time.monotonic() - deleted:.1f}s", file=sys.stderr)
    # The release record (helm's Secrets) stays with the trainer's Lease, no longer renewed: reaped once a reaper has
    # seen it unchanged for longer than its grace (a first look, and another one the grace later).
    actions = []
    for pause in (0, 3):
        time.sleep(pause)
        assert main(["--kubeconfig", str(kubeconfig), "-n", namespace, "reap", "-o", "json"]) == 0
        [lease] = json.loads(capsys.readouterr().out)["leases"]
        actions.append(lease["action"])
    assert actions == ["alive", "reaped"] and lease["release"].startswith("aw-exp-in-cluster-")
    assert not core.list_namespaced_secret(namespace, label_selector="owner=helm").items


def client_apps(kubeconfig):
    from kubernetes import client, config

    return client.AppsV1Api(config.new_client_from_config(config_file=str(kubeconfig)))


def test_a_killed_attempt_is_followed_by_one_that_gets_the_same_workers_restarted(
    trainer_namespace, kubeconfig, capsys, core
):
    namespace, script, values = trainer_namespace
    settings = script.parent / "trainer.yaml"
    settings.write_text(yaml.safe_dump({"image": TRAINER_IMAGE, "lease_grace_seconds": 4, "restarts": 2}))
    marker = script.parent / "first-attempt-done"
    code, out, err = submit_trainer(
        capsys,
        kubeconfig,
        namespace,
        "-f",
        str(settings),
        "--name",
        "trainer-restarts",
        "--",
        "python",
        str(script),
        str(values),
        f"die-once:{marker}",
        start_timeout=180.0,
    )
    assert code == 0, err
    assert out.count("counters sum to 82") == 2  # fresh counters both times: 41 + 41
    first, second = [json.loads(line.split(": ", 1)[1]) for line in out.splitlines() if "trainer pods: " in line]
    assert {name: uid for name, (uid, _) in second.items()} == {
        name: uid for name, (uid, _) in first.items()
    }  # the same pods, not garbage-collected with the first attempt's pod
    assert all(second[name][1] == restarts + 1 for name, (_, restarts) in first.items())
    assert "attempt 1 of 3, ended (" in err and "succeeded with exit code 0 (attempt 2 of 3" in err
    assert core.list_namespaced_pod(namespace, label_selector="areal.io/role=actor").items == []


def test_secret_and_configmap_references_reach_the_job_never_their_values(trainer_namespace, kubeconfig, capsys, core):
    """The real apiserver accepts the Job `submit` writes with `valueFrom` references (the kubelet resolves them when
    it starts the pod); neither the Job nor its pod template holds the Secret's value."""
    namespace, _, _ = trainer_namespace
    secret = "tok-" + "x" * 24  # what must never appear in the Job
    core.create_namespaced_secret(
        namespace, {"metadata": {"name": "wandb"}, "stringData": {"api-key": secret}, "type": "Opaque"}
    )
    core.create_namespaced_config_map(namespace, {"metadata": {"name": "settings"}, "data": {"mode": "fast"}})
    code, out, err = submit_trainer(
        capsys,
        kubeconfig,
        namespace,
        "--name",
        "trainer-env",
        "--detach",
        "--env-from-secret",
        "WANDB_API_KEY=wandb:api-key",
        "--env-from-configmap",
        "RUN_MODE=settings:mode",
        "--",
        "python",
        "-c",
        "print('started')",
    )
    assert code == 0, err
    job = client.BatchV1Api(core.api_client).read_namespaced_job("trainer-env", namespace)
    env = {e.name: e for e in job.spec.template.spec.containers[0].env}
    assert env["WANDB_API_KEY"].value_from.secret_key_ref.to_dict() == {
        "name": "wandb",
        "key": "api-key",
        "optional": None,
    }
    assert env["RUN_MODE"].value_from.config_map_key_ref.name == "settings"
    assert env["WANDB_API_KEY"].value is None and secret not in json.dumps(job.to_dict(), default=str)
