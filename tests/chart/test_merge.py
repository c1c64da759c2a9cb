from chartlib import container, env_of, role, sts

# workerDefaults turned "on" everywhere a role below turns it "off" with false, 0 or "".
DEFAULTS_ON = {
    "shm": {"enabled": True, "sizeLimit": "2Gi"},
    "resources": {"cpu": "4", "memory": "8Gi", "gpu": 8},
    "hostNetwork": True,  # two roles on it need distinct guard ports
    "probes": {"readiness": {"enabled": True}, "liveness": {"enabled": True}},
    "priorityClassName": "high",
    "extraPorts": 2,
    "env": {"A": "1", "B": "2"},
    "tolerations": [{"key": "gpu", "operator": "Exists"}],
    "nodeSelector": {"pool": "gpu", "zone": "a"},
}


def pod_spec(s):
    return s["spec"]["template"]["spec"]


def test_false_overrides_a_true_default(render):
    """The case sprig's merge/mergeOverwrite get wrong: a role's shm.enabled=false must win over a default true."""
    docs = render(
        {"workerDefaults": DEFAULTS_ON, "roles": {"off": role(shm={"enabled": False}), "on": role(guardPort=9000)}}
    )
    off = sts(docs, "off")
    assert "volumes" not in pod_spec(off)
    assert "volumeMounts" not in container(off)
    on = sts(docs, "on")
    assert pod_spec(on)["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}


def test_zero_false_and_empty_string_override_defaults(render):
    docs = render(
        {
            "workerDefaults": DEFAULTS_ON,
            "roles": {
                "r": role(
                    resources={"gpu": 0},
                    hostNetwork=False,
                    probes={"readiness": {"enabled": False}},
                    priorityClassName="",
                    extraPorts=0,
                )
            },
        }
    )
    s = sts(docs, "r")
    c = container(s)
    assert c["resources"]["limits"] == {"cpu": "4", "memory": "8Gi"}  # gpu 0: no GPU resource, cpu/memory kept
    assert "hostNetwork" not in pod_spec(s)
    assert "readinessProbe" not in c and "livenessProbe" in c  # sibling keys of the nested map survive
    assert "priorityClassName" not in pod_spec(s)
    assert [p["name"] for p in c["ports"]] == ["guard"]


def test_maps_merge_key_by_key_lists_and_scalars_replace(render):
    docs = render(
        {
            "workerDefaults": DEFAULTS_ON,
            "roles": {
                "r": role(
                    env={"B": "20", "C": "3"},
                    nodeSelector={"zone": "b"},
                    tolerations=[{"key": "other", "operator": "Exists"}],
                    command=["python3", "-m", "x"],
                    resources={"memory": "16Gi"},
                )
            },
        }
    )
    s = sts(docs, "r")
    env = env_of(s)
    assert (env["A"], env["B"], env["C"]) == ("1", "20", "3")
    assert pod_spec(s)["nodeSelector"] == {"pool": "gpu", "zone": "b"}
    assert pod_spec(s)["tolerations"] == [{"key": "other", "operator": "Exists"}]
    assert container(s)["command"] == ["python3", "-m", "x"]
    assert container(s)["resources"]["limits"] == {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8"}


def test_null_in_a_role_keeps_the_default(render):
    """The schema rejects null in a role; without schema validation the merge still keeps the default."""
    docs = render(
        {"workerDefaults": DEFAULTS_ON, "roles": {"r": role(priorityClassName=None, shm=None)}},
        extra=("--skip-schema-validation",),
    )
    s = sts(docs, "r")
    assert pod_spec(s)["priorityClassName"] == "high"
    assert pod_spec(s)["volumes"][0]["name"] == "dshm"


def test_one_roles_overrides_never_leak_into_another(render):
    docs = render(
        {
            "workerDefaults": DEFAULTS_ON,
            "roles": {
                "a": role(env={"ONLY_A": "x"}, resources={"gpu": 0}, shm={"enabled": False}),
                "b": role(guardPort=9000),  # both on hostNetwork: distinct ports
            },
        }
    )
    b = sts(docs, "b")
    assert "ONLY_A" not in env_of(b)
    assert container(b)["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert pod_spec(b)["volumes"][0]["name"] == "dshm"


def test_workerdefaults_alone_apply_to_every_role(render):
    docs = render({"workerDefaults": {"resources": {"cpu": "3"}}, "roles": {"a": role(), "b": role()}})
    for name in ("a", "b"):
        assert container(sts(docs, name))["resources"]["requests"]["cpu"] == "3"
