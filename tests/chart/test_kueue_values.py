"""Kueue values (issue 16): a role's StatefulSet under a LocalQueue, off by default, validated by the schema."""

import json

import pytest

from chartlib import one, role, sts

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


def test_off_by_default(render):
    actor = sts(render({"roles": {"actor": role(2)}}), "actor")
    assert not any(key.startswith("kueue.x-k8s.io/") for key in actor["metadata"]["labels"])
    assert not any(key.startswith("kueue.x-k8s.io/") for key in actor["spec"]["template"]["metadata"]["labels"])


def test_queue_and_priority_label_the_statefulset_not_its_pods(render):
    docs = render(
        {
            "workerDefaults": {"kueue": {"queueName": "team-a", "priorityClass": "high"}},
            "roles": {"actor": role(2), "ref": role(1, kueue={"queueName": "team-b", "priorityClass": ""})},
        }
    )
    actor, ref = sts(docs, "actor"), sts(docs, "ref")
    assert actor["metadata"]["labels"][QUEUE_LABEL] == "team-a"
    assert actor["metadata"]["labels"][PRIORITY_LABEL] == "high"
    assert ref["metadata"]["labels"][QUEUE_LABEL] == "team-b" and PRIORITY_LABEL not in ref["metadata"]["labels"]
    # Kueue labels the pods of the group itself; a queue label of ours on pods would make each pod a workload.
    assert QUEUE_LABEL not in actor["spec"]["template"]["metadata"]["labels"]
    # The selector stays stable: it cannot change on an existing StatefulSet.
    assert not any(key.startswith("kueue") for key in actor["spec"]["selector"]["matchLabels"])


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
