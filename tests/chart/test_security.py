import pytest

from chartlib import find, one, role, sts

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
