import pytest

pytestmark = pytest.mark.chart

import json  # noqa: E402

from chartlib import NAMESPACE, RELEASE, one, role, sts  # noqa: E402


def topology(render, values: dict) -> tuple[str, dict]:
    cm = one(render(values), "ConfigMap")
    assert cm["metadata"]["name"] == f"{RELEASE}-areal-workers-topology"
    assert cm["metadata"]["labels"]["app.kubernetes.io/component"] == "topology"
    raw = cm["data"]["topology.json"]
    return raw, json.loads(raw)


def test_topology_is_compact_sorted_json(render):
    raw, data = topology(render, {"roles": {"b": role(), "a": role()}, "colocations": {"z": "a", "c": "b"}})
    assert raw == json.dumps(data, sort_keys=True, separators=(",", ":"))


def test_topology_describes_roles_colocations_and_forks(render):
    values = {
        "experiment": "exp",
        "trial": "t",
        "roles": {"actor": role(2, extraPorts=2, resources={"gpu": 4}), "rollout": role(3, guardPort=9000, hostNetwork=True)},
        "colocations": {"critic": "actor"},
        "forks": {"ref": {"target": "actor"}, "helper": {"target": "rollout", "mode": "pod", "command": ["python", "-m", "h"]}},
    }
    docs = render(values)
    _, data = topology(render, values)
    assert {k: data[k] for k in ("version", "release", "namespace", "experiment", "trial", "cluster_domain")} == {
        "version": 1, "release": RELEASE, "namespace": NAMESPACE, "experiment": "exp", "trial": "t", "cluster_domain": "cluster.local",
    }  # fmt: skip
    actor = sts(docs, "actor")["metadata"]["name"]
    assert data["roles"]["actor"] == {
        "replicas": 2, "guard_port": 8000, "extra_ports": [8001, 8002], "statefulset": actor, "service": actor,
        "host_network": False, "gpu": 4,
    }  # fmt: skip
    assert data["roles"]["rollout"]["guard_port"] == 9000 and data["roles"]["rollout"]["host_network"] is True
    assert data["colocations"] == {"critic": "actor"}
    assert data["forks"]["ref"] == {"target": "actor", "mode": "process", "command": [], "replicas": 2}
    helper = sts(docs, "helper")["metadata"]["name"]
    assert data["forks"]["helper"] == {
        "target": "rollout", "mode": "pod", "command": ["python", "-m", "h"], "replicas": 3, "guard_port": 9000,
        "extra_ports": [9001], "statefulset": helper, "service": helper, "host_network": False, "gpu": 0,
    }  # fmt: skip


def test_topology_of_an_empty_release(render):
    _, data = topology(render, {})
    assert (data["roles"], data["colocations"], data["forks"]) == ({}, {}, {})
