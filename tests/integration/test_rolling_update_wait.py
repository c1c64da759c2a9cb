"""After update_workers, the pods of the template before it stay Ready until the StatefulSet's rolling update
replaces them: get_workers must wait for the new template's pods, not return the old ones, which are about to go
(found under load in CI: test_events saw get_workers return the crashing update's predecessor). A partition on the
StatefulSet holds its rolling update for as long as the test needs (the StatefulSet controller leaves the pods below
the partition on their template), so no component of the control plane has to stop. (While the controller has yet
to observe the update, the update revision it reports is the earlier one: the unit tests of PodCleanup cover that
moment, which lasts milliseconds here.)
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from clusterlib import job, spec

HELD_SECONDS = 5  # the look for a premature answer while the rolling update is held


def pod_uids(core, namespace: str) -> set[str]:
    return {p.metadata.uid for p in core.list_namespaced_pod(namespace, label_selector="areal.io/role=actor").items}


def partition(apps: client.AppsV1Api, namespace: str, name: str, value: int) -> None:
    held = {"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": value}}}}
    apps.patch_namespaced_stateful_set(name, namespace, held)


def test_get_workers_after_an_update_waits_for_the_new_templates_pods(make_scheduler, core):
    apps = client.AppsV1Api(core.api_client)
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    scheduler.get_workers("actor")
    before = pod_uids(core, scheduler.namespace)
    [statefulset] = apps.list_namespaced_stateful_set(scheduler.namespace, label_selector="areal.io/role=actor").items
    partition(apps, scheduler.namespace, statefulset.metadata.name, 1)
    scheduler.update_workers(job("actor", 1, [spec(env_vars={"AREAL_WORKERS_TEST_UPDATE": "1"})]))
    with ThreadPoolExecutor(1) as pool:
        waiting = pool.submit(scheduler.get_workers, "actor", 120)
        time.sleep(HELD_SECONDS)  # the old pod is Ready all along: nothing replaces it while the partition holds
        assert not waiting.done(), f"get_workers returned the pod of the earlier template: {waiting.result()}"
        assert pod_uids(core, scheduler.namespace) == before
        held = apps.read_namespaced_stateful_set(statefulset.metadata.name, scheduler.namespace)
        assert held.status.update_revision != held.status.current_revision, "the premise: an update is held"
        partition(apps, scheduler.namespace, statefulset.metadata.name, 0)
        [worker] = waiting.result(timeout=120)
    after = pod_uids(core, scheduler.namespace)
    assert after and not after & before  # the worker is the new template's pod
    [pod] = core.list_namespaced_pod(scheduler.namespace, label_selector="areal.io/role=actor").items
    assert worker.ip == pod.status.pod_ip
    env = {e.name: e.value for e in pod.spec.containers[0].env or []}
    assert env.get("AREAL_WORKERS_TEST_UPDATE") == "1"
