"""Pure parts of the areal-workers command: the status rows from a release model and pods, job-file parsing and
the values render builds from it, the namespace fallback of the kubeconfig."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import yaml
from kubernetes import client

from areal_workers.cli.session import CliError, Selection, kubeconfig_namespace
from areal_workers.cli.status_view import pod_state, trial_status
from areal_workers.release.model import ReleaseModel

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
RELEASE = "aw-exp-t1-12345678"


def pod(
    role: str,
    index: int,
    ready: bool = True,
    deleting: bool = False,
    waiting: str | None = None,
    restarts: int = 0,
    ip: str = "10.0.0.1",
) -> client.V1Pod:
    state = (
        client.V1ContainerState(waiting=client.V1ContainerStateWaiting(reason=waiting, message="back-off"))
        if waiting
        else client.V1ContainerState(running=client.V1ContainerStateRunning())
    )
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=f"{RELEASE}-areal-workers-{role}-{index}",
            uid=f"{role}-{index}-{deleting}",
            creation_timestamp=NOW - timedelta(minutes=5),
            deletion_timestamp=NOW if deleting else None,
            labels={
                "app.kubernetes.io/instance": RELEASE,
                "areal.io/role": role,
                "apps.kubernetes.io/pod-index": str(index),
            },
        ),
        spec=client.V1PodSpec(node_name="node-a", containers=[client.V1Container(name="worker")]),
        status=client.V1PodStatus(
            phase="Running",
            pod_ip=ip,
            conditions=[client.V1PodCondition(type="Ready", status="True" if ready else "False")],
            container_statuses=[
                client.V1ContainerStatus(
                    name="worker", ready=ready, restart_count=restarts, image="x", image_id="", state=state
                )
            ],
        ),
    )


MODEL = ReleaseModel(
    values={"roles": {"actor": {"replicas": 2}}},
    topology={
        "experiment": "exp",
        "trial": "t1",
        "roles": {"actor": {"replicas": 2, "guard_port": 8000, "extra_ports": [8001]}},
        "forks": {"ref": {"target": "actor", "mode": "process", "replicas": 2, "ports": [[9100, 9101], [9200, 9201]]}},
        "colocations": {"critic": "actor"},
    },
    revision=3,
)


def test_rows_per_worker_with_forks_in_their_targets_pods_and_colocations_as_roles():
    status = trial_status(
        RELEASE,
        MODEL,
        [pod("actor", 0), pod("actor", 1, ready=False, waiting="CrashLoopBackOff", restarts=4)],
        [],
        "deployed",
        2,
        now=NOW,
    )
    rows = {row.id: row for row in status.workers}
    assert list(rows) == ["actor/0", "actor/1", "ref/0", "ref/1"]
    assert rows["actor/0"].ready and rows["actor/0"].ports == ["8000", "8001"] and rows["actor/0"].age_seconds == 300
    broken = rows["actor/1"]
    assert not broken.ready and broken.state == "CrashLoopBackOff" and broken.restarts == 4 and broken.fatal
    assert broken.reason.startswith("CrashLoopBackOff")
    assert rows["ref/1"].ports == ["9200", "9201"] and rows["ref/1"].host_pod_of == "actor"
    assert rows["ref/1"].pod == broken.pod and not rows["ref/1"].ready  # a fork lives and dies with its host pod
    roles = {(r.name, r.kind, r.target, r.ready, r.replicas) for r in status.roles}
    assert roles == {
        ("actor", "role", None, 1, 2),
        ("ref", "fork (process)", "actor", 1, 2),
        ("critic", "colocated", "actor", 1, 2),
    }
    assert not status.all_ready and status.to_dict()["all_ready"] is False


def test_a_missing_pod_is_a_row_and_a_terminating_pod_gives_way_to_its_successor():
    old = pod("actor", 0, deleting=True, ip="10.0.0.9")
    status = trial_status(RELEASE, MODEL, [pod("actor", 0, ip="10.0.0.2"), old], [], "deployed", 3, now=NOW)
    rows = {row.id: row for row in status.workers}
    assert rows["actor/0"].ip == "10.0.0.2" and rows["actor/0"].state == "Running"
    assert (
        rows["actor/1"].pod is None and rows["actor/1"].state == "Missing" and "StatefulSet" in rows["actor/1"].reason
    )
    assert pod_state(old) == "Terminating"


def test_selection_and_the_kubeconfig_namespace(tmp_path):
    assert Selection(release="r").named() == "r"
    assert Selection(experiment="e", trial="t").named().startswith("aw-e-t-")
    with pytest.raises(CliError):
        Selection(experiment="e").named()
    config = tmp_path / "config"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "a",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [
                    {"name": "a", "context": {"cluster": "c", "user": "u", "namespace": "rl"}},
                    {"name": "b", "context": {"cluster": "c", "user": "u"}},
                ],
            }
        )
    )
    assert kubeconfig_namespace(str(config), None) == "rl"
    assert kubeconfig_namespace(str(config), "b") is None
    assert kubeconfig_namespace(str(tmp_path / "missing"), None) is None
