import json

from chartlib import NAMESPACE, RELEASE, container, env_of, find, one, role, sts

FULL = f"{RELEASE}-areal-workers"


def pod_spec(doc: dict) -> dict:
    return doc["spec"]["template"]["spec"]


def args_map(statefulset: dict) -> dict[str, str]:
    args = container(statefulset)["args"]
    return {args[i]: args[i + 1] for i in range(0, 20, 2)}


def test_replicas_and_workload_shape(render):
    docs = render({"roles": {"actor": role(2), "rollout": role(3)}})
    actor = sts(docs, "actor")
    assert actor["metadata"]["name"] == f"{FULL}-actor"
    assert actor["spec"]["replicas"] == 2
    assert sts(docs, "rollout")["spec"]["replicas"] == 3
    assert actor["spec"]["podManagementPolicy"] == "Parallel"
    assert actor["spec"]["serviceName"] == f"{FULL}-actor"
    svc = one(docs, "Service", f"{FULL}-actor")
    assert svc["spec"]["clusterIP"] == "None"
    assert svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == actor["spec"]["selector"]["matchLabels"]
    assert sts(render({"roles": {"idle": role(0)}}), "idle")["spec"]["replicas"] == 0


def test_image_defaults_overrides_and_pull_secrets(render):
    docs = render({"roles": {"a": role()}})
    c = container(sts(docs, "a"))
    assert c["image"] == "ghcr.io/inclusionai/areal-runtime:v1.0.4"
    assert c["imagePullPolicy"] == "IfNotPresent"
    assert "imagePullSecrets" not in pod_spec(sts(docs, "a"))

    docs = render(
        {
            "image": {
                "repository": "reg.example/areal",
                "tag": "v9",
                "pullPolicy": "Always",
                "pullSecrets": ["regcred"],
            },
            "roles": {
                "a": role(),
                "b": role(
                    image={"repository": "reg.example/other", "tag": "sha256:" + "0" * 64, "pullPolicy": "Never"}
                ),
            },
        }
    )
    a, b = sts(docs, "a"), sts(docs, "b")
    assert container(a)["image"] == "reg.example/areal:v9"
    assert container(a)["imagePullPolicy"] == "Always"
    assert pod_spec(a)["imagePullSecrets"] == [{"name": "regcred"}]
    assert container(b)["image"] == "reg.example/other@sha256:" + "0" * 64
    assert container(b)["imagePullPolicy"] == "Never"


def test_contract_command_line(render):
    docs = render(
        {
            "experiment": "gsm8k",
            "trial": "t1",
            "guard": {"port": 9000},
            "cluster": {
                "fileroot": "/storage/exp",
                "nameResolve": {"type": "etcd3", "nfsRecordRoot": "/storage/nr", "etcd3Addr": "etcd:2379"},
            },
            "roles": {"actor_main": role(extraArgs=["--foo", "bar"])},
        }
    )
    c = container(sts(docs, "actor_main"))
    assert c["command"] == ["python", "-m", "areal.infra.rpc.rpc_server"]
    assert c["args"] == [
        "--host", "$(POD_IP)",
        "--port", "9000",
        "--experiment-name", "gsm8k",
        "--trial-name", "t1",
        "--role", "actor_main",
        "--worker-index", "$(AREAL_WORKER_INDEX)",
        "--name-resolve-type", "etcd3",
        "--nfs-record-root", "/storage/nr",
        "--etcd3-addr", "etcd:2379",
        "--fileroot", "/storage/exp",
        "--foo", "bar",
    ]  # fmt: skip


def test_literal_values_are_escaped_for_kubelet_expansion(render):
    docs = render({"experiment": "exp$(POD_IP)", "roles": {"a": role()}})
    assert args_map(sts(docs, "a"))["--experiment-name"] == "exp$$(POD_IP)"


def test_downward_api_env_and_user_env(render):
    docs = render(
        {
            "roles": {
                "a": role(
                    env={
                        "NCCL_DEBUG": "INFO",
                        "THREADS": 8,
                        "SECRET": {"valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                    },
                    envFrom=[{"secretRef": {"name": "wandb"}}],
                )
            }
        }
    )
    c = container(sts(docs, "a"))
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"][:4]}
    assert fields == {
        "POD_NAME": "metadata.name",
        "POD_NAMESPACE": "metadata.namespace",
        "POD_IP": "status.podIP",
        "AREAL_WORKER_INDEX": "metadata.labels['apps.kubernetes.io/pod-index']",
    }
    env = env_of(sts(docs, "a"))
    assert env["NCCL_DEBUG"] == "INFO"
    assert env["THREADS"] == "8"
    assert env["SECRET"] == {"secretKeyRef": {"name": "s", "key": "k"}}
    assert env["HOME"] == "/tmp" and env["USER"] == "areal"
    assert c["envFrom"] == [{"secretRef": {"name": "wandb"}}]


def test_setup_commands_wrap_in_bash_only_when_given(render):
    plain = container(sts(render({"roles": {"a": role()}}), "a"))
    assert plain["command"][0] == "python"
    docs = render({"roles": {"a": role(setupCommands=["pip install x", "echo ready"], command=["python3", "-m", "w"])}})
    c = container(sts(docs, "a"))
    assert c["command"] == ["bash", "-c", 'pip install x && echo ready && exec "$@"', "--", "python3", "-m", "w"]
    assert c["args"][:2] == ["--host", "$(POD_IP)"]


def test_resources_requests_equal_limits_and_gpu(render):
    docs = render(
        {
            "roles": {
                "cpu": role(resources={"cpu": "500m", "memory": "2Gi"}),
                "gpu": role(resources={"cpu": 16, "memory": "64Gi", "gpu": 8}),
                "amd": role(resources={"gpu": 2, "gpuResourceName": "amd.com/gpu"}),
            }
        }
    )
    r = container(sts(docs, "cpu"))["resources"]
    assert r["requests"] == r["limits"] == {"cpu": "500m", "memory": "2Gi"}
    r = container(sts(docs, "gpu"))["resources"]
    assert r["requests"] == r["limits"] == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "8"}
    r = container(sts(docs, "amd"))["resources"]
    assert r["limits"]["amd.com/gpu"] == "2" and "nvidia.com/gpu" not in r["limits"]


def test_guard_and_extra_ports(render):
    docs = render({"roles": {"a": role(extraPorts=3), "b": role(extraPorts=0, guardPort=9100)}})
    a = container(sts(docs, "a"))
    assert [(p["name"], p["containerPort"]) for p in a["ports"]] == [
        ("guard", 8000), ("extra-1", 8001), ("extra-2", 8002), ("extra-3", 8003)
    ]  # fmt: skip
    svc = one(docs, "Service", f"{FULL}-a")
    assert [(p["name"], p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [
        ("guard", 8000, "guard"), ("extra-1", 8001, "extra-1"), ("extra-2", 8002, "extra-2"),
        ("extra-3", 8003, "extra-3"),
    ]  # fmt: skip
    b = container(sts(docs, "b"))
    assert [(p["name"], p["containerPort"]) for p in b["ports"]] == [("guard", 9100)]
    assert args_map(sts(docs, "b"))["--port"] == "9100"


def test_shm_volume(render):
    docs = render({"roles": {"a": role(shm={"sizeLimit": "8Gi"}), "b": role(shm={"enabled": False})}})
    a = sts(docs, "a")
    assert pod_spec(a)["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}]
    assert container(a)["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]
    b = sts(docs, "b")
    assert "volumes" not in pod_spec(b) and "volumeMounts" not in container(b)


def test_extra_volumes_and_mounts(render):
    vol = {"name": "storage", "persistentVolumeClaim": {"claimName": "pvc"}}
    mount = {"name": "storage", "mountPath": "/storage"}
    docs = render({"roles": {"a": role(extraVolumes=[vol], extraVolumeMounts=[mount], shm={"enabled": False})}})
    a = sts(docs, "a")
    assert pod_spec(a)["volumes"] == [vol]
    assert container(a)["volumeMounts"] == [mount]


def test_host_network_and_rdma(render):
    docs = render(
        {"roles": {"a": role(hostNetwork=True, rdma={"enabled": True, "resourceName": "rdma/hca", "count": 2})}}
    )
    spec = pod_spec(sts(docs, "a"))
    assert spec["hostNetwork"] is True and spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    c = spec["containers"][0]
    assert c["resources"]["limits"]["rdma/hca"] == "2" == c["resources"]["requests"]["rdma/hca"]
    assert c["securityContext"]["capabilities"] == {"add": ["IPC_LOCK"], "drop": ["ALL"]}
    spec = pod_spec(sts(render({"roles": {"a": role()}}), "a"))
    assert "hostNetwork" not in spec and "dnsPolicy" not in spec
    assert "add" not in spec["containers"][0]["securityContext"]["capabilities"]


def test_scheduling_fields(render):
    tol = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}}  # fmt: skip
    spread = [
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"},
        {
            "maxSkew": 2,
            "topologyKey": "zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"x": "y"}},
        },
    ]
    docs = render(
        {
            "roles": {
                "a": role(
                    nodeSelector={"pool": "gpu"},
                    tolerations=tol,
                    affinity=aff,
                    topologySpreadConstraints=spread,
                    priorityClassName="high",
                    schedulerName="volcano",
                    terminationGracePeriodSeconds=300,
                )
            }
        }
    )
    spec = pod_spec(sts(docs, "a"))
    assert spec["nodeSelector"] == {"pool": "gpu"}
    assert spec["tolerations"] == tol
    assert spec["affinity"] == aff
    assert spec["priorityClassName"] == "high"
    assert spec["schedulerName"] == "volcano"
    assert spec["terminationGracePeriodSeconds"] == 300
    first, second = spec["topologySpreadConstraints"]
    assert first["labelSelector"] == {"matchLabels": sts(docs, "a")["spec"]["selector"]["matchLabels"]}
    assert second == spread[1]
    plain = pod_spec(sts(render({"roles": {"a": role()}}), "a"))
    for key in (
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
        "priorityClassName",
        "schedulerName",
    ):
        assert key not in plain
    assert plain["terminationGracePeriodSeconds"] == 60


def test_pod_labels_and_annotations(render):
    docs = render(
        {"roles": {"a": role(podLabels={"team": "rl"}, podAnnotations={"k8s.v1.cni.cncf.io/networks": "rdma-net"})}}
    )
    meta = sts(docs, "a")["spec"]["template"]["metadata"]
    assert meta["labels"]["team"] == "rl" and meta["labels"]["areal.io/role"] == "a"
    assert meta["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net"
    assert meta["annotations"]["areal.io/role-name"] == "a"


def test_security_contexts_are_configurable(render):
    docs = render(
        {
            "roles": {
                "a": role(
                    podSecurityContext={"runAsUser": 2000, "fsGroup": 3000},
                    containerSecurityContext={"readOnlyRootFilesystem": True},
                )
            }
        }
    )
    spec = pod_spec(sts(docs, "a"))
    assert spec["securityContext"]["runAsUser"] == 2000 and spec["securityContext"]["fsGroup"] == 3000
    assert spec["securityContext"]["runAsNonRoot"] is True  # merged, not replaced
    assert spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False


def test_probes(render):
    c = container(sts(render({"roles": {"a": role()}}), "a"))
    assert c["readinessProbe"] == {  # no initialDelaySeconds: 0 is the API's default, which it leaves out
        "httpGet": {"path": "/health", "port": "guard"},
        "periodSeconds": 5,
        "timeoutSeconds": 2,
        "failureThreshold": 3,
    }
    assert "livenessProbe" not in c and "startupProbe" not in c
    probes = {
        "readiness": {"enabled": False},
        "liveness": {
            "enabled": True,
            "periodSeconds": 30,
            "failureThreshold": 10,
            "timeoutSeconds": 7,
            "initialDelaySeconds": 60,
        },
        "startup": {"enabled": True, "failureThreshold": 500},
    }
    c = container(sts(render({"roles": {"a": role(probes=probes)}}), "a"))
    assert "readinessProbe" not in c
    assert c["livenessProbe"] == {
        "httpGet": {"path": "/health", "port": "guard"},
        "initialDelaySeconds": 60,
        "periodSeconds": 30,
        "timeoutSeconds": 7,
        "failureThreshold": 10,
    }
    assert c["startupProbe"]["failureThreshold"] == 500 and c["startupProbe"]["periodSeconds"] == 5


def test_service_account(render):
    docs = render({"roles": {"a": role()}})
    sa = one(docs, "ServiceAccount")
    assert sa["metadata"]["name"] == FULL and sa["automountServiceAccountToken"] is False
    spec = pod_spec(sts(docs, "a"))
    assert spec["serviceAccountName"] == FULL and spec["automountServiceAccountToken"] is False

    docs = render(
        {
            "serviceAccount": {
                "name": "workers",
                "automountServiceAccountToken": True,
                "annotations": {"iam": "role-x"},
            },
            "roles": {"a": role()},
        }
    )
    sa = one(docs, "ServiceAccount", "workers")
    assert sa["metadata"]["annotations"]["iam"] == "role-x" and sa["automountServiceAccountToken"] is True
    assert pod_spec(sts(docs, "a"))["automountServiceAccountToken"] is True

    docs = render({"serviceAccount": {"create": False, "name": "existing"}, "roles": {"a": role()}})
    assert not find(docs, "ServiceAccount")
    assert pod_spec(sts(docs, "a"))["serviceAccountName"] == "existing"
    docs = render({"serviceAccount": {"create": False}, "roles": {"a": role()}})
    assert pod_spec(sts(docs, "a"))["serviceAccountName"] == "default"


WORKERS_POLICY = f"{RELEASE}-areal-workers"  # beside it, <fullname>-trainer (test_network_policy_of_the_trainer)
RELEASE_PODS = {
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "areal-workers", "app.kubernetes.io/instance": RELEASE}}
}


def test_network_policy(render):
    docs = render({"roles": {"a": role(extraPorts=2), "b": role(guardPort=9000)}})
    np = one(docs, "NetworkPolicy", WORKERS_POLICY)
    assert np["spec"]["policyTypes"] == ["Ingress"] and "egress" not in np["spec"]
    assert np["spec"]["podSelector"]["matchLabels"] == RELEASE_PODS["podSelector"]["matchLabels"]
    release_pods, controller = np["spec"]["ingress"]
    # The release's own pods on every port (NCCL, gloo and the TCPStore pick theirs at run time).
    assert release_pods == {"from": [RELEASE_PODS]}
    assert controller["from"] == [{"podSelector": {"matchLabels": {"areal.io/controller": "true"}}}]
    assert controller["ports"] == [
        {"protocol": "TCP", "port": 8000},
        {"protocol": "TCP", "port": 8001},
        {"protocol": "TCP", "port": 8002},
        {"protocol": "TCP", "port": 9000},
        {"protocol": "TCP", "port": 9001},
        {"protocol": "TCP", "port": 10000, "endPort": 32767},  # AReaL's find_free_ports range
    ]

    docs = render(
        {
            "networkPolicy": {
                "allocatedPorts": {"start": 20000, "end": 20000},
                "controller": {
                    # Helm merges maps: the default areal.io/controller label is dropped with null.
                    "podSelector": {"matchLabels": {"app": "trainer", "areal.io/controller": None}},
                    "namespaceSelector": {"matchLabels": {"team": "rl"}},
                    "cidrs": ["10.0.0.0/8"],
                },
            },
            "roles": {"a": role()},
        }
    )
    _, controller = one(docs, "NetworkPolicy", WORKERS_POLICY)["spec"]["ingress"]
    assert controller["from"] == [
        {"podSelector": {"matchLabels": {"app": "trainer"}}, "namespaceSelector": {"matchLabels": {"team": "rl"}}},
        {"ipBlock": {"cidr": "10.0.0.0/8"}},
    ]
    assert controller["ports"][-1] == {"protocol": "TCP", "port": 20000}

    docs = render(
        {
            "networkPolicy": {
                "allocatedPorts": {"enabled": False},
                "controller": {"podSelector": None, "cidrs": ["192.168.1.7/32"]},
            },
            "roles": {"a": role()},
        }
    )
    _, controller = one(docs, "NetworkPolicy", WORKERS_POLICY)["spec"]["ingress"]
    assert controller["ports"] == [{"protocol": "TCP", "port": 8000}, {"protocol": "TCP", "port": 8001}]
    assert controller["from"] == [{"ipBlock": {"cidr": "192.168.1.7/32"}}]

    assert not find(render({"networkPolicy": {"enabled": False}, "roles": {"a": role()}}), "NetworkPolicy")


def test_network_policy_of_the_trainer_admits_the_release_to_the_controller_pods_only(render):
    """The controller side (AReaL's unauthenticated callback server): the pods the workers admit as controller admit
    the release's pods, on the allocated range; a controller known only by namespace or address gets none."""
    docs = render({"roles": {"a": role()}})
    trainer = one(docs, "NetworkPolicy", f"{WORKERS_POLICY}-trainer")
    assert trainer["spec"]["podSelector"] == {"matchLabels": {"areal.io/controller": "true"}}
    assert trainer["spec"]["ingress"] == [
        {"from": [RELEASE_PODS], "ports": [{"protocol": "TCP", "port": 10000, "endPort": 32767}]}
    ]
    outside = {"namespaceSelector": {"matchLabels": {"team": "rl"}}}
    assert len(find(render({"networkPolicy": {"controller": outside}, "roles": {"a": role()}}), "NetworkPolicy")) == 1
    isolate_off = {"networkPolicy": {"controller": {"isolate": False}}, "roles": {"a": role()}}
    assert [d["metadata"]["name"] for d in find(render(isolate_off), "NetworkPolicy")] == [WORKERS_POLICY]


def test_network_policy_egress_blocks_the_metadata_service_when_asked(render):
    np = one(
        render({"networkPolicy": {"egress": {"enabled": True}}, "roles": {"a": role()}}),
        "NetworkPolicy",
        WORKERS_POLICY,
    )
    assert np["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert np["spec"]["egress"] == [
        {
            "to": [
                {"namespaceSelector": {}},
                {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.169.254/32"]}},
                {"ipBlock": {"cidr": "::/0", "except": ["fd00:ec2::254/128"]}},
            ]
        }
    ]
    np = one(
        render(
            {
                "networkPolicy": {"egress": {"enabled": True, "deniedCidrs": ["100.100.100.200/32"]}},
                "roles": {"a": role()},
            }
        ),
        "NetworkPolicy",
        WORKERS_POLICY,
    )
    assert np["spec"]["egress"][0]["to"][1:] == [
        {"ipBlock": {"cidr": "0.0.0.0/0", "except": ["100.100.100.200/32"]}},
        {"ipBlock": {"cidr": "::/0"}},
    ]


def test_controller_rbac(render):
    assert not find(render({}), "Role")
    docs = render({"controllerRbac": {"create": True}})
    name = f"{FULL}-controller"
    assert one(docs, "ServiceAccount", name)
    assert one(docs, "Role", name)
    binding = one(docs, "RoleBinding", name)
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}]
    name = "trainer-areal-workers-controller"  # rbac/cluster/admission-policy.yaml matches it (test_policy_identity.py)
    docs = render({"controllerRbac": {"create": True, "serviceAccountName": name}})
    assert one(docs, "RoleBinding", name)["subjects"][0]["name"] == name


def test_helm_test_pod(render):
    docs = render({"clusterDomain": "corp.local", "roles": {"a": role(2), "b": role(1, guardPort=9000)}})
    pod = one(docs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    c = pod["spec"]["containers"][0]
    assert c["image"] == "ghcr.io/inclusionai/areal-runtime:v1.0.4"
    assert c["command"][:2] == ["python3", "-c"]
    assert c["args"] == [
        "5",
        f"http://{FULL}-a-0.{FULL}-a.{NAMESPACE}.svc.corp.local:8000/health",
        f"http://{FULL}-a-1.{FULL}-a.{NAMESPACE}.svc.corp.local:8000/health",
        f"http://{FULL}-b-0.{FULL}-b.{NAMESPACE}.svc.corp.local:9000/health",
    ]
    docs = render(
        {"tests": {"image": {"repository": "python", "tag": "3.12-slim", "pullPolicy": "Always"}, "timeoutSeconds": 9}}
    )
    c = one(docs, "Pod")["spec"]["containers"][0]
    assert c["image"] == "python:3.12-slim" and c["imagePullPolicy"] == "Always" and c["args"] == ["9"]
    assert not find(render({"tests": {"enabled": False}}), "Pod")


def test_name_overrides(render):
    docs = render({"nameOverride": "aw", "roles": {"a": role()}})
    s = sts(docs, "a")
    assert s["metadata"]["name"] == f"{RELEASE}-aw-a"
    assert s["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"] == "aw"
    docs = render({"fullnameOverride": "exp1", "roles": {"a": role()}})
    assert sts(docs, "a")["metadata"]["name"] == "exp1-a"
    assert one(docs, "ConfigMap")["metadata"]["name"] == "exp1-topology"


def test_colocations_and_forks(render):
    values = {
        "roles": {"actor": role(2, resources={"gpu": 8}, hostNetwork=True, rdma={"enabled": True}), "rollout": role(1)},
        "colocations": {"critic": "actor"},
        "forks": {
            "ref": {"target": "actor", "command": ["areal.infra.rpc.rpc_server"]},
            "helper": {
                "target": "actor",
                "mode": "pod",
                "command": ["python", "-m", "helper"],
                "overrides": {"resources": {"cpu": "2"}},
            },
        },
    }
    docs = render(values)
    assert sorted(d["metadata"]["labels"]["areal.io/role"] for d in find(docs, "StatefulSet")) == [
        "actor",
        "helper",
        "rollout",
    ]
    assert len(find(docs, "Service")) == 3
    helper = sts(docs, "helper")
    assert helper["spec"]["replicas"] == 2
    assert helper["metadata"]["labels"]["areal.io/fork-target"] == "actor"
    spec = pod_spec(helper)
    aff = spec["affinity"]
    assert aff["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": sts(docs, "actor")["spec"]["selector"]["matchLabels"]},
        }
    ]
    assert aff["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == [
        {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {"matchLabels": helper["spec"]["selector"]["matchLabels"]},
        }
    ]
    c = spec["containers"][0]
    assert c["command"] == ["python", "-m", "helper"]
    assert c["resources"]["limits"] == {"cpu": "2", "memory": "4Gi"}  # no GPU, no RDMA
    assert "hostNetwork" not in spec and "add" not in c["securityContext"]["capabilities"]
    assert args_map(helper)["--role"] == "helper"

    topology = json.loads(one(docs, "ConfigMap")["data"]["topology.json"])
    assert topology["colocations"] == {"critic": "actor"}
    assert topology["forks"]["ref"] == {
        "target": "actor",
        "mode": "process",
        "command": ["areal.infra.rpc.rpc_server"],
        "replicas": 2,
    }
    assert topology["forks"]["helper"]["statefulset"] == helper["metadata"]["name"]
    assert topology["forks"]["helper"]["mode"] == "pod"
