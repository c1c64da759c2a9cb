import json

import pytest

from chartlib import find, one, render, render_error, role, sts

# Pod Security Standards (kubernetes.io/docs/concepts/security/pod-security-standards), as code.
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def baseline_violations(spec: dict) -> list[str]:
    out = [f"spec.{k}" for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    out += [f"hostPath volume {v['name']}" for v in spec.get("volumes", []) if "hostPath" in v]
    for c in spec["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("privileged"):
            out.append("privileged")
        out += [
            f"capability {cap}" for cap in sc.get("capabilities", {}).get("add", []) if cap not in BASELINE_CAPABILITIES
        ]
        # hostNetwork makes every containerPort a host port, which baseline forbids.
        out += [
            f"host port {p['containerPort']}"
            for p in c.get("ports", [])
            if p.get("hostPort") or spec.get("hostNetwork")
        ]
        if sc.get("seccompProfile", {}).get("type") == "Unconfined":
            out.append("seccomp Unconfined")
    return out


def restricted_violations(spec: dict) -> list[str]:
    out = baseline_violations(spec)
    pod_sc = spec.get("securityContext", {})
    out += [
        f"volume type of {v['name']}" for v in spec.get("volumes", []) if not (set(v) - {"name"}) <= RESTRICTED_VOLUMES
    ]
    for c in spec["containers"]:
        sc = c.get("securityContext", {})
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append("allowPrivilegeEscalation")
        if not sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")):
            out.append("runAsNonRoot")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            out.append("runAsUser 0")
        if sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type") not in (
            "RuntimeDefault",
            "Localhost",
        ):
            out.append("seccompProfile")
        caps = sc.get("capabilities", {})
        if "ALL" not in caps.get("drop", []):
            out.append("capabilities.drop ALL")
        out += [f"capability {cap}" for cap in caps.get("add", []) if cap != "NET_BIND_SERVICE"]
    return out


def pod_spec(s):
    return s["spec"]["template"]["spec"]


def test_default_role_and_test_pod_pass_restricted(render):
    docs = render({"roles": {"a": role()}})
    spec = pod_spec(sts(docs, "a"))
    assert restricted_violations(spec) == []
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["securityContext"]["runAsUser"] == 1000
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    c = spec["containers"][0]["securityContext"]
    assert c["allowPrivilegeEscalation"] is False and c["capabilities"]["drop"] == ["ALL"]
    assert restricted_violations(one(docs, "Pod")["spec"]) == []


def test_gpu_roles_and_pod_forks_stay_restricted(render):
    docs = render(
        {
            "roles": {
                "gpu": role(
                    resources={"gpu": 8}, extraVolumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "c"}}]
                )
            },
            "forks": {"helper": {"target": "gpu", "mode": "pod"}},
        }
    )
    for s in find(docs, "StatefulSet"):
        assert restricted_violations(pod_spec(s)) == []


@pytest.mark.parametrize(
    "settings,level",
    [
        ({"podSecurityContext": {"runAsNonRoot": False, "runAsUser": 0}}, "baseline"),
        (
            {
                "extraVolumes": [{"name": "n", "nfs": {"server": "nfs", "path": "/"}}],
                "extraVolumeMounts": [{"name": "n", "mountPath": "/n"}],
            },
            "baseline",
        ),
        ({"hostNetwork": True}, "privileged"),
        ({"rdma": {"enabled": True}}, "privileged"),
        (
            {
                "extraVolumes": [{"name": "ib", "hostPath": {"path": "/dev/infiniband"}}],
                "extraVolumeMounts": [{"name": "ib", "mountPath": "/dev/infiniband"}],
            },
            "privileged",
        ),
    ],
    ids=["root", "nfs-volume", "hostNetwork", "rdma", "hostPath"],
)
def test_opt_in_features_need_the_documented_level(settings, level, render):
    spec = pod_spec(sts(render({"roles": {"a": role(**settings)}}), "a"))
    assert restricted_violations(spec)
    assert bool(baseline_violations(spec)) == (level == "privileged")


# --- values and names that reach YAML or paths --------------------------------------------------------------------

INJECTION = "cluster.local\n          privileged: true"


def test_a_cluster_domain_that_is_not_a_dns_name_is_refused_by_the_schema():
    err = render_error({"clusterDomain": INJECTION, "roles": {"actor": role()}})
    assert "/clusterDomain" in err and "does not match pattern" in err


def test_the_test_pod_writes_every_url_quoted_and_has_no_privileged_field():
    """The schema is the first line; the template quotes what it writes all the same (a schema-less render, e.g.
    `helm template --skip-schema-validation`, keeps the newline inside the string)."""
    docs = render({"clusterDomain": INJECTION, "roles": {"actor": role()}}, extra=("--skip-schema-validation",))
    pod = one(docs, "Pod")
    container = pod["spec"]["containers"][0]
    assert "privileged" not in container["securityContext"]
    assert all(isinstance(arg, str) for arg in container["args"])
    assert any(INJECTION in arg for arg in container["args"][1:])


@pytest.mark.parametrize(("release", "suggestion"), [("1abc", "aw-1abc"), ("a.b", "aw-a-b")])
def test_a_release_name_the_services_cannot_carry_is_refused_before_anything_is_applied(release, suggestion):
    err = render_error({"roles": {"actor": role()}}, release=release)
    assert f'release name "{release}" cannot start the chart\'s Service names' in err and f'"{suggestion}"' in err


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"trial": ".."}, 'trial is "..": it becomes a directory'),
        ({"experiment": "."}, 'experiment is ".": it becomes a directory'),
        ({"trial": "a/b"}, "/trial"),
        ({"fullnameOverride": "1abc"}, "/fullnameOverride"),
    ],
)
def test_names_that_would_leave_their_directory_or_break_object_names_are_refused(values, fragment):
    assert fragment in render_error({**values, "roles": {"actor": role()}})


def test_the_topology_records_the_charts_own_selector_labels():
    docs = render({"roles": {"actor": role()}})
    configmap = next(d for d in find(docs, "ConfigMap") if d["metadata"]["name"].endswith("-topology"))
    topology = json.loads(configmap["data"]["topology.json"])
    labels = configmap["metadata"]["labels"]
    wanted = {key: labels[key] for key in ("app.kubernetes.io/name", "app.kubernetes.io/instance")}
    assert topology["selector"] == wanted
    assert wanted.items() <= sts(docs, "actor")["spec"]["selector"]["matchLabels"].items()
