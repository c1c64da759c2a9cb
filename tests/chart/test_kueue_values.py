"""Kueue values where they cross into Python: the topology the adapter reads, the schema, and the name
limit Kueue's pod labels need. (The labels on the StatefulSet: the helm-unittest suite
charts/areal-workers/tests/kueue_test.yaml.)"""

import json

import pytest

from chartlib import one, role, sts


def test_topology_records_the_queue_of_roles_and_pod_forks(render):
    docs = render(
        {
            "workerDefaults": {"kueue": {"queueName": "lq"}},
            "roles": {"actor": role(1)},
            "forks": {"ref": {"target": "actor", "mode": "pod"}},
        }
    )
    topology = json.loads(one(docs, "ConfigMap")["data"]["topology.json"])
    assert topology["roles"]["actor"]["kueue_queue"] == "lq"
    assert topology["forks"]["ref"]["kueue_queue"] == "lq"
    plain = json.loads(one(render({"roles": {"actor": role(1)}}), "ConfigMap")["data"]["topology.json"])
    assert "kueue_queue" not in plain["roles"]["actor"]


@pytest.mark.parametrize("kueue", [{"queueName": "Bad_Name"}, {"queueName": "q", "extra": 1}, {"priorityClass": 5}])
def test_schema_rejects_bad_kueue_values(render_error, kueue):
    err = render_error({"roles": {"actor": role(1, kueue=kueue)}})
    assert "kueue" in err, err


def test_a_queued_role_has_a_name_kueue_can_label_its_pods_with(render):
    """Kueue labels the pods with "statefulset-<name>-<5 char hash>" (<= 63 characters): name <= 45."""
    long_release = {"fullnameOverride": "aw-a-rather-long-experiment-name-trial-0123abcd"}
    docs = render({**long_release, "workerDefaults": {"kueue": {"queueName": "lq"}}, "roles": {"actor": role(1)}})
    name = sts(docs, "actor")["metadata"]["name"]
    assert len(name) == 45 and len(f"statefulset-{name}-abcde") == 63
    plain = sts(render({**long_release, "roles": {"actor": role(1)}}), "actor")["metadata"]["name"]
    assert len(plain) == 52  # unchanged without Kueue
    assert name[:36] == plain[:36]
