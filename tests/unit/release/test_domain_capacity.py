"""The capacity check of roles whose workers must share one topology domain (exclusive placement, Kueue's
required topology): some domain's usable nodes must hold all the replicas."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client import V1Node, V1NodeCondition, V1NodeSpec, V1NodeStatus, V1ObjectMeta, V1Taint

from areal_workers.release.capacity import check_capacity
from areal_workers.release.domain_capacity import SharedDomain, shared_domains

pytestmark = pytest.mark.unit

RACK = "example.com/rack"
GROUP = {"areal.io/exclusive-group": "0123456789abcdef0123"}


def node(name: str, rack: str | None, cpu: str = "16", *, tainted: bool = False, cordoned: bool = False) -> V1Node:
    labels = {"kubernetes.io/hostname": name, **({RACK: rack} if rack else {})}
    taints = [V1Taint(key="dedicated", value="x", effect="NoSchedule")] if tainted else None
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels=labels),
        spec=V1NodeSpec(taints=taints, unschedulable=cordoned or None),
        status=V1NodeStatus(
            allocatable={"cpu": cpu, "memory": "256Gi", "pods": "110"},
            conditions=[V1NodeCondition(type="Ready", status="True")],
        ),
    )


def statefulset(replicas: int, *, exclusive: str | None = RACK, kueue: str | None = None) -> dict[str, Any]:
    labels = {"app.kubernetes.io/instance": "r", "areal.io/role": "actor", **(GROUP if exclusive else {})}
    spec: dict[str, Any] = {
        "containers": [{"name": "worker", "resources": {"requests": {"cpu": "8", "memory": "32Gi"}}}]
    }
    if exclusive:
        spec["affinity"] = {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": exclusive, "labelSelector": {"matchLabels": GROUP}}
                ]
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": exclusive,
                        "namespaceSelector": {},
                        "labelSelector": {"matchExpressions": [{"key": "areal.io/role", "operator": "Exists"}]},
                    }
                ]
            },
        }
    annotations = {"areal.io/role-name": "actor"}
    if kueue:
        annotations["kueue.x-k8s.io/podset-required-topology"] = kueue
    return {
        "kind": "StatefulSet",
        "metadata": {"name": "r-actor", "labels": labels, "annotations": {"areal.io/role-name": "actor"}},
        "spec": {
            "replicas": replicas,
            "template": {"metadata": {"labels": labels, "annotations": annotations}, "spec": spec},
        },
    }


# Two racks: a holds 2 + 2 workers of 8 cpu, b holds 1.
NODES = [node("a-1", "a"), node("a-2", "a"), node("b-1", "b", cpu="12"), node("loose", None, cpu="64")]


def messages(manifest: dict[str, Any], nodes: list[V1Node]) -> list[str]:
    return [problem.message for problem in check_capacity([manifest], ["actor"], nodes)]


def test_the_requirements_are_read_from_the_rendered_pod_template():
    assert shared_domains(statefulset(2)) == [SharedDomain(RACK, "exclusiveTopology")]
    assert shared_domains(statefulset(2, exclusive=None, kueue="example.com/block")) == [
        SharedDomain("example.com/block", "kueue.requiredTopology")
    ]
    assert shared_domains(statefulset(2, exclusive=None)) == []


def test_an_affinity_to_other_pods_is_no_requirement_of_one_domain():
    manifest = statefulset(2)
    term = manifest["spec"]["template"]["spec"]["affinity"]["podAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ][0]
    term["labelSelector"] = {"matchLabels": {"areal.io/role": "rollout"}}  # a fork's term towards its target
    assert shared_domains(manifest) == []


def test_a_role_one_domain_holds_passes():
    assert messages(statefulset(4), NODES) == []


def test_a_role_no_domain_holds_is_refused_with_the_largest_domain_and_the_fixes():
    (message,) = messages(statefulset(5), NODES)
    assert message == (
        "role actor must run its 5 workers in one domain of node label example.com/rack (exclusiveTopology), but no "
        "domain could ever hold more than 4 (a: 4 on a-1 (2), a-2 (2); b: 1 on b-1 (1)): lower the role's replicas "
        "to <= 4, add nodes with room to one domain, or remove exclusiveTopology"
    )


def test_nodes_the_pods_may_not_use_do_not_count_towards_a_domain():
    nodes = [node("a-1", "a"), node("a-2", "a", tainted=True), node("a-3", "a", cordoned=True)]
    (message,) = messages(statefulset(3), nodes)
    assert "no domain could ever hold more than 2 (a: 2 on a-1 (2))" in message


def test_no_labelled_node_says_which_label_to_put_on_them():
    (message,) = messages(statefulset(1), [node("loose", None, cpu="64")])
    assert message == (
        "role actor must run its 1 workers in one domain of node label example.com/rack (exclusiveTopology), but no "
        "node it may use has that label: label the nodes (kubectl label node NODE example.com/rack=DOMAIN) or remove "
        "exclusiveTopology"
    )


def test_kueues_required_level_is_judged_alike():
    (message,) = messages(statefulset(5, exclusive=None, kueue=RACK), NODES)
    assert "(kueue.requiredTopology), but no domain could ever hold more than 4" in message
    assert message.endswith("or remove kueue.requiredTopology")


def test_a_role_scaled_to_zero_and_a_role_without_the_requirement_are_not_judged():
    assert messages(statefulset(0), [node("loose", None)]) == []
    assert messages(statefulset(50, exclusive=None), NODES) == []
