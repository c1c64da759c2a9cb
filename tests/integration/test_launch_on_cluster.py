"""`python -m areal_workers.launch` runs an AReaL entry point that knows nothing of areal-workers against the local
cluster: AReaL's config parser reads `scheduler.type=kubernetes`, AReaL's own SFTTrainer._init_scheduler builds
the scheduler (registered by the launcher), every setting comes from AREAL_K8S_* variables as a platform would set
them, and the workers run AReaL's rpc_server in the cluster's pods. Without the launcher, the same command ends in
AReaL's own error. Both forms are run: a script path and `-m MODULE`.

The trainer runs in AReaL's environment (`make areal-worker`). AReaL's trainer modules import datasets and
experiment trackers at the top, which that environment leaves out; tests/support/areal_trainer_stand_ins gives
those imports stand-ins (nothing on the path under test calls them).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from localkube.cluster import LocalCluster
from repo_paths import AREAL_WORKER_PYTHON, REPO

pytestmark = [
    pytest.mark.late,
    pytest.mark.skipif(
        bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")),
        reason="the workers need tools/localworker in their image on other clusters; here they run on the local one",
    ),
]

SUPPORT = REPO / "tests" / "support"
ENTRY = SUPPORT / "areal_style_entry.py"
TIMEOUT = 600
# The environment's own directory: AReaL's config parser hands hydra a config path relative to its own module,
# which it computes without resolving symbolic links (.tools/areal-worker is one).
PYTHON = AREAL_WORKER_PYTHON.parent.parent.resolve() / "bin" / "python"


def config_file(directory: Path) -> Path:
    """An SFT experiment config as AReaL's example configs are written: what load_expr_config requires."""
    root = directory / "fileroot"
    sections = {
        section: {"experiment_name": "${experiment_name}", "trial_name": "${trial_name}", "fileroot": str(root)}
        for section in ("saver", "evaluator", "recover", "stats_logger")
    }
    config = {
        "experiment_name": "launch",
        "trial_name": directory.name[-8:].lower().replace("_", "-"),
        "cluster": {"fileroot": str(root), "name_resolve": {"type": "nfs", "nfs_record_root": str(root / "nr")}},
        "tokenizer_path": "/models/never-loaded",
        "train_dataset": {"path": "/data/never-read", "type": "sft", "batch_size": 1},
        "actor": {
            "experiment_name": "${experiment_name}",
            "trial_name": "${trial_name}",
            "path": "/models/never-loaded",
            "backend": "fsdp:d2",
            "scheduling_spec": [{"cpu": 1, "gpu": 0, "mem": 2, "cmd": "python -m areal.infra.rpc.rpc_server"}],
        },
        **sections,
        "scheduler": {"type": "local"},
    }
    path = directory / "sft.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture
def platform_environment(make_namespace, kubeconfig, tmp_path) -> dict[str, str]:
    """What a platform sets for an unmodified trainer: namespace, credentials, helm, a values file of its own."""
    assert AREAL_WORKER_PYTHON.exists(), "the trainer runs in AReaL's environment: run `make areal-worker`"
    assert LocalCluster().podrunner_workers() == "areal", "the workers run AReaL's rpc_server (cluster podrunner)"
    namespace = make_namespace(private=False)
    platform = tmp_path / "platform.yaml"
    platform.write_text(yaml.safe_dump({"workerDefaults": {"env": {"PLATFORM_MARK": "from-the-values-file"}}}))
    return {
        "AREAL_K8S_NAMESPACE": namespace,
        "AREAL_K8S_KUBECONFIG": str(kubeconfig),
        "AREAL_K8S_HELM_EXECUTABLE": str(REPO / ".tools" / "bin" / "helm"),
        "AREAL_K8S_VALUES_FILES": str(platform),
        "AREAL_K8S_TERMINATION_GRACE_SECONDS": "5",
        "AREAL_K8S_READY_TIMEOUT": "300",
    }


def run(argv: list[str], settings: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    path = os.pathsep.join(map(str, (SUPPORT / "areal_trainer_stand_ins", SUPPORT, REPO / "adapter")))
    environment = {key: value for key, value in os.environ.items() if not key.startswith("AREAL_K8S_")}
    return subprocess.run(
        [str(PYTHON), *argv],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=cwd,
        env={**environment, **settings, "PYTHONPATH": path},
    )


@pytest.mark.timeout(3 * TIMEOUT)
def test_an_unmodified_entry_script_gets_the_kubernetes_scheduler_through_the_launcher(
    platform_environment, core, tmp_path
):
    config = config_file(tmp_path)
    arguments = ["--config", str(config), "scheduler.type=kubernetes"]

    plain = run([str(ENTRY), *arguments], platform_environment, tmp_path)
    assert plain.returncode != 0
    assert "NotImplementedError: Unknown scheduler type: kubernetes" in plain.stderr, plain.stderr

    for form in ([str(ENTRY)], ["-m", "areal_style_entry"]):
        launched = run(["-m", "areal_workers.launch", *form, *arguments], platform_environment, tmp_path)
        assert launched.returncode == 0, f"{form}: exit {launched.returncode}\n{launched.stdout}\n{launched.stderr}"
        seen = json.loads(launched.stdout.strip().splitlines()[-1])
        namespace = platform_environment["AREAL_K8S_NAMESPACE"]
        assert seen["scheduler"] == "KubernetesScheduler" and seen["namespace"] == namespace
        assert seen["values_files"] == [platform_environment["AREAL_K8S_VALUES_FILES"]]
        assert seen["ids"] == ["actor/0", "actor/1"] and seen["counts"] == [1, 2]
        assert seen["platform_mark"] == ["from-the-values-file"] * 2  # the workers got the values file
        assert all(ip.startswith("127.") and ports[0] == "8000" for _, ip, ports in seen["workers"]), seen
        assert core.list_namespaced_pod(namespace).items == []  # the entry point deleted its workers
    events = core.list_namespaced_event(platform_environment["AREAL_K8S_NAMESPACE"]).items
    created = {event.involved_object.name for event in events if event.reason == "Scheduled"}
    assert any(name.endswith("-actor-0") for name in created), created
