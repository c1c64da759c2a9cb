import json

from chartlib import NAMESPACE, RELEASE, container, kubelet_expand, one, role, sts


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
        "roles": {
            "actor": role(2, extraPorts=2, resources={"gpu": 4}),
            "rollout": role(3, guardPort=9000, hostNetwork=True),
        },
        "colocations": {"critic": "actor"},
        "forks": {
            "ref": {"target": "actor"},
            "helper": {"target": "rollout", "mode": "pod", "command": ["python", "-m", "h"]},
        },
    }
    docs = render(values)
    _, data = topology(render, values)
    assert {k: data[k] for k in ("version", "release", "namespace", "experiment", "trial", "cluster_domain")} == {
        "version": 1, "release": RELEASE, "namespace": NAMESPACE, "experiment": "exp", "trial": "t",
        "cluster_domain": "cluster.local",
    }  # fmt: skip
    actor = sts(docs, "actor")["metadata"]["name"]
    assert data["roles"]["actor"] == {
        "replicas": 2, "guard_port": 8000, "extra_ports": [8001, 8002], "statefulset": actor, "service": actor,
        "host_network": False, "gpu": 4, "offload": False,
    }  # fmt: skip
    assert data["roles"]["rollout"]["guard_port"] == 9000 and data["roles"]["rollout"]["host_network"] is True
    assert data["colocations"] == {"critic": "actor"}
    assert data["forks"]["ref"] == {"target": "actor", "mode": "process", "command": [], "replicas": 2}
    helper = sts(docs, "helper")["metadata"]["name"]
    assert data["forks"]["helper"] == {
        "target": "rollout", "mode": "pod", "command": ["python", "-m", "h"], "replicas": 3, "guard_port": 9000,
        "extra_ports": [9001], "statefulset": helper, "service": helper, "host_network": False, "gpu": 0,
        "offload": False,
    }  # fmt: skip


def test_topology_says_whom_the_network_policy_admits(render):
    _, data = topology(render, {"roles": {"a": role()}})
    assert data["network_policy"] == {
        "name": f"{RELEASE}-areal-workers",
        "controller_pods": {"matchLabels": {"areal.io/controller": "true"}},
        "controller_namespaces": {},
        "cidrs": [],
    }
    _, data = topology(render, {"roles": {"a": role()}, "networkPolicy": {"controller": {"cidrs": ["10.1.0.0/16"]}}})
    assert data["network_policy"]["cidrs"] == ["10.1.0.0/16"]
    _, data = topology(render, {"roles": {"a": role()}, "networkPolicy": {"enabled": False}})
    assert "network_policy" not in data


def test_topology_of_an_empty_release(render):
    _, data = topology(render, {})
    assert (data["roles"], data["colocations"], data["forks"]) == ({}, {}, {})


# A values file whose cluster block differs from every default, with "$" in values the kubelet must not expand.
CLUSTER = {
    "experiment": "exp$(HOME)",
    "trial": "t$$1",
    "cluster": {
        "fileroot": "/storage/$(USER)/root",
        "nameResolve": {"type": "etcd3", "nfsRecordRoot": "/storage/nr$", "etcd3Addr": "etcd.infra:2379"},
    },
}


def test_worker_flags_in_the_configmap_are_the_pods_flags(render):
    values = {
        **CLUSTER,
        "roles": {"actor": role(2, extraArgs=["--log-level", "$(POD_NAME)"]), "rollout": role(guardPort=9000)},
        "forks": {"helper": {"target": "actor", "mode": "pod"}, "ref": {"target": "actor"}},
    }
    docs = render(values)
    _, data = topology(render, values)
    assert data["worker_flags"] == [
        "--name-resolve-type", "etcd3", "--nfs-record-root", "/storage/nr$", "--etcd3-addr", "etcd.infra:2379",
        "--fileroot", "/storage/$(USER)/root",
    ]  # fmt: skip
    assert (data["experiment"], data["trial"]) == ("exp$(HOME)", "t$$1")
    for name, entry in [
        ("actor", data["roles"]["actor"]),
        ("rollout", data["roles"]["rollout"]),
        ("helper", data["forks"]["helper"]),
    ]:
        # What the container gets after the kubelet's expansion, with no variable defined: "$$" -> "$".
        args = [kubelet_expand(a) for a in container(sts(docs, name))["args"]]
        assert args == [
            "--host", "$(POD_IP)", "--port", str(entry["guard_port"]),
            "--experiment-name", data["experiment"], "--trial-name", data["trial"], "--role", name,
            "--worker-index", "$(AREAL_WORKER_INDEX)",
            *data["worker_flags"], *entry.get("extra_args", []),
        ], name  # fmt: skip
    assert data["roles"]["actor"]["extra_args"] == ["--log-level", "$(POD_NAME)"]
    assert data["forks"]["helper"]["extra_args"] == [
        "--log-level",
        "$(POD_NAME)",
    ]  # a pod fork runs its target's settings
    assert "extra_args" not in data["roles"]["rollout"]
    assert "extra_args" not in data["forks"]["ref"]  # a process fork runs AReaL's fork command line


def test_worker_flags_follow_the_defaults_and_leave_out_removed_values(render):
    _, data = topology(render, {})
    assert data["worker_flags"] == [
        "--name-resolve-type", "nfs", "--nfs-record-root", "/tmp/areal/name_resolve", "--etcd3-addr", "localhost:2379",
        "--fileroot", "/tmp/areal",
    ]  # fmt: skip
    values = {"cluster": {"nameResolve": {"etcd3Addr": None}}, "roles": {"a": role()}}
    _, data = topology(render, values)
    assert "--etcd3-addr" not in data["worker_flags"] and len(data["worker_flags"]) == 6
    assert container(sts(render(values), "a"))["args"][12:] == data["worker_flags"]
