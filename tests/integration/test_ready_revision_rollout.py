"""The last all-ready revision (the one a failed change rolls back to) is one whose every changed workload runs it:
a role whose StatefulSet has yet to replace its pods still has Ready pods of the template before the change, and
they do not make the revision all-ready when the trainer waits for another role. A partition on that role's
StatefulSet holds its rolling update for as long as the test needs (the StatefulSet controller leaves the pods below
the partition on their template), so no component of the control plane has to stop."""

from __future__ import annotations

import json

from kubernetes import client

from areal_workers.pods.inspector import READY_REVISION_ANNOTATION
from areal_workers.pods.ready_pods import READY_PODS_ANNOTATION
from clusterlib import job, spec

UPDATED = [spec(env_vars={"AREAL_WORKERS_TEST_UPDATE": "1"})]


def role_objects(apps: client.AppsV1Api, core: client.CoreV1Api, namespace: str, role: str):
    selector = f"areal.io/role={role}"
    [statefulset] = apps.list_namespaced_stateful_set(namespace, label_selector=selector).items
    return statefulset, core.list_namespaced_pod(namespace, label_selector=selector).items


def test_a_role_whose_rolling_update_is_held_keeps_the_revision_from_being_all_ready(make_scheduler, core):
    apps = client.AppsV1Api(core.api_client)
    scheduler = make_scheduler()
    for role in ("actor", "critic"):
        scheduler.create_workers(job(role, 1))
        scheduler.get_workers(role, 120)
    good = scheduler.driver.inspector.ready_revision()
    assert good == scheduler.driver.model.revision
    critic, _ = role_objects(apps, core, scheduler.namespace, "critic")
    held = {"spec": {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}}}
    apps.patch_namespaced_stateful_set(critic.metadata.name, scheduler.namespace, held)

    scheduler.update_workers(job("critic", 1, UPDATED))
    scheduler.update_workers(job("actor", 1, UPDATED))
    scheduler.get_workers("actor", 120)

    critic, [critic_pod] = role_objects(apps, core, scheduler.namespace, "critic")
    ready = {c.type: c.status for c in critic_pod.status.conditions or []}.get("Ready")
    revision = critic_pod.metadata.labels["controller-revision-hash"]
    assert ready == "True" and revision != critic.status.update_revision, "the premise: an earlier template's pod"
    assert scheduler.driver.model.revision == good + 2
    assert scheduler.driver.inspector.ready_revision() == good
    assert scheduler.driver.good_revision == good


def test_the_ready_record_written_after_another_writers_change_keeps_both(make_scheduler, core):
    """get_workers records the ready revision and the pods AReaL holds in one patch, on the topology ConfigMap as
    the scheduler read it after the revision. An annotation another client added since makes the apiserver refuse
    that patch (409); the scheduler reads the ConfigMap again and writes its records beside the annotation."""
    scheduler = make_scheduler()
    scheduler.create_workers(job("actor", 1))
    name = scheduler.driver.inspector._topology_configmap().metadata.name
    core.patch_namespaced_config_map(
        name, scheduler.namespace, {"metadata": {"annotations": {"example.com/owner": "platform-team"}}}
    )
    scheduler.get_workers("actor", 120)
    annotations = core.read_namespaced_config_map(name, scheduler.namespace).metadata.annotations
    assert annotations["example.com/owner"] == "platform-team"
    assert annotations[READY_REVISION_ANNOTATION] == str(scheduler.driver.model.revision)
    assert list(json.loads(annotations[READY_PODS_ANNOTATION])) == ["actor"]
