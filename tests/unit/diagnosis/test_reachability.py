"""unreachable_advice: what the release's NetworkPolicy admits, said for a live worker that does not answer."""

from __future__ import annotations

from areal_workers.diagnosis import unreachable_advice

DEFAULT = {
    "name": "aw-t-areal-workers",
    "controller_pods": {"matchLabels": {"areal.io/controller": "true"}},
    "controller_namespaces": {},
    "cidrs": [],
}


def test_the_default_policy_names_the_label_and_the_empty_cidrs():
    advice = unreachable_advice(DEFAULT, "10.0.0.7:8000")
    assert "10.0.0.7:8000 did not answer" in advice and "NetworkPolicy aw-t-areal-workers" in advice
    assert "pods matching areal.io/controller=true in the release's namespace" in advice
    assert "networkPolicy.controller.cidrs is empty" in advice
    assert "label it areal.io/controller=true" in advice and "add the address" in advice


def test_namespaces_expressions_and_cidrs_are_spelled_out():
    policy = {
        **DEFAULT,
        "controller_pods": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["trainer", "eval"]}]},
        "controller_namespaces": {"matchLabels": {"team": "rl"}},
        "cidrs": ["10.8.0.0/16", "192.168.1.7/32"],
    }
    advice = unreachable_advice(policy, "10.0.0.7:8000")
    assert "pods matching app In (trainer,eval) in namespaces matching team=rl" in advice
    assert "the addresses 10.8.0.0/16, 192.168.1.7/32" in advice


def test_cidrs_only():
    advice = unreachable_advice({**DEFAULT, "controller_pods": {}, "cidrs": ["10.8.0.0/16"]}, "10.0.0.7:8000")
    assert "from the release's own pods, from the addresses 10.8.0.0/16" in advice and "pods matching" not in advice


def test_without_a_policy_the_route_is_what_to_check():
    advice = unreachable_advice(None, "10.0.0.7:8000")
    assert "has no NetworkPolicy" in advice and "routes to the pod network" in advice
