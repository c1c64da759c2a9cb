"""AReaL's SFT trainer, unmodified, as a Job on the real node: a trial the way a platform runs one.

The entry script is written as AReaL's own are (tests/support/areal_sft_entry.py: config parser, tokenizer, datasets,
`SFTTrainer(...).train()`) and knows nothing of areal-workers; `areal-workers submit` runs it through the launcher,
which registers the Kubernetes scheduler, and every setting reaches it as an AREAL_K8S_* variable. The namespace is
prepared as the deployment guide prepares one: rbac/ with its admission policy, a ReadWriteMany claim holding the
model, the datasets, AReaL's fileroot and name_resolve root, and a platform values file. The trainer pod runs on the
real node as the controller's ServiceAccount and reaches the API server through the node's relay (the submit file
`localcluster.py up` writes); its worker is a real container there too, with FSDP on CPU over gloo. Killed twice,
the trainer resumes from its checkpoint with the same worker (AReaL's recover, `submit`'s restarts).

What is not a user's: the model and datasets are tiny ones made here (tests/support/tiny_sft_assets.py; nothing is
downloaded), the experiment trackers AReaL's modules import are stand-ins (disabled in the config anyway), AReaL's
environment and this checkout's package are mounted from the host instead of being in the image, and the datasets
load in the trainer (AReaL's data service needs a CPU more than the node has beside the trainer and its worker).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from localkube.cluster import LocalCluster
from localkube.rbac import apply_rbac
from real_node_trials import host_claim, role_pods
from realnode.config import NODE_NAME
from realnode.values import worker_values
from repo_paths import AREAL_WORKER_ENV, AREAL_WORKER_PYTHON, REPO

pytestmark = [
    pytest.mark.serial_cluster,
    pytest.mark.real_node,
    pytest.mark.skipif(bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="the local cluster's real node only"),
]

SUPPORT = REPO / "tests" / "support"
CLI = REPO / ".venv" / "bin" / "areal-workers"
CLAIM = "areal-shared"
EXPERIMENT = "sft-job"
TIMEOUT = 900
STEPS_PER_EPOCH = 8  # tiny_sft_assets' 64 training rows in batches of 8
RPC_SERVER = "python3 -m areal.infra.rpc.rpc_server"  # AReaL's worker command (its examples' scheduling_spec)


@pytest.fixture
def prepared(real_node, core, kubeconfig, tmp_path):
    """(namespace, shared directory): rbac/ and its admission policy applied, the claim bound to the directory, and
    hostPath volumes allowed (the real node mounts AReaL's environment from the host)."""
    namespace = f"t-sft-job-{uuid.uuid4().hex[:6]}"
    labels = {"areal-workers.dev/allow-host-path": "true"}
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=namespace, labels=labels)))
    assert apply_rbac(kubeconfig, namespace), "the admission policy is in force for the controller"
    shared = tmp_path / "shared"
    shared.mkdir()
    volume = host_claim(core, shared, namespace, CLAIM)
    yield namespace, shared
    core.delete_namespace(namespace, propagation_policy="Background")
    core.delete_persistent_volume(volume)


def write_inputs(shared: Path, trial: str, steps: int) -> tuple[Path, Path, Path]:
    """The model, datasets, entry script, stand-ins, platform values and SFT config on the shared volume, as a
    platform and a researcher would put them there; (entry script, config, values file)."""
    made = subprocess.run(
        [str(AREAL_WORKER_PYTHON), "-m", "tiny_sft_assets", str(shared)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(SUPPORT)},
    )
    assert made.returncode == 0, made.stderr
    entry = Path(shutil.copy2(SUPPORT / "areal_sft_entry.py", shared))
    shutil.copytree(SUPPORT / "areal_trainer_stand_ins", shared / "stand_ins")
    values = worker_values(AREAL_WORKER_ENV)  # the node's image and AReaL's environment
    values["workerDefaults"]["env"] = {"PYTHONPATH": str(shared / "stand_ins")}
    values["sharedStorage"] = {"enabled": True, "claimName": CLAIM, "mountPath": str(shared)}
    values["cluster"] = {"fileroot": str(shared / "fileroot"), "nameResolve": {"nfsRecordRoot": str(shared / "nr")}}
    values_file = shared / "platform.yaml"
    values_file.write_text(yaml.safe_dump(values))
    config = shared / "sft.yaml"
    config.write_text(yaml.safe_dump(sft_config(shared, trial, steps), sort_keys=False))
    subprocess.run(["chmod", "-R", "a+rwX", str(shared)], check=True)  # the pods run as uid 1000
    return entry, config, values_file


def sft_config(shared: Path, trial: str, steps: int) -> dict:
    """AReaL's examples/math/gsm8k_sft.yaml, scaled to a CPU: one FSDP worker, float32, `steps` steps, no model
    checkpoints, a recover checkpoint after every step (AReaL's recover.mode on)."""
    utility = {"experiment_name": "${experiment_name}", "trial_name": "${trial_name}"}
    utility["fileroot"] = "${cluster.fileroot}"
    never = {"freq_epochs": None, "freq_steps": None, "freq_secs": None}
    dataset = {"path": str(shared / "gsm8k"), "type": "sft", "batch_size": 8, "num_workers": 0, "pin_memory": False}
    return {
        "experiment_name": EXPERIMENT,
        "trial_name": trial,
        "seed": 1,
        "total_train_epochs": -(-steps // STEPS_PER_EPOCH),
        "total_train_steps": steps,
        "tokenizer_path": "${actor.path}",
        "cluster": {
            "n_nodes": 1,
            "n_gpus_per_node": 0,
            "fileroot": str(shared / "fileroot"),
            "name_resolve": {"type": "nfs", "nfs_record_root": str(shared / "nr")},
        },
        "scheduler": {"type": "kubernetes"},
        "actor": {
            "backend": "fsdp:d1",
            "experiment_name": "${experiment_name}",
            "trial_name": "${trial_name}",
            "path": str(shared / "model"),
            "gradient_checkpointing": False,
            "dtype": "float32",
            "attn_impl": "sdpa",
            "mb_spec": {"max_tokens_per_mb": 1024},
            "optimizer": {"type": "adam", "lr": 1e-3, "lr_scheduler_type": "constant", "gradient_clipping": 1.0},
            "scheduling_spec": [
                {"task_type": "worker", "port_count": 2, "cpu": 1, "gpu": 0, "mem": 3, "cmd": RPC_SERVER}
            ],
        },
        # Loaded in the trainer: AReaL's data service would put a worker of its own beside them.
        "train_dataset": {**dataset, "shuffle": True, "scheduling_spec": None},
        "valid_dataset": {**dataset, "scheduling_spec": None},
        "saver": {**utility, **never},
        "evaluator": {**utility, **never},
        "recover": {**utility, "mode": "on", "freq_steps": 1},
        "stats_logger": {**utility, "wandb": {"mode": "disabled"}},
    }


def submit_file(shared: Path, values_file: Path, **settings: object) -> Path:
    """The real node's submit file (written by `localcluster.py up`: image, placement, AReaL's environment, helm,
    the API relay), with the trial's own: the claim, the platform values, the trainer's size."""
    spec = yaml.safe_load(LocalCluster().real_node().paths.trainer_submit.read_text())
    spec.update(name="sft", cpu="500m", memory="3Gi", **settings)
    spec["volumes"].append({"name": "shared", "persistentVolumeClaim": {"claimName": CLAIM}})
    spec["volume_mounts"].append({"name": "shared", "mountPath": str(shared)})
    spec["env"].update(
        {
            "PYTHONPATH": f"{spec['env']['PYTHONPATH']}:{shared / 'stand_ins'}",
            "AREAL_K8S_VALUES_FILES": str(values_file),
            "AREAL_K8S_READY_TIMEOUT": "5m",
            "AREAL_K8S_HELM_TIMEOUT": "5m",
            "AREAL_K8S_TERMINATION_GRACE_SECONDS": "5",
        }
    )
    path = shared / "submit.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


RECOVER_STEPS = 24  # a tenth of a second each: the run must outlast the log's way to the test and the kills
STEP_DONE = re.compile(r"Train step (\d+)/\d+ done")


def trainer_processes(entry: Path) -> list[int]:
    """The host pids of the trainer container's processes (the real node's containers are processes of this host):
    those running the entry script, but not the `submit` command that names it."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [w.decode(errors="replace") for w in argv]
        if str(entry) in words and "submit" not in words:
            found.append(int(proc.name))
    return found


@pytest.mark.timeout(2 * TIMEOUT)
def test_an_unmodified_areal_sft_script_trains_as_a_trainer_job_and_resumes_after_its_pod_is_killed(
    prepared, core, kubeconfig
):
    """The run as a platform runs it (the trainer pod on the real node as the controller, its worker a container
    there), and AReaL's recover on Kubernetes: the SFT trainer checkpoints every step (recover.mode on); its pod is
    deleted after its first step (a preemption, a drain) and the next attempt's trainer is SIGKILLed after its first
    step (an OOM kill); each next attempt of the Job takes over the Lease, gets the same worker pod (restarted in
    place, never scheduled again), resumes after the last checkpoint (a later step than its predecessor began with),
    and the last one finishes the run."""
    namespace, shared = prepared
    trial = f"t{uuid.uuid4().hex[:6]}"
    entry, config, values_file = write_inputs(shared, trial, RECOVER_STEPS)
    spec = submit_file(shared, values_file, restarts=2, lease_grace_seconds=8)
    command = [str(CLI), "--kubeconfig", str(kubeconfig), "-n", namespace, "submit", "-f", str(spec)]
    command += ["--start-timeout", "5m", "--", "python", str(entry), "--config", str(config)]
    started = time.monotonic()
    run = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    attempts: list[list[tuple[int, float]]] = [[]]  # per attempt: (global step done, when)
    kills: list[float] = []
    workers: set[tuple[str, str]] = set()  # the worker pod (name, uid) at each kill
    assert run.stdout is not None
    for line in run.stdout:
        output.append(line)
        if "the Job starts the next attempt" in line:  # submit's word between two attempts
            attempts.append([])
        done = STEP_DONE.search(line)
        if done is None:
            continue
        attempts[-1].append((int(done.group(1)), time.monotonic()))
        if len(attempts[-1]) > 1 or len(kills) == 2 or len(kills) == len(attempts):
            continue
        workers.update((p.metadata.name, p.metadata.uid) for p in role_pods(core, namespace, "actor"))
        kills.append(time.monotonic())
        if len(kills) == 1:  # after the first step: the pod deleted (a preemption, a drain)
            for pid in trainer_processes(entry):  # held where it is until the kubelet kills it
                os.kill(pid, signal.SIGSTOP)
            [pod] = core.list_namespaced_pod(namespace, label_selector="job-name=sft").items
            core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=1)
        else:  # after the resumed attempt's first step: its processes SIGKILLed (an OOM kill)
            for pid in trainer_processes(entry):
                os.kill(pid, signal.SIGKILL)
    code = run.wait(TIMEOUT)
    text = "".join(output)
    assert code == 0, text[-6000:]
    assert "Training completes!" in text and text.count("Recovering from") == 2, text[-3000:]
    assert "Unclosed client session" not in text and "destroyed but it is pending" not in text
    firsts = [steps[0][0] for steps in attempts]
    assert len(attempts) == 3 and firsts[0] == 1 and firsts[0] < firsts[1] < firsts[2], attempts
    assert attempts[-1][-1][0] == RECOVER_STEPS  # resumed, not started over: the run ends at its last step
    assert len(workers) == 1, workers  # the same worker pod (name and uid) at both kills
    scheduled = [e.message for e in core.list_namespaced_event(namespace).items if e.reason == "Scheduled"]
    assert [m for m in scheduled if "-actor-0 to " in m] == [m for m in scheduled if f"-actor-0 to {NODE_NAME}" in m]
    assert len([m for m in scheduled if "-actor-0 to " in m]) == 1, scheduled  # never scheduled again
    trainers = core.list_namespaced_pod(namespace, label_selector="job-name=sft").items
    assert sorted(p.status.phase for p in trainers) == ["Failed", "Succeeded"]  # the deleted one is gone
    assert all(p.spec.node_name == NODE_NAME and p.spec.service_account_name == "areal-controller" for p in trainers)
    # AReaL's TrainController deleted its workers and the release went with them: only the trainer's pods are left.
    left = core.list_namespaced_pod(namespace).items
    assert sorted(p.metadata.name for p in left) == sorted(p.metadata.name for p in trainers), (
        [(p.metadata.name, p.metadata.deletion_timestamp, p.status.phase) for p in left],
        text[-5000:],
    )
    assert not core.list_namespaced_secret(namespace, field_selector="type=helm.sh/release.v1").items
    # One claim, one user: the trainer's logs and the worker's name_resolve record, both under AReaL's user key
    # (USER), which `submit` gives the trainer from the chart's workers.
    assert (shared / "fileroot" / "logs" / "areal" / EXPERIMENT / trial / "main.log").is_file()
    assert (shared / "nr" / "areal" / EXPERIMENT / trial / "workers" / "actor").is_dir()
    cold = attempts[0][0][1] - started
    resumed = [attempts[i + 1][0][1] - kills[i] for i in (0, 1)]
    print(
        f"submit -> first step (cold start): {cold:.0f}s; pod deleted -> first resumed step: {resumed[0]:.0f}s; "
        f"SIGKILL -> first resumed step: {resumed[1]:.0f}s",
        file=sys.stderr,
    )
