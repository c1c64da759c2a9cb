"""After update_workers, the pods of the template before it stay Ready until the StatefulSet's rolling update
replaces them: get_workers must wait for the new template's pods, not return the old ones, which are about to go
(found under load in CI: test_events saw get_workers return the crashing update's predecessor). Stopping
kube-controller-manager holds that moment for as long as the test needs, so it runs alone (restarts_control_plane).
"""

from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from clusterlib import job, spec, wait_for

pytestmark = [
    pytest.mark.restarts_control_plane,
    pytest.mark.skipif(
        bool(os.environ.get("AREAL_WORKERS_KUBECONFIG")), reason="stops the local cluster's controller manager"
    ),
]

MANAGER = "kube-controller-manager"
DOWN_SECONDS = 20  # the StatefulSet controller's absence: longer than the look for a premature answer below


def pod_uids(core, namespace: str) -> set[str]:
    return {p.metadata.uid for p in core.list_namespaced_pod(namespace, label_selector="areal.io/role=actor").items}


def test_get_workers_after_an_update_waits_for_the_new_templates_pods(make_scheduler, core):
    from localkube.cluster import LocalCluster

    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    before = pod_uids(core, scheduler.namespace)
    cluster = LocalCluster()
    [manager] = [component for component in cluster.components() if component.name == MANAGER]
    with ThreadPoolExecutor(2) as pool:
        restarted = pool.submit(cluster.restart, MANAGER, down_seconds=DOWN_SECONDS)
        wait_for(lambda: manager.pid() is None, 60, f"{MANAGER} stopped", interval=0.1)
        scheduler.update_workers(job("actor", 1, [spec(env_vars={"AREAL_WORKERS_TEST_UPDATE": "1"})]))
        waiting = pool.submit(scheduler.get_workers, "actor", 120)
        time.sleep(5)  # the old pod is Ready all along: nothing replaces it while the controller manager is down
        assert not waiting.done(), f"get_workers returned the pod of the earlier template: {waiting.result()}"
        assert pod_uids(core, scheduler.namespace) == before
        restarted.result(timeout=120)
        [worker] = waiting.result(timeout=120)
    after = pod_uids(core, scheduler.namespace)
    assert after and not after & before  # the worker is the new template's pod
    [pod] = core.list_namespaced_pod(scheduler.namespace, label_selector="areal.io/role=actor").items
    assert worker.ip == pod.status.pod_ip
    env = {e.name: e.value for e in pod.spec.containers[0].env or []}
    assert env.get("AREAL_WORKERS_TEST_UPDATE") == "1"
