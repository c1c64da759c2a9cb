"""node_fit and describe_selector (diagnosis/nodes.py): whether a node's labels satisfy a pod's nodeSelector and
required node affinity, which of its taints the pod does not tolerate (hard, or transient like cordon and
NotReady), and what it has free once the other pods on it are counted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal

import pytest
from kubernetes.client import (
    V1Affinity,
    V1Container,
    V1Node,
    V1NodeAffinity,
    V1NodeCondition,
    V1NodeSelector,
    V1NodeSelectorRequirement,
    V1NodeSelectorTerm,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1PodStatus,
    V1ResourceRequirements,
    V1Taint,
    V1Toleration,
)

from areal_workers.diagnosis.nodes import describe_selector, node_fit

READY = V1NodeCondition(type="Ready", status="True")
GPU_TAINT = V1Taint(key="nvidia.com/gpu", value="true", effect="NoSchedule")


def pod(
    name: str = "aw-t-actor-0",
    *,
    uid: str | None = "uid-actor-0",
    requests: Mapping[str, str] | None = None,
    node_selector: Mapping[str, str] | None = None,
    tolerations: Sequence[V1Toleration] = (),
    terms: Sequence[V1NodeSelectorTerm] = (),
    phase: str = "Pending",
) -> V1Pod:
    affinity = (
        V1Affinity(
            node_affinity=V1NodeAffinity(
                required_during_scheduling_ignored_during_execution=V1NodeSelector(node_selector_terms=list(terms))
            )
        )
        if terms
        else None
    )
    container = V1Container(name="worker", resources=V1ResourceRequirements(requests=dict(requests or {})))
    return V1Pod(
        metadata=V1ObjectMeta(name=name, namespace="rl", uid=uid),
        spec=V1PodSpec(
            containers=[container],
            node_selector=dict(node_selector) if node_selector else None,
            tolerations=list(tolerations) or None,
            affinity=affinity,
        ),
        status=V1PodStatus(phase=phase),
    )


def node(
    name: str = "gpu-1",
    *,
    labels: Mapping[str, str] | None = None,
    taints: Sequence[V1Taint] = (),
    ready: V1NodeCondition | None = READY,
    cordoned: bool = False,
    allocatable: Mapping[str, str] | None = None,
) -> V1Node:
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels=dict(labels) if labels else None),
        spec=V1NodeSpec(taints=list(taints) or None, unschedulable=cordoned or None),
        status=V1NodeStatus(
            allocatable=dict(allocatable or {"cpu": "8", "memory": "32Gi"}),
            conditions=[ready] if ready is not None else None,
        ),
    )


def term(
    *expressions: V1NodeSelectorRequirement, fields: Sequence[V1NodeSelectorRequirement] = ()
) -> V1NodeSelectorTerm:
    return V1NodeSelectorTerm(match_expressions=list(expressions) or None, match_fields=list(fields) or None)


def requirement(key: str, operator: str, *values: str) -> V1NodeSelectorRequirement:
    return V1NodeSelectorRequirement(key=key, operator=operator, values=list(values) or None)


# --- readiness and cordon --------------------------------------------------------------------------------


def test_a_ready_untainted_node_has_no_block_and_its_allocatable_parsed():
    fit = node_fit(pod(), node(allocatable={"cpu": "500m", "memory": "1Gi", "nvidia.com/gpu": "2"}), None)
    assert fit.name == "gpu-1" and fit.selector_ok
    assert fit.hard_taints == () and fit.soft_block is None
    assert fit.allocatable == {"cpu": Decimal("0.5"), "memory": Decimal(2**30), "nvidia.com/gpu": Decimal(2)}
    assert fit.free is None  # the pods on the node are unknown


@pytest.mark.parametrize(
    ("ready", "expected"),
    [
        (
            V1NodeCondition(type="Ready", status="False", reason="KubeletNotReady", message="PLEG is not healthy"),
            "NotReady (Ready=False (KubeletNotReady: PLEG is not healthy))",
        ),
        (V1NodeCondition(type="Ready", status="Unknown"), "NotReady (Ready=Unknown)"),
        (None, "NotReady (the node reports no Ready condition)"),
    ],
)
def test_a_node_that_is_not_ready_says_why(ready, expected):
    assert node_fit(pod(), node(ready=ready), None).soft_block == expected


def test_a_node_without_status_is_not_ready_and_has_nothing_allocatable():
    bare = V1Node(metadata=V1ObjectMeta(name="new"), spec=None, status=None)
    fit = node_fit(pod(), bare, {})
    assert fit.soft_block == "NotReady (the node reports no Ready condition)"
    assert fit.allocatable == {} and fit.free == {}


def test_not_ready_comes_before_cordoned_which_comes_before_transient_taints():
    unreachable = V1Taint(key="node.kubernetes.io/unreachable", effect="NoExecute")
    fit = node_fit(
        pod(), node(ready=V1NodeCondition(type="Ready", status="Unknown"), cordoned=True, taints=[unreachable]), None
    )
    assert fit.soft_block == "NotReady (Ready=Unknown), cordoned, node.kubernetes.io/unreachable:NoExecute"
    assert fit.hard_taints == ()  # a node.kubernetes.io/ taint clears up by itself


# --- taints and tolerations -------------------------------------------------------------------------------


def test_an_untolerated_taint_is_hard_with_its_value_and_prefer_no_schedule_does_not_block():
    soft_preference = V1Taint(key="spot", value="yes", effect="PreferNoSchedule")
    no_value = V1Taint(key="dedicated", effect="NoExecute")
    fit = node_fit(pod(), node(taints=[GPU_TAINT, soft_preference, no_value]), None)
    assert fit.hard_taints == ("nvidia.com/gpu=true:NoSchedule", "dedicated:NoExecute")
    assert fit.soft_block is None


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        (V1Toleration(key="nvidia.com/gpu", operator="Exists"), True),
        (V1Toleration(key="nvidia.com/gpu", operator="Equal", value="true"), True),
        (V1Toleration(key="nvidia.com/gpu", value="true", effect="NoSchedule"), True),  # Equal by default
        (V1Toleration(key="nvidia.com/gpu", operator="Equal", value="false"), False),
        (V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoExecute"), False),  # another effect
        (V1Toleration(key="other", operator="Exists"), False),
        (V1Toleration(operator="Exists"), True),  # no key, Exists: every taint
        (V1Toleration(operator="Exists", effect="NoExecute"), False),
        (V1Toleration(operator="Equal", value="true"), False),  # no key needs Exists
    ],
)
def test_a_toleration_tolerates_a_taint_by_key_value_and_effect(toleration, tolerated):
    fit = node_fit(pod(tolerations=[toleration]), node(taints=[GPU_TAINT]), None)
    assert fit.hard_taints == (() if tolerated else ("nvidia.com/gpu=true:NoSchedule",))


def test_a_tolerated_transient_taint_is_no_block():
    not_ready = V1Taint(key="node.kubernetes.io/not-ready", effect="NoSchedule")
    toleration = V1Toleration(key="node.kubernetes.io/not-ready", operator="Exists")
    assert node_fit(pod(tolerations=[toleration]), node(taints=[not_ready]), None).soft_block is None
    assert node_fit(pod(), node(taints=[not_ready]), None).soft_block == "node.kubernetes.io/not-ready:NoSchedule"


# --- node selection ---------------------------------------------------------------------------------------


def test_the_node_selector_needs_every_label_with_its_value():
    labelled = node(labels={"pool": "gpu", "zone": "a"})
    assert node_fit(pod(node_selector={"pool": "gpu"}), labelled, None).selector_ok
    assert node_fit(pod(node_selector={"pool": "gpu", "zone": "a"}), labelled, None).selector_ok
    assert not node_fit(pod(node_selector={"pool": "gpu", "zone": "b"}), labelled, None).selector_ok
    assert not node_fit(pod(node_selector={"pool": "gpu"}), node(labels=None), None).selector_ok


@pytest.mark.parametrize(
    ("wanted", "matches"),
    [
        (requirement("pool", "In", "cpu", "gpu"), True),
        (requirement("pool", "In", "cpu"), False),
        (requirement("missing", "In", "gpu"), False),
        (requirement("pool", "NotIn", "cpu"), True),
        (requirement("pool", "NotIn", "gpu"), False),
        (requirement("missing", "NotIn", "gpu"), True),
        (requirement("pool", "Exists"), True),
        (requirement("missing", "Exists"), False),
        (requirement("missing", "DoesNotExist"), True),
        (requirement("pool", "DoesNotExist"), False),
        (requirement("gpus", "Gt", "4"), True),
        (requirement("gpus", "Gt", "8"), False),
        (requirement("gpus", "Lt", "9"), True),
        (requirement("gpus", "Lt", "8"), False),
        (requirement("pool", "Gt", "4"), False),  # not a number
        (requirement("gpus", "Gt", "4", "5"), False),  # Gt takes one value
        (requirement("missing", "Lt", "4"), False),
        (requirement("pool", "Unknown", "gpu"), False),
    ],
)
def test_a_required_node_affinity_expression_is_evaluated_as_the_scheduler_does(wanted, matches):
    labelled = node(labels={"pool": "gpu", "gpus": "8"})
    assert node_fit(pod(terms=[term(wanted)]), labelled, None).selector_ok is matches


def test_affinity_terms_are_alternatives_and_the_expressions_of_one_term_all_apply():
    labelled = node("gpu-1", labels={"pool": "gpu", "zone": "a"})
    both = term(requirement("pool", "In", "gpu"), requirement("zone", "In", "b"))
    assert not node_fit(pod(terms=[both]), labelled, None).selector_ok
    either = [term(requirement("zone", "In", "b")), term(requirement("pool", "In", "gpu"))]
    assert node_fit(pod(terms=either), labelled, None).selector_ok


def test_match_fields_select_the_node_by_name_and_an_empty_term_matches_no_node():
    by_name = term(fields=[requirement("metadata.name", "In", "gpu-1")])
    assert node_fit(pod(terms=[by_name]), node("gpu-1"), None).selector_ok
    assert not node_fit(pod(terms=[by_name]), node("gpu-2"), None).selector_ok
    assert not node_fit(pod(terms=[term()]), node("gpu-1"), None).selector_ok


def test_node_selector_and_affinity_must_both_match():
    selected = pod(node_selector={"pool": "gpu"}, terms=[term(requirement("zone", "In", "a"))])
    assert node_fit(selected, node(labels={"pool": "gpu", "zone": "a"}), None).selector_ok
    assert not node_fit(selected, node(labels={"pool": "gpu", "zone": "b"}), None).selector_ok
    assert not node_fit(selected, node(labels={"pool": "cpu", "zone": "a"}), None).selector_ok


# --- free resources ---------------------------------------------------------------------------------------


def test_free_is_allocatable_less_the_requests_of_the_other_live_pods_on_the_node():
    pending = pod(requests={"cpu": "2"})
    others = [
        pod("a", uid="uid-a", requests={"cpu": "1", "memory": "4Gi"}, phase="Running"),
        pod("b", uid="uid-b", requests={"cpu": "500m"}, phase="Pending"),
        pod("done", uid="uid-done", requests={"cpu": "4"}, phase="Succeeded"),
        pod("failed", uid="uid-failed", requests={"cpu": "4"}, phase="Failed"),
        pending,  # the pod itself, when it is already bound, is not counted against itself
    ]
    fit = node_fit(pending, node(), {"gpu-1": others, "gpu-2": [pod("c", uid="uid-c", requests={"cpu": "8"})]})
    assert fit.free == {"cpu": Decimal("6.5"), "memory": Decimal(28 * 2**30)}


def test_without_uids_the_same_pod_is_the_same_name_in_the_same_namespace():
    pending = pod(uid=None, requests={"cpu": "2"})
    same = pod(uid=None, requests={"cpu": "2"}, phase="Running")
    namesake = pod(uid=None, requests={"cpu": "3"}, phase="Running")
    namesake.metadata.namespace = "other"
    fit = node_fit(pending, node(), {"gpu-1": [same, namesake]})
    assert fit.free is not None and fit.free["cpu"] == Decimal(5)


def test_a_node_with_no_pods_listed_has_all_of_its_allocatable_free():
    fit = node_fit(pod(), node(), {"gpu-2": [pod("x", uid="uid-x", requests={"cpu": "8"})]})
    assert fit.free == fit.allocatable


# --- describe_selector ------------------------------------------------------------------------------------


def test_a_pod_without_node_selection_is_described_as_such():
    assert describe_selector(pod(), [node()]) == "the pod's node selection"


def test_the_selector_and_affinity_are_put_in_words():
    selected = pod(
        node_selector={"pool": "gpu"},
        terms=[
            term(requirement("zone", "In", "a", "b"), requirement("gpu", "Exists")),
            term(fields=[requirement("metadata.name", "In", "gpu-1")]),
        ],
    )
    assert describe_selector(selected, ()) == (
        "nodeSelector pool=gpu and required node affinity (zone In ['a', 'b']; gpu Exists) or "
        "(metadata.name In ['gpu-1'])"
    )


def test_with_nodes_the_label_values_they_have_are_shown_at_most_five():
    nodes = [node(f"n{i}", labels={"pool": f"p{i}"}) for i in (6, 1, 3, 5, 2, 4, 1)] + [node("bare")]
    text = describe_selector(pod(node_selector={"pool": "gpu", "zone": "a"}), nodes)
    assert text == "nodeSelector pool=gpu, zone=a (nodes have pool: p1, p2, p3, p4, p5; no node has label zone)"
