from typing import Any

import pytest
from kubernetes.client import (
    V1Node,
    V1NodeCondition,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Taint,
)

from areal_workers.release.capacity import (
    CapacityProblem,
    check_capacity,
    preflight,
    role_statefulsets,
    template_pod,
)

GPU = "nvidia.com/gpu"


def node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    taints: list[V1Taint] | None = None,
    cordoned: bool = False,
    ready: bool = True,
    **allocatable: Any,
) -> V1Node:
    """A node; allocatable keys: cpu, memory, pods, gpu (nvidia.com/gpu) or any resource name with '_' for '/'."""
    resources = {(GPU if key == "gpu" else key.replace("__", "/")): str(value) for key, value in allocatable.items()}
    resources.setdefault("pods", "110")
    condition = V1NodeCondition(type="Ready", status="True" if ready else "False")
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name, **(labels or {})}),
        spec=V1NodeSpec(taints=taints, unschedulable=cordoned or None),
        status=V1NodeStatus(allocatable=resources, conditions=[condition]),
    )


def gpu_node(name: str, gpus: int = 8, **more: Any) -> V1Node:
    return node(name, cpu="96", memory="1000Gi", gpu=gpus, **{"labels": {"pool": "gpu"}, **more})


def statefulset(
    role: str,
    *,
    gpu: int = 0,
    cpu: Any = "8",
    memory: str = "64Gi",
    replicas: int = 2,
    node_selector: dict[str, str] | None = None,
    tolerations: list[dict] | None = None,
    affinity: dict | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A StatefulSet shaped like the chart's (labels, annotations, one worker container with requests = limits)."""
    quantities: dict[str, Any] = {"cpu": cpu, "memory": memory, **(extra or {})}
    if gpu:
        quantities[GPU] = str(gpu)
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "worker",
                "image": "ghcr.io/inclusionai/areal-runtime:v1.0.4",
                "resources": {"requests": quantities, "limits": quantities},
            }
        ]
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    if tolerations:
        spec["tolerations"] = tolerations
    if affinity:
        spec["affinity"] = affinity
    labels = {"app.kubernetes.io/component": "worker", "areal.io/role": role}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": f"rel-areal-workers-{role}",
            "labels": labels,
            "annotations": {"areal.io/role-name": role},
        },
        "spec": {"replicas": replicas, "template": {"metadata": {"labels": labels}, "spec": spec}},
    }


def messages(manifests: list[dict], nodes: list[V1Node], roles: tuple[str, ...] = ("actor",)) -> list[str]:
    return preflight(manifests, roles, nodes, "reject")


# --- resources ---------------------------------------------------------------------------------------------------


def test_gpu_request_larger_than_any_node():
    actor = statefulset("actor", gpu=16, node_selector={"pool": "gpu"})
    nodes = [gpu_node("g1"), gpu_node("g2"), node("c1", labels={"pool": "cpu"}, cpu="32", memory="128Gi")]
    assert messages([actor], nodes) == [
        "role actor needs nvidia.com/gpu: 16, cpu: 8, memory: 64Gi per worker; no node offers more than 8 "
        "nvidia.com/gpu (2 of 3 nodes match its nodeSelector pool=gpu): lower SchedulingSpec.gpu to <= 8, or add a "
        "node with nvidia.com/gpu >= 16, cpu >= 8, memory >= 64Gi"
    ]


def test_cpu_request_larger_than_any_node():
    [message] = messages(
        [statefulset("actor", cpu="48")], [node("a", cpu="32", memory="256Gi"), node("b", cpu="31500m", memory="256Gi")]
    )
    assert message.startswith(
        "role actor needs cpu: 48, memory: 64Gi per worker; no node offers more than 32 cpu "
        "(2 nodes): lower SchedulingSpec.cpu to <= 32, or add a node with cpu >= 48"
    )


def test_memory_advice_is_in_gib_rounded_down():
    [message] = messages([statefulset("actor", memory="64Gi")], [node("a", cpu="32", memory="62.86Gi")])
    assert "no node offers more than 62.9Gi memory" in message
    assert "lower SchedulingSpec.mem to <= 62.8 (GiB)" in message


def test_several_resources_short_are_all_named_with_their_fix():
    [message] = messages([statefulset("actor", gpu=16, cpu="128", memory="2Ti")], [gpu_node("g1")])
    assert (
        "no node offers more than 8 nvidia.com/gpu; no node offers more than 96 cpu; no node offers more than "
        "1000Gi memory" in message
    )
    assert (
        "lower SchedulingSpec.gpu to <= 8, or lower SchedulingSpec.cpu to <= 96, or lower SchedulingSpec.mem to "
        "<= 1000 (GiB), or add a node with nvidia.com/gpu >= 16, cpu >= 128, memory >= 2Ti" in message
    )


def test_no_single_node_has_everything_at_once():
    nodes = [node("many-gpus", cpu="4", memory="512Gi", gpu=8), node("many-cpus", cpu="64", memory="512Gi")]
    [message] = messages([statefulset("actor", gpu=8, cpu="16")], nodes)
    assert (
        "no node offers all of it at once (2 nodes: many-gpus has nvidia.com/gpu 8, cpu 4, memory 512Gi; "
        "many-cpus has nvidia.com/gpu 0, cpu 64, memory 512Gi)" in message
    )
    assert "lower the requests, or add a node with nvidia.com/gpu >= 8, cpu >= 16, memory >= 64Gi" in message


def test_gpu_no_node_offers_names_the_device_plugin():
    [message] = messages([statefulset("actor", gpu=1)], [node("c1", cpu="32", memory="128Gi")])
    assert (
        "no node offers nvidia.com/gpu (1 node): set SchedulingSpec.gpu to 0 (or install the GPU device plugin"
        in message
    )


def test_other_extended_resources_count_too():
    actor = statefulset("actor", extra={"rdma/hca": "1"})
    [message] = messages([actor], [node("a", cpu="32", memory="128Gi")])
    assert "needs rdma/hca: 1, cpu: 8, memory: 64Gi" in message
    assert (
        "no node offers rdma/hca (1 node): drop the rdma/hca request from the chart's values (or install its "
        "device plugin)" in message
    )
    assert messages([actor], [node("a", cpu="32", memory="128Gi", rdma__hca="1000")]) == []


def test_a_node_without_room_for_pods_cannot_hold_one():
    [message] = messages([statefulset("actor")], [node("a", cpu="32", memory="128Gi", pods="0")])
    assert "no node it may use accepts another pod (allocatable pods is 0)" in message
    assert "raise the nodes' pod limit" in message


def test_fits():
    nodes = [gpu_node("g1"), node("c1", cpu="4", memory="8Gi")]
    assert messages([statefulset("actor", gpu=8, node_selector={"pool": "gpu"})], nodes) == []


def test_integer_and_milli_quantities_in_the_template():
    assert messages([statefulset("actor", cpu=8)], [node("a", cpu="8000m", memory="64Gi")]) == []
    assert messages([statefulset("actor", cpu="8001m")], [node("a", cpu="8", memory="64Gi")]) != []


def test_a_not_ready_node_still_counts():
    """NotReady may pass; the wait for readiness reports it if it does not."""
    assert messages([statefulset("actor")], [node("a", cpu="32", memory="128Gi", ready=False)]) == []


# --- node selection ----------------------------------------------------------------------------------------------


def test_node_selector_matching_no_node_names_the_selector_and_the_labels():
    nodes = [node("c1", labels={"pool": "cpu"}, cpu="32", memory="128Gi"), node("c2", cpu="32", memory="128Gi")]
    [message] = messages([statefulset("actor", node_selector={"pool": "gpu"})], nodes)
    assert message == (
        "role actor: nodeSelector pool=gpu (nodes have pool: cpu) matches none of the 2 nodes: label "
        "nodes to match, or change KubernetesSchedulerConfig.node_selector or the chart's "
        "nodeSelector/affinity"
    )


def test_required_node_affinity_is_honoured():
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "gpu-type", "operator": "In", "values": ["h100"]}]}]
            }
        }
    }
    actor = statefulset("actor", gpu=8, affinity=affinity)
    a100 = node("a100", labels={"gpu-type": "a100"}, cpu="96", memory="1000Gi", gpu=8)
    h100 = node("h100", labels={"gpu-type": "h100"}, cpu="96", memory="1000Gi", gpu=8)
    [message] = messages([actor], [a100])
    assert "required node affinity (gpu-type In ['h100']) matches none of the 1 node" in message
    assert messages([actor], [a100, h100]) == []


def test_selector_on_a_bigger_node_elsewhere_is_pointed_out():
    nodes = [gpu_node("g1"), node("big", labels={"pool": "big"}, cpu="96", memory="1000Gi", gpu=16)]
    [message] = messages([statefulset("actor", gpu=16, node_selector={"pool": "gpu"})], nodes)
    assert message.endswith("; node big would hold it but does not match its nodeSelector pool=gpu")


# --- taints and cordons ------------------------------------------------------------------------------------------


def test_taint_not_tolerated():
    taint = V1Taint(key="dedicated", value="training", effect="NoSchedule")
    [message] = messages([statefulset("actor", gpu=8)], [gpu_node("g1", taints=[taint])])
    assert message.startswith(
        "role actor: every node it may use (g1) has a taint it does not tolerate "
        "(dedicated=training:NoSchedule): add tolerations for them"
    )


@pytest.mark.parametrize(
    "toleration",
    [
        {"key": "dedicated", "operator": "Equal", "value": "training", "effect": "NoSchedule"},
        {"key": "dedicated", "operator": "Exists"},
        {"operator": "Exists"},
    ],
)
def test_taint_tolerated(toleration):
    taint = V1Taint(key="dedicated", value="training", effect="NoSchedule")
    actor = statefulset("actor", gpu=8, tolerations=[toleration])
    assert messages([actor], [gpu_node("g1", taints=[taint])]) == []


def test_prefer_no_schedule_and_wrong_value_tolerations():
    prefer = V1Taint(key="spot", value="true", effect="PreferNoSchedule")
    assert messages([statefulset("actor")], [node("a", cpu="32", memory="128Gi", taints=[prefer])]) == []
    no_execute = V1Taint(key="dedicated", value="serving", effect="NoExecute")
    actor = statefulset("actor", tolerations=[{"key": "dedicated", "operator": "Equal", "value": "training"}])
    [message] = messages([actor], [node("a", cpu="32", memory="128Gi", taints=[no_execute])])
    assert "dedicated=serving:NoExecute" in message


def test_tainted_bigger_node_is_pointed_out():
    taint = V1Taint(key="dedicated", value="big", effect="NoSchedule")
    nodes = [gpu_node("g1"), gpu_node("g2", gpus=16, taints=[taint])]
    [message] = messages([statefulset("actor", gpu=16, node_selector={"pool": "gpu"})], nodes)
    assert "(2 of 2 nodes match its nodeSelector pool=gpu, 1 of them with a taint it does not tolerate)" in message
    assert "node g2 would hold it but has taint dedicated=big:NoSchedule (add a toleration)" in message


def test_unschedulable_nodes_do_not_count():
    cordoned = gpu_node("g1", cordoned=True)
    [message] = messages([statefulset("actor", gpu=8)], [cordoned])
    assert (
        message == "role actor: every node it may use is cordoned (g1): uncordon them (kubectl uncordon NODE) "
        "or add nodes"
    )
    [message] = messages([statefulset("actor", gpu=8)], [cordoned, gpu_node("small", gpus=4)])
    assert "no node offers more than 4 nvidia.com/gpu (2 nodes, 1 of them cordoned)" in message
    assert "node g1 would hold it but is cordoned (kubectl uncordon g1)" in message


# --- roles, manifests and modes ----------------------------------------------------------------------------------


def test_no_nodes_no_verdict():
    assert messages([statefulset("actor", gpu=1000)], []) == []


def test_only_the_named_roles_are_checked():
    manifests = [
        statefulset("actor", gpu=16),
        statefulset("rollout", gpu=16),
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "x", "labels": {"areal.io/role": "actor"}}},
    ]
    nodes = [gpu_node("g1")]
    assert [p.role for p in check_capacity(manifests, ["rollout"], nodes)] == ["rollout"]
    assert [p.role for p in check_capacity(manifests, ["actor", "rollout", "actor"], nodes)] == ["actor", "rollout"]
    assert check_capacity(manifests, ["critic"], nodes) == []  # colocated: no StatefulSet of its own
    assert len(role_statefulsets(manifests, "actor")) == 1


def test_zero_replicas_are_not_checked():
    assert messages([statefulset("actor", gpu=16, replicas=0)], [gpu_node("g1")]) == []


def test_problems_are_role_and_message_pairs():
    [problem] = check_capacity([statefulset("actor", gpu=16)], ["actor"], [gpu_node("g1")])
    assert isinstance(problem, CapacityProblem)
    role, message = problem
    assert role == "actor" and message.startswith("role actor needs")


def test_modes():
    manifests, nodes = [statefulset("actor", gpu=16)], [gpu_node("g1")]
    assert preflight(manifests, ["actor"], nodes, "off") == []
    assert preflight(manifests, ["actor"], nodes, "warn") == preflight(manifests, ["actor"], nodes, "reject")
    assert len(preflight(manifests, ["actor"], nodes)) == 1  # reject by default
    with pytest.raises(ValueError, match="must be one of reject, warn, off"):
        preflight(manifests, ["actor"], nodes, "maybe")  # type: ignore[arg-type]


def test_template_pod_carries_what_node_selection_reads():
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]
            }
        },
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []},
    }
    sts = statefulset(
        "actor",
        gpu=2,
        cpu=4,
        node_selector={"pool": "gpu"},
        tolerations=[{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}],
        affinity=affinity,
    )
    pod = template_pod(sts)
    assert pod.metadata.name == "rel-areal-workers-actor-0"
    assert pod.spec.node_selector == {"pool": "gpu"}
    assert pod.spec.containers[0].resources.requests == {"cpu": "4", "memory": "64Gi", GPU: "2"}
    assert pod.spec.tolerations[0].key == "k" and pod.spec.tolerations[0].effect == "NoSchedule"
    term = pod.spec.affinity.node_affinity.required_during_scheduling_ignored_during_execution.node_selector_terms[0]
    assert term.match_fields[0].values == ["n1"]
