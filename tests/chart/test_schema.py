import pytest

from chartlib import role

SCHEMA_ERROR = "values don't meet the specifications of the schema"


def pod_fork(overrides: dict) -> dict:
    """Values with role a and a pod-mode fork f of it with these overrides."""
    return {"roles": {"a": role()}, "forks": {"f": {"target": "a", "mode": "pod", "overrides": overrides}}}


# (values, fragments the error must contain: the offending field or name)
BAD_VALUES = {
    "unknown top-level key": ({"replica": 3}, ["replica"]),
    "unknown role key": ({"roles": {"actor": role(gpus=8)}}, ["/roles/actor", "gpus"]),
    "unknown nested key in a role": ({"roles": {"actor": role(shm={"size": "1Gi"})}}, ["/roles/actor/shm", "size"]),
    "unknown nested key in workerDefaults": (
        {"workerDefaults": {"probes": {"readiness": {"path": "/x"}}}},
        ["/workerDefaults/probes/readiness", "path"],
    ),
    "unknown nested key in networkPolicy": (
        {"networkPolicy": {"controller": {"ips": []}}},
        ["/networkPolicy/controller", "ips"],
    ),
    "unknown fork key": (
        {"roles": {"a": role()}, "forks": {"f": {"target": "a", "image": "x"}}},
        ["/forks/f", "image"],
    ),
    "uppercase role name": ({"roles": {"Actor": role()}}, ["Actor", "pattern"]),
    "role name ending with _": ({"roles": {"actor_": role()}}, ["actor_"]),
    "role name too long": ({"roles": {"r" * 41: role()}}, ["r" * 41]),
    "bad fork target name": ({"roles": {"a": role()}, "forks": {"f": {"target": "A!"}}}, ["/forks/f/target"]),
    "bad colocation key": ({"roles": {"a": role()}, "colocations": {"Ref": "a"}}, ["Ref"]),
    "negative replicas": ({"roles": {"actor": role(-1)}}, ["/roles/actor/replicas", "minimum"]),
    "missing replicas": ({"roles": {"actor": {"extraPorts": 1}}}, ["/roles/actor", "replicas"]),
    "fractional replicas": ({"roles": {"actor": role(1.5)}}, ["/roles/actor/replicas"]),
    "bad pullPolicy": ({"image": {"pullPolicy": "Sometimes"}}, ["/image/pullPolicy", "Always"]),
    "bad role pullPolicy": ({"roles": {"a": role(image={"pullPolicy": "Sometimes"})}}, ["/roles/a/image/pullPolicy"]),
    "bad fork mode": (
        {"roles": {"a": role()}, "forks": {"f": {"target": "a", "mode": "thread"}}},
        ["/forks/f/mode", "process"],
    ),
    "bad name_resolve type": ({"cluster": {"nameResolve": {"type": "zookeeper"}}}, ["/cluster/nameResolve/type"]),
    # A quantity's grammar is the preflight's (test_preflight.py), whose message names the fix, not the regex.
    "quantity of another type": ({"roles": {"a": role(resources={"memory": ["1Gi"]})}}, ["/roles/a/resources/memory"]),
    "negative cpu": ({"roles": {"a": role(resources={"cpu": -1})}}, ["/roles/a/resources/cpu"]),
    "negative gpu": ({"roles": {"a": role(resources={"gpu": -1})}}, ["/roles/a/resources/gpu"]),
    "guard port too high": ({"guard": {"port": 70000}}, ["/guard/port", "maximum"]),
    "guard port zero": ({"guard": {"port": 0}}, ["/guard/port", "minimum"]),
    "role guard port too high": ({"roles": {"a": role(guardPort=65536)}}, ["/roles/a/guardPort"]),
    "allocated range start out of range": (
        {"networkPolicy": {"allocatedPorts": {"start": 0}}},
        ["/networkPolicy/allocatedPorts/start"],
    ),
    "wrong type": ({"roles": {"a": role(hostNetwork="yes")}}, ["/roles/a/hostNetwork"]),
    "bad env value": ({"roles": {"a": role(env={"X": {"value": "1"}})}}, ["/roles/a/env/X"]),
    "non-string label": ({"roles": {"a": role(podLabels={"x": 1})}}, ["/roles/a/podLabels/x"]),
    "bad cidr": ({"networkPolicy": {"controller": {"cidrs": ["10.0.0.0"]}}}, ["/networkPolicy/controller/cidrs/0"]),
    "workerDefaults key removed": ({"workerDefaults": {"shm": None}}, ["/workerDefaults", "shm"]),
    "unknown offload key": ({"roles": {"a": role(offload={"enable": True})}}, ["/roles/a/offload", "enable"]),
    "non-boolean offload": ({"workerDefaults": {"offload": {"enabled": "yes"}}}, ["/workerDefaults/offload/enabled"]),
    "non-string offload python": ({"roles": {"a": role(offload={"python": 3})}}, ["/roles/a/offload/python"]),
    "unknown offload key in fork overrides": (
        {
            "roles": {"a": role()},
            "forks": {"f": {"target": "a", "mode": "pod", "overrides": {"offload": {"preload": "x"}}}},
        },
        ["/forks/f/overrides/offload", "preload"],
    ),
    "workerDefaults offload removed": ({"workerDefaults": {"offload": None}}, ["/workerDefaults", "offload"]),
    # workerDefaults, a role and a fork's overrides share one definition (workerSettings): each stays strict
    "unknown workerDefaults key": (
        {"workerDefaults": {"gpus": 8}},
        ["/workerDefaults", "additional properties 'gpus'"],
    ),
    "unknown fork overrides key": (
        pod_fork({"gpus": 8}),
        ["/forks/f/overrides", "additional properties 'gpus'"],
    ),
    "unknown nested key in a fork's overrides": (
        pod_fork({"resources": {"gpus": 1}}),
        ["/forks/f/overrides/resources", "additional properties 'gpus'"],
    ),
    "unknown workerDefaults probe key": (
        {"workerDefaults": {"probes": {"startup": {"path": "/x"}}}},
        ["/workerDefaults/probes/startup", "additional properties 'path'"],
    ),
    # replicas is a role's alone
    "replicas in workerDefaults": ({"workerDefaults": {"replicas": 2}}, ["/workerDefaults/replicas"]),
    "replicas in a fork's overrides": (
        pod_fork({"replicas": 2}),
        ["/forks/f/overrides/replicas"],
    ),
    # workerDefaults sets every key at every level; a role or overrides may leave any out
    "workerDefaults resources key removed": (
        {"workerDefaults": {"resources": {"gpu": None}}},
        ["/workerDefaults/resources", "missing property 'gpu'"],
    ),
    "workerDefaults image key removed": (
        {"workerDefaults": {"image": {"tag": None}}},
        ["/workerDefaults/image", "missing property 'tag'"],
    ),
    "workerDefaults probe removed": (
        {"workerDefaults": {"probes": {"liveness": None}}},
        ["/workerDefaults/probes", "missing property 'liveness'"],
    ),
    "workerDefaults probe field removed": (
        {"workerDefaults": {"probes": {"readiness": {"enabled": None}}}},
        ["/workerDefaults/probes/readiness", "missing property 'enabled'"],
    ),
    # the label-key and DNS-label patterns, one definition each, wherever a worker's settings go
    "bad exclusiveTopology in workerDefaults": (
        {"workerDefaults": {"exclusiveTopology": "Bad/Key/x"}},
        ["/workerDefaults/exclusiveTopology", "does not match pattern"],
    ),
    "bad Kueue topology in a role": (
        {"roles": {"a": role(kueue={"queueName": "q", "requiredTopology": "-rack"})}},
        ["/roles/a/kueue/requiredTopology", "does not match pattern"],
    ),
    "bad Kueue queue in a fork's overrides": (
        pod_fork({"kueue": {"queueName": "Q_1"}}),
        ["/forks/f/overrides/kueue/queueName", "does not match pattern"],
    ),
    "bad Kueue priority class in workerDefaults": (
        {"workerDefaults": {"kueue": {"priorityClass": "x" * 64}}},
        ["/workerDefaults/kueue/priorityClass", "maxLength"],
    ),
    "owner reference without uid": (
        {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "t"}]},
        ["/ownerReferences/0", "uid"],
    ),
    "owner reference with an empty uid": (
        {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "t", "uid": ""}]},
        ["/ownerReferences/0/uid"],
    ),
    "owner reference in another namespace": (
        {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "t", "uid": "u", "namespace": "other"}]},
        ["/ownerReferences/0", "namespace"],
    ),
    "non-boolean owner controller": (
        {"ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "t", "uid": "u", "controller": "yes"}]},
        ["/ownerReferences/0/controller"],
    ),
    "owner references as a map": (
        {"ownerReferences": {"apiVersion": "v1", "kind": "Pod", "name": "t", "uid": "u"}},
        ["/ownerReferences"],
    ),
    # the reaper CronJob
    "unknown reaper key": ({"reaper": {"enable": True}}, ["/reaper", "enable"]),
    "unknown reaper image key": ({"reaper": {"image": {"name": "x"}}}, ["/reaper/image", "name"]),
    "bad reaper pullPolicy": ({"reaper": {"image": {"pullPolicy": "Sometimes"}}}, ["/reaper/image/pullPolicy"]),
    "empty reaper command": ({"reaper": {"command": []}}, ["/reaper/command"]),
    "reaper command as a string": ({"reaper": {"command": "areal-workers reap"}}, ["/reaper/command"]),
    "empty schedule": ({"reaper": {"schedule": ""}}, ["/reaper/schedule"]),
    "negative history limit": ({"reaper": {"failedJobsHistoryLimit": -1}}, ["/reaper/failedJobsHistoryLimit"]),
}


@pytest.mark.parametrize("values,fragments", BAD_VALUES.values(), ids=BAD_VALUES.keys())
def test_schema_rejects(values, fragments, render_error):
    err = render_error(values)
    assert SCHEMA_ERROR in err, err
    for fragment in fragments:
        assert fragment in err, f"{fragment!r} not in:\n{err}"


def test_schema_accepts_offload_wherever_role_settings_go(render):
    docs = render(
        {
            "workerDefaults": {"offload": {"enabled": False, "python": "/opt/conda/bin/python"}},
            "roles": {"a": role(offload={"enabled": True})},
            "forks": {"f": {"target": "a", "mode": "pod", "overrides": {"offload": {"python": "python3"}}}},
        }
    )
    assert len([d for d in docs if d["kind"] == "StatefulSet"]) == 2


def test_schema_is_strict_at_every_level_of_the_charts_own_blocks():
    """Every object the schema describes refuses unknown keys: it sets additionalProperties false, or refines a
    definition that does (allOf [$ref] and properties of its own: workerDefaults, role and workerOverrides over
    workerSettings; additionalProperties false would not see the definition's keys), naming only its keys."""
    import json

    from chartlib import CHART
    from docgen.chart import resolve

    schema = json.loads((CHART / "values.schema.json").read_text())
    checked = 0

    def walk(node, path, base=None):
        nonlocal checked
        if isinstance(node, dict):
            if "allOf" in node:
                [ref] = node["allOf"]
                base = resolve(schema, ref)
            if "properties" in node:
                if node.get("additionalProperties") is not False:
                    assert base is not None and base.get("additionalProperties") is False, path
                    unknown = set(node["properties"]) - set(base["properties"])
                    assert not unknown, f"{path} refines keys its definition does not have: {unknown}"
                checked += 1
            for key, child in node.items():
                if key == "properties" and base is not None and node.get("additionalProperties") is not False:
                    for name, sub in child.items():
                        walk(sub, f"{path}/properties/{name}", resolve(schema, base["properties"][name]))
                elif key != "allOf":
                    walk(child, f"{path}/{key}")
        elif isinstance(node, list):
            for i, child in enumerate(node):
                walk(child, f"{path}/{i}")

    walk(schema, "")
    assert checked > 15


def test_worker_settings_are_defined_once():
    """workerDefaults, a role and a fork's overrides refer to one definition of a worker's settings."""
    import json

    from chartlib import CHART

    schema = json.loads((CHART / "values.schema.json").read_text())
    definitions = schema["definitions"]
    for name in ("workerDefaults", "role", "workerOverrides"):
        assert definitions[name]["allOf"] == [{"$ref": "#/definitions/workerSettings"}], name
    text = json.dumps(schema)
    for pattern in (definitions["labelKey"]["pattern"], definitions["dnsLabel"]["pattern"]):
        assert text.count(json.dumps(pattern)) == 1, pattern
