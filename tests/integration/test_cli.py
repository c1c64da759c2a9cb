"""The areal-workers command against the local cluster: a trial made by KubernetesScheduler (a healthy role and a
crashing one) seen, diagnosed, rolled back and removed with the command alone; output, JSON shape and exit codes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from areal_workers.cli.main import main
from areal_workers.cli.session import (
    EXIT_CLUSTER,
    EXIT_INTERRUPTED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_PROBLEM,
    EXIT_USAGE,
)
from areal_workers.errors import LeaseLostError
from clusterlib import default_sigint, job, spec
from repo_paths import REPO, TOOLS_BIN

CLI = [sys.executable, "-m", "areal_workers.cli"]
WITH_HELM = {**os.environ, "PATH": f"{TOOLS_BIN}{os.pathsep}{os.environ['PATH']}"}
CRASH = "python -c 'import sys; print(\"cannot load /ckpt/step-100: no such file\", flush=True); sys.exit(3)'"
# A worker that logs one line, then nothing: no probe answers, no access log (AReaL's rpc_server between calls).
QUIET = "python -c 'import time; print(\"quiet worker started\", flush=True); time.sleep(3600)'"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def cli(kubeconfig, namespace, capsys, monkeypatch):
    """areal-workers in this process, aimed at the test's namespace; returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("PATH", f"{REPO / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}")  # helm

    def call(*argv: str) -> tuple[int, str, str]:
        return run(capsys, "--kubeconfig", str(kubeconfig), "-n", namespace, *argv)

    return call


@pytest.fixture
def crashing_trial(make_scheduler, capsys, monkeypatch):
    """actor: 2 ready workers (revision 1, the last all-ready one); broken: 2 workers whose command exits 3
    (revision 2), never waited for, so nothing rolled it back. No trainer's Lease: a person's trial, as `up` makes
    one (down and rollback refuse a live trainer's: test_down_refuses_a_live_trainer_unless_forced)."""
    monkeypatch.setenv("PATH", f"{TOOLS_BIN}{os.pathsep}{os.environ['PATH']}")  # helm
    scheduler = make_scheduler(lease_grace_seconds=0)
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("actor")
    scheduler.create_workers(job("broken", 2, [spec(cmd=CRASH)]))
    status = ("--kubeconfig", str(scheduler.config.kubeconfig), "-n", scheduler.namespace, "status", "-o", "json")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # until a broken worker has crashed at least once
        _, out, _ = run(capsys, *status)  # in this process: a second of CPU less per look than `python -m`
        broken = [w for w in json.loads(out)["trials"][0]["workers"] if w["role"] == "broken"]
        if broken and all(w["fatal"] for w in broken):
            break
        time.sleep(1)
    return scheduler


def test_status_shows_every_worker_with_the_reason_one_is_not_ready(cli, crashing_trial):
    code, out, _ = cli("status", "-o", "json")
    assert code == EXIT_PROBLEM  # a worker is not ready
    status = json.loads(out)
    [trial] = status["trials"]
    assert trial["release"] == crashing_trial.release and (trial["experiment"], trial["trial"]) == ("exp", "trial0")
    assert trial["revision"] == 2 and trial["ready_revision"] == 1 and trial["helm_status"] == "deployed"
    workers = {w["id"]: w for w in trial["workers"]}
    assert set(workers) == {"actor/0", "actor/1", "broken/0", "broken/1"}
    actor = workers["actor/0"]
    assert actor["ready"] and actor["ip"] and actor["ports"] and actor["node"] and actor["pod"].endswith("actor-0")
    broken = workers["broken/1"]
    assert not broken["ready"] and broken["fatal"] and broken["reason"]
    assert {(r["name"], r["kind"], r["ready"], r["replicas"]) for r in trial["roles"]} == {
        ("actor", "role", 2, 2),
        ("broken", "role", 0, 2),
    }

    code, table, _ = cli("status", "--release", crashing_trial.release)
    assert code == EXIT_PROBLEM
    for text in ("actor/0", "broken/1", "FAILED", broken["reason"][:30], "revision 2 (deployed)", "2/4 workers ready"):
        assert text in table


def test_diagnose_names_the_exit_code_and_the_workers_own_log(cli, crashing_trial):
    code, out, _ = cli("diagnose", "broken")
    assert code == EXIT_PROBLEM
    assert "exit code 3" in out and "cannot load /ckpt/step-100: no such file" in out and "[fatal]" in out

    code, out, _ = cli("diagnose", "broken/0", "-o", "json")
    assert code == EXIT_PROBLEM
    report = json.loads(out)
    [finding] = report["workers"]
    assert finding["worker"] == "broken/0" and report["healthy"] is False
    assert finding["problem"]["exit_code"] == 3 and finding["problem"]["fatal"] is True
    assert any("cannot load /ckpt/step-100" in line for line in finding["problem"]["log_tail"])

    code, out, _ = cli("diagnose", "actor")
    assert code == EXIT_OK and out.count("ready, no problem found") == 2
    assert cli("diagnose", "critic")[0] == EXIT_NOT_FOUND
    code, _, err = cli("diagnose", "actor/7")
    assert code == EXIT_NOT_FOUND and "0..1" in err


def test_logs_of_a_worker_and_of_a_crashed_one(cli, crashing_trial):
    code, out, _ = cli("logs", "broken/0", "--tail", "5")
    assert code == EXIT_OK and "cannot load /ckpt/step-100" in out
    code, out, _ = cli("logs", "actor/1")
    assert code == EXIT_OK and out.strip()
    assert cli("logs", "actor/9")[0] == EXIT_NOT_FOUND


def test_logs_follow_streams_until_interrupted(kubeconfig, crashing_trial):
    follow = subprocess.Popen(
        [*CLI, "--kubeconfig", str(kubeconfig), "-n", crashing_trial.namespace, "logs", "actor/0", "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=WITH_HELM,
        preexec_fn=default_sigint,
    )
    first = follow.stdout.readline()  # the log so far arrives at once; -f keeps the stream open
    time.sleep(1)
    alive = follow.poll() is None
    if alive:
        follow.send_signal(signal.SIGINT)  # Ctrl-C: the normal end of -f
    code = follow.wait(30)
    errors = follow.stderr.read()
    assert first.strip(), f"no log line (exit {code}): {errors}"
    assert alive, f"logs -f ended on its own (exit {code}): {errors}"
    assert code == EXIT_INTERRUPTED, errors


def test_logs_follow_of_a_quiet_worker_ends_at_the_first_sigint(cli, make_scheduler):
    """Nothing arrives after the first line, so the reader thread sits in its SSL read: one SIGINT ends the command
    with 130 (it hung until SIGTERM when an interrupted join marked the reader stopped and its socket stayed open).
    `logs quiet` takes the role, as `kubectl logs` takes a workload: its rank 0."""
    scheduler = make_scheduler(lease_grace_seconds=0)
    scheduler.create_workers(job("quiet", 1, [spec(cmd=QUIET)]))  # never ready: not waited for
    deadline, out = time.monotonic() + 120, ""
    while "quiet worker started" not in out and time.monotonic() < deadline:
        time.sleep(1)
        _, out, _ = cli("logs", "quiet", "--since", "10m")
    assert "quiet worker started" in out
    follow = subprocess.Popen(
        [*CLI, "--kubeconfig", str(scheduler.config.kubeconfig), "-n", scheduler.namespace, "logs", "quiet", "-f"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=WITH_HELM,
        preexec_fn=default_sigint,
    )
    first = follow.stdout.readline()  # the stream is open; nothing more will come
    follow.send_signal(signal.SIGINT)  # once
    try:
        code: int | None = follow.wait(60)  # a hang guard, not a timing assertion
    except subprocess.TimeoutExpired:
        code = None
        follow.kill()
        follow.wait()
    errors = follow.stderr.read()
    assert first.strip() == "quiet worker started", errors
    assert code == EXIT_INTERRUPTED, f"logs -f after one SIGINT: exit {code} (None: still running after 60 s): {errors}"


def test_history_then_rollback_to_the_last_all_ready_revision(cli, crashing_trial, core):
    code, out, _ = cli("history", "-o", "json")
    assert code == EXIT_OK
    history = json.loads(out)
    assert [r["description"] for r in history["revisions"]] == [
        "create actor: 2 worker(s)",
        "create broken: 2 worker(s)",
    ]
    assert history["ready_revision"] == 1 and history["revisions"][0]["all_ready"]

    code, out, _ = cli("rollback", "--dry-run", "-o", "json")  # what it would do, and nothing done
    assert code == EXIT_OK
    assert json.loads(out) == {
        "release": crashing_trial.release,
        "from_revision": 2,
        "to_revision": 1,
        "why": "the last all-ready revision",
        "changes": ["broken: removed (2 worker(s))"],
    }
    assert [r["revision"] for r in json.loads(cli("history", "-o", "json")[1])["revisions"]] == [1, 2]

    code, out, err = cli("rollback", "-o", "json", "--timeout", "120")
    assert "broken: removed (2 worker(s))" in err  # said before it is done, also without a terminal
    assert code == EXIT_OK
    outcome = json.loads(out)
    assert (outcome["from_revision"], outcome["to_revision"], outcome["new_revision"]) == (2, 1, 3)
    assert outcome["ready"] is True
    pods = core.list_namespaced_pod(
        crashing_trial.namespace, label_selector=f"app.kubernetes.io/instance={crashing_trial.release}"
    ).items
    assert sorted(p.metadata.labels["areal.io/role"] for p in pods) == ["actor", "actor"]
    code, out, _ = cli("status", "-o", "json")
    assert code == EXIT_OK and json.loads(out)["trials"][0]["ready_revision"] == 3
    assert cli("rollback", "7")[0] == EXIT_NOT_FOUND


def test_down_asks_first_then_removes_the_release_and_its_pods(cli, make_scheduler, core, namespace):
    scheduler = make_scheduler(lease_grace_seconds=0)
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    code, _, err = cli("down")  # stdin is not a terminal under pytest
    assert code == EXIT_USAGE and "--yes" in err and scheduler.release in err
    assert core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={scheduler.release}").items

    code, out, _ = cli("down", "--yes", "-o", "json")
    [deleted] = json.loads(out)["deleted_pods"]
    assert code == EXIT_OK and deleted.startswith(scheduler.release) and deleted.endswith("-actor-0")
    assert (
        core.list_namespaced_pod(namespace, label_selector=f"app.kubernetes.io/instance={scheduler.release}").items
        == []
    )
    code, out, _ = cli("status", "-o", "json")
    assert code == EXIT_OK and json.loads(out)["trials"] == []
    assert cli("down", "--yes")[0] == EXIT_NOT_FOUND


def test_down_refuses_a_live_trainer_unless_forced(cli, make_scheduler, core, namespace):
    """The trainer renews its Lease: its next change would bring back what `down` removed. Refused; --force takes
    the Lease, and once the trainer's next renewal has seen that (within a renewal interval, 1 s here), its next
    call raises instead of re-creating the workers. A call within that interval is not refused by the Lease: a
    `down --force` done in under a second raced it on a loaded CI machine (the role's own check refused it)."""
    trainer = make_scheduler(lease_grace_seconds=4)  # renews every second: seen alive within two
    trainer.create_workers(job("actor", 1))
    trainer.get_workers("actor")
    selector = f"app.kubernetes.io/instance={trainer.release}"
    code, _, err = cli("down", "--yes")
    assert code == EXIT_USAGE and "its trainer is alive" in err and "--force" in err
    assert core.list_namespaced_pod(namespace, label_selector=selector).items

    code, _, err = cli("down", "--yes", "--force")
    assert code == EXIT_OK, err
    assert core.list_namespaced_pod(namespace, label_selector=selector).items == []
    deadline = time.monotonic() + 60
    while trainer.lease is not None and trainer.lease.lost is None and time.monotonic() < deadline:
        time.sleep(0.1)
    with pytest.raises(LeaseLostError):
        trainer.create_workers(job("critic", 1))  # a new role: nothing but the Lease refuses it
    trainer.close()


def test_every_trial_of_a_namespace_and_naming_one(cli, make_scheduler):
    first, second = make_scheduler("t1"), make_scheduler("t2")
    for scheduler in (first, second):
        scheduler.create_workers(job("actor", 1))
        scheduler.get_workers("actor")
    code, out, _ = cli("status", "-o", "yaml")
    assert code == EXIT_OK
    assert sorted(t["trial"] for t in yaml.safe_load(out)["trials"]) == ["t1", "t2"]
    code, _, err = cli("history")
    assert code == EXIT_USAGE and first.release in err and second.release in err  # which one? name it
    code, out, _ = cli("history", "--experiment", "exp", "--trial", "t2", "-o", "json")
    assert code == EXIT_OK and json.loads(out)["release"] == second.release


def test_watch_redraws_as_a_pod_is_replaced(kubeconfig, namespace, make_scheduler, core):
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 2))
    scheduler.get_workers("actor")
    watch = subprocess.Popen(
        [
            *CLI,
            "--kubeconfig",
            str(kubeconfig),
            "-n",
            namespace,
            "status",
            "--watch",
            "--watch-seconds",
            "60",
            "-o",
            "json",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=WITH_HELM,
    )
    snapshots: list[dict] = []
    reader = threading.Thread(target=lambda: snapshots.extend(json.loads(line) for line in watch.stdout))
    reader.start()
    deadline = time.monotonic() + 60
    while not snapshots and time.monotonic() < deadline:
        time.sleep(0.2)
    assert snapshots, "no first snapshot"
    [pod] = [
        p
        for p in core.list_namespaced_pod(namespace, label_selector="areal.io/role=actor").items
        if p.metadata.labels["apps.kubernetes.io/pod-index"] == "1"
    ]
    core.delete_namespaced_pod(pod.metadata.name, namespace)

    def actor_1(snapshot: dict) -> dict:
        return next(w for w in snapshot["trials"][0]["workers"] if w["id"] == "actor/1")

    def replaced(snapshot: dict) -> bool:  # its new pod runs, and is failed: AReaL held the one it replaced
        row = actor_1(snapshot)
        return row["state"] == "Running" and row["reason"].startswith("RestartedAfterReady")

    while time.monotonic() < deadline:
        seen = list(snapshots)
        dropped = [i for i, s in enumerate(seen) if not actor_1(s)["ready"]]
        if dropped and any(replaced(s) for s in seen[dropped[0] :]):
            break
        time.sleep(0.2)
    watch.terminate()
    watch.wait(30)
    reader.join(30)
    states = [actor_1(s)["ready"] for s in snapshots]
    assert states[0] is True and False in states and replaced(snapshots[-1]), actor_1(snapshots[-1])


def test_a_reader_gone_ends_a_watch_with_141_not_a_cluster_error(kubeconfig, crashing_trial, core):
    """`areal-workers status -w -o json | head -1`: the pipe's reader leaves after one line. The next write fails
    with a BrokenPipeError (a ConnectionError to Python), which is the reader's end, not the apiserver's: the watch
    ends at once with 141, as a shell pipeline's writer does, and says nothing."""
    namespace = crashing_trial.namespace
    command = [*CLI, "--kubeconfig", str(kubeconfig), "-n", namespace, "status", "--watch", "-o", "json"]
    watch = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=WITH_HELM)
    try:
        assert watch.stdout.readline(), watch.stderr.read()
        watch.stdout.close()  # `head -1` exits
        selector = "areal.io/role=actor,apps.kubernetes.io/pod-index=0"
        [pod] = core.list_namespaced_pod(namespace, label_selector=selector).items
        core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"labels": {"touched": "yes"}}})
        code = watch.wait(60)  # the change is the next snapshot, written to the closed pipe
    finally:
        watch.kill()
    errors = watch.stderr.read().decode()
    assert (code, errors) == (EXIT_PIPE, ""), errors


def test_render_a_job_file_without_a_cluster(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", f"{REPO / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    unreachable = tmp_path / "kubeconfig"
    unreachable.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:9"}}],
                "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
                "current-context": "x",
                "users": [{"name": "x", "user": {}}],
            }
        )
    )
    jobs = tmp_path / "job.yaml"
    jobs.write_text(
        yaml.safe_dump(
            {
                "experiment": "gsm8k",
                "trial": "t1",
                "jobs": [
                    {
                        "role": "actor",
                        "replicas": 4,
                        "tasks": [
                            {
                                "cpu": 4,
                                "gpu": 1,
                                "mem": 16,
                                "image": "reg.example/areal:1.0",
                                "cmd": "python -m areal.infra.rpc.rpc_server",
                            }
                        ],
                    },
                    {
                        "role": "ref",
                        "replicas": 4,
                        "scheduling_strategy": {"type": "colocation", "target": "actor", "fork": False},
                    },
                ],
            }
        )
    )
    code, out, _ = run(capsys, "--kubeconfig", str(unreachable), "-n", "rl", "render", "-f", str(jobs), "-o", "json")
    assert code == EXIT_OK
    rendered = json.loads(out)
    assert rendered["values"]["roles"]["actor"]["replicas"] == 4 and rendered["values"]["colocations"] == {
        "ref": "actor"
    }
    [statefulset] = [m for m in rendered["manifests"] if m["kind"] == "StatefulSet"]
    assert statefulset["spec"]["replicas"] == 4 and statefulset["metadata"]["namespace"] == "rl"
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert (
        container["image"] == "reg.example/areal:1.0" and str(container["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    )

    code, out, _ = run(capsys, "render", "-f", str(jobs), "--show", "values")
    assert code == EXIT_OK and "kind:" not in out and "gsm8k" in out

    jobs.write_text(yaml.safe_dump({"role": "actor", "replicas": 1, "tasks": [{"gpus": 1}]}))
    code, _, err = run(capsys, "render", "-f", str(jobs))
    assert code == EXIT_USAGE and "unknown field(s) gpus" in err and "gpu" in err
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump({"workerDefaults": {"terminationGracePeriodSeconds": -1}, "roles": {"actor": {"replicas": 1}}})
    )
    code, _, err = run(capsys, "render", "--values", str(values))
    assert code == EXIT_USAGE and "terminationGracePeriodSeconds" in err


def test_completion_scripts_are_valid_shell(capsys):
    code, out, _ = run(capsys, "completion", "bash")
    assert code == EXIT_OK and "complete -F _areal_workers areal-workers" in out and "diagnose" in out
    subprocess.run(["bash", "-n"], input=out, text=True, check=True)
    assert "--watch" in out and "--rank-zero-last" in out


def test_an_unreachable_cluster_is_exit_4_with_what_to_check(tmp_path, capsys):
    missing = tmp_path / "none.yaml"
    missing.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "x", "cluster": {"server": "https://127.0.0.1:9"}}],
                "contexts": [{"name": "x", "context": {"cluster": "x", "user": "x"}}],
                "current-context": "x",
                "users": [{"name": "x", "user": {}}],
            }
        )
    )
    code, _, err = run(capsys, "--kubeconfig", str(missing), "-n", "x", "status")
    assert code == EXIT_CLUSTER and "cannot reach the Kubernetes API server at https://127.0.0.1:9" in err
    assert "--kubeconfig, --context" in err and "kubectl cluster-info" in err


def test_the_installed_entry_point_runs(kubeconfig, namespace):
    script = Path(sys.executable).with_name("areal-workers")
    done = subprocess.run(
        [str(script), "--kubeconfig", str(kubeconfig), "-n", namespace, "status", "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == EXIT_OK, done.stderr
    assert json.loads(done.stdout) == {"namespace": namespace, "trials": []}


def test_doctor_names_the_one_permission_a_service_account_lacks(
    cli, kube_client, kubeconfig, namespace, tmp_path, capsys
):
    from kubernetes import client

    from clusterlib import controller_kubeconfig
    from test_doctor_on_cluster import ROLE, ROLE_FILE, _wait_denied, _without

    code, out, _ = cli("doctor", "--no-probe", "-o", "json")
    assert code == EXIT_OK
    checks = {c["name"]: c["status"] for c in json.loads(out)["checks"]}
    assert checks["chart renders"] == "pass" and checks["permission get pods/log"] == "pass"

    credentials = controller_kubeconfig(kubeconfig, namespace, tmp_path / "controller.yaml")
    rbac = client.RbacAuthorizationV1Api(kube_client)
    role = rbac.read_namespaced_role(ROLE, namespace)
    role.rules = _without(yaml.safe_load(ROLE_FILE.read_text())["rules"], "pods/log", "get")
    rbac.replace_namespaced_role(ROLE, namespace, role)
    _wait_denied(kube_client, namespace, "get", "pods/log")
    code, out, _ = run(capsys, "--kubeconfig", credentials, "-n", namespace, "doctor", "--no-probe")
    assert code == EXIT_PROBLEM
    assert "FAIL  permission get pods/log" in out and "granted by rbac/role.yaml" in out
    assert "warn  permission list nodes" in out  # cluster scope: rbac/ grants nothing there


def test_the_job_file_of_the_cli_reference_renders(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PATH", f"{REPO / '.tools' / 'bin'}{os.pathsep}{os.environ['PATH']}")
    page = (REPO / "docs" / "en" / "cli.md").read_text()
    example = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    job_file = tmp_path / "job.yaml"
    job_file.write_text(example)
    code, out, err = run(capsys, "-n", "rl", "render", "-f", str(job_file), "-o", "json")
    assert code == EXIT_OK, err
    rendered = json.loads(out)
    assert rendered["values"]["experiment"] == "gsm8k-grpo" and rendered["values"]["colocations"] == {"ref": "actor"}
    assert [m["spec"]["replicas"] for m in rendered["manifests"] if m["kind"] == "StatefulSet"] == [4]


def test_up_creates_a_trial_from_a_job_file_and_reports_a_failing_role_rolled_back(
    cli, pod_runner, namespace, tmp_path, worker_lane, core
):
    from clusterlib import RUN_PODS, lane_values

    pod_runner(namespace)
    platform = tmp_path / "platform.json"
    platform.write_text(json.dumps({**RUN_PODS, **lane_values(worker_lane, tmp_path / "areal")}))
    task = {"cpu": 1, "mem": 1, "cmd": "python -m areal.infra.rpc.rpc_server"}
    jobs = tmp_path / "job.yaml"
    jobs.write_text(
        yaml.safe_dump(
            {"experiment": "exp", "trial": "up", "jobs": [{"role": "actor", "replicas": 2, "tasks": [task]}]}
        )
    )
    timeout = str(worker_lane.timeouts["ready_timeout"])
    code, out, err = cli("up", "-f", str(jobs), "--values", str(platform), "--timeout", timeout, "-o", "json")
    assert code == EXIT_OK, err
    made = json.loads(out)
    assert [w["id"] for w in made["workers"]] == ["actor/0", "actor/1"] and all(w["ip"] for w in made["workers"])
    assert cli("status", "-o", "json")[0] == EXIT_OK
    # A person's release: no Lease, so no reaper ever removes it (docs/en/decisions.md)
    code, out, _ = cli("reap", "-o", "json")
    assert code == EXIT_OK and made["release"] not in [lease["release"] for lease in json.loads(out)["leases"]]

    jobs.write_text(
        yaml.safe_dump(
            {
                "experiment": "exp",
                "trial": "up",
                "jobs": [
                    {"role": "actor", "replicas": 2, "tasks": [task]},
                    {"role": "broken", "replicas": 1, "tasks": [{**task, "cmd": CRASH}]},
                ],
            }
        )
    )
    code, _, err = cli("up", "-f", str(jobs), "--values", str(platform), "--timeout", timeout)
    assert code == EXIT_PROBLEM and "error: worker broken/0 exited with code 3" in err and "rolled back release" in err
    assert "exit code: 3" in err and "Stderr output" not in err
    history = json.loads(cli("history", "-o", "json")[1])
    assert [r["description"] for r in history["revisions"]][-1] == "Rollback to 1"
    assert cli("down", "--yes")[0] == EXIT_OK


def test_a_failed_up_prints_its_diagnosis_once_and_no_exit_code_when_no_container_exited(
    cli, pod_runner, namespace, tmp_path, worker_lane
):
    """An image that never pulls (the local cluster fails images of registry.invalid as a kubelet does): the
    diagnosis once, then one line for the rollback; no "exit code -1" or "Stderr output:", which
    only repeated the diagnosis as noise."""
    from clusterlib import RUN_PODS, lane_values

    pod_runner(namespace)
    platform = tmp_path / "platform.json"
    platform.write_text(json.dumps({**RUN_PODS, **lane_values(worker_lane, tmp_path / "areal")}))
    task = {"cpu": 1, "mem": 1, "cmd": "python -m areal.infra.rpc.rpc_server"}
    jobs = tmp_path / "job.yaml"
    trial = {"experiment": "exp", "trial": "pull"}
    jobs.write_text(yaml.safe_dump({**trial, "jobs": [{"role": "actor", "replicas": 1, "tasks": [task]}]}))
    timeout = str(worker_lane.timeouts["ready_timeout"])
    code, _, err = cli("up", "-f", str(jobs), "--values", str(platform), "--timeout", timeout)
    assert code == EXIT_OK, err

    bad = {**task, "image": "registry.invalid/areal-runtime:v1.0.4"}
    jobs.write_text(yaml.safe_dump({**trial, "jobs": [{"role": "actor", "replicas": 1, "tasks": [bad]}]}))
    code, _, err = cli("up", "-f", str(jobs), "--values", str(platform), "--timeout", timeout)
    assert code == EXIT_PROBLEM, err
    assert "exit code -1" not in err and "Stderr output" not in err, err
    assert err.count("[fatal]") == 1 and ("ErrImagePull" in err or "ImagePullBackOff" in err), err
    assert "error: worker actor/0 cannot become ready" in err, err
    rollback = [line for line in err.splitlines() if "rolled back release" in line]
    assert len(rollback) == 1 and err.rstrip().endswith(rollback[0]), err
    # The history says what the update changed, that its workers failed, and why the next revision rolled back
    revisions = json.loads(cli("history", "-o", "json")[1])["revisions"]
    update, back = revisions[-2], revisions[-1]
    assert update["description"].startswith("update actor: image ") and update["description"].endswith(
        "->registry.invalid/areal-runtime:v1.0.4"
    ), update
    assert re.match(r"workers failed: (ErrImagePull|ImagePullBackOff) \(actor/0\)$", update["note"]), update
    assert back["description"] == "Rollback to 1" and back["note"].startswith(f"after revision {update['revision']}")
    assert cli("down", "--yes")[0] == EXIT_OK
