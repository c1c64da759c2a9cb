"""capacity.preflight on what the chart really renders: roles and pod-mode forks are found by their labels, and the
worker container's requests are read from the rendered StatefulSets."""

from kubernetes.client import V1Node, V1NodeSpec, V1NodeStatus, V1ObjectMeta

from areal_workers.release.capacity import check_capacity, preflight
from chartlib import role


def gpu_node(name: str, gpus: int, cpu: str = "96") -> V1Node:
    return V1Node(
        metadata=V1ObjectMeta(name=name, labels={"pool": "gpu"}),
        spec=V1NodeSpec(),
        status=V1NodeStatus(allocatable={"cpu": cpu, "memory": "1000Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}),
    )


def test_rendered_roles_forks_and_colocations(render):
    docs = render(
        {
            "roles": {
                "actor": role(2, resources={"gpu": 16, "cpu": 8, "memory": "64Gi"}, nodeSelector={"pool": "gpu"}),
                "rollout": role(1, resources={"gpu": 8, "cpu": 8, "memory": "64Gi"}),
            },
            "colocations": {"critic": "actor"},
            "forks": {"helper": {"target": "actor", "mode": "pod", "command": ["python", "-m", "helper"]}},
        }
    )
    nodes = [gpu_node("g1", 8), gpu_node("g2", 8)]
    assert preflight(docs, ["actor"], nodes) == [
        "role actor needs nvidia.com/gpu: 16, cpu: 8, memory: 64Gi per worker; no node offers more than 8 "
        "nvidia.com/gpu (2 of 2 nodes match its nodeSelector pool=gpu): lower SchedulingSpec.gpu to <= 8, or add a "
        "node with nvidia.com/gpu >= 16, cpu >= 8, memory >= 64Gi"
    ]
    assert check_capacity(docs, ["rollout", "critic"], nodes) == []
    assert preflight(docs, ["actor", "helper"], [gpu_node("g3", 16)]) == []
    # A pod-mode fork takes its target's cpu and memory (not its GPUs) and its node selection.
    [problem] = check_capacity(docs, ["helper"], [gpu_node("small", 16, cpu="4")])
    assert problem.role == "helper"
    assert problem.message.startswith(
        "role helper needs cpu: 8, memory: 64Gi per worker; no node offers more than 4 cpu"
    )


def rack_node(name: str, rack: str, gpus: int = 8) -> V1Node:
    node = gpu_node(name, gpus)
    node.metadata.labels = {"pool": "gpu", "example.com/rack": rack, "kubernetes.io/hostname": name}
    return node


def test_rendered_exclusive_and_kueue_topology_roles_need_one_domain_that_holds_them_all(render):
    docs = render(
        {
            "roles": {
                "actor": role(
                    3, resources={"gpu": 8, "cpu": 8, "memory": "64Gi"}, exclusiveTopology="example.com/rack"
                ),
                "rollout": role(
                    3,
                    resources={"gpu": 8, "cpu": 8, "memory": "64Gi"},
                    kueue={"queueName": "tas", "requiredTopology": "example.com/rack"},
                ),
            },
            "forks": {"ref": {"target": "actor", "mode": "pod"}},
        }
    )
    racks = [rack_node("a1", "a"), rack_node("a2", "a"), rack_node("b1", "b")]
    problems = {problem.role: problem.message for problem in check_capacity(docs, ["actor", "rollout", "ref"], racks)}
    assert problems["actor"].startswith(
        "role actor must run its 3 workers in one domain of node label example.com/rack (exclusiveTopology), but no "
        "domain could ever hold more than 2 (a: 2 on a1 (1), a2 (1); b: 1 on b1 (1))"
    )
    assert "(kueue.requiredTopology), but no domain could ever hold more than 2" in problems["rollout"]
    # The fork has no GPUs: 12 of its pods fit on each rack-a node (96 cpu / 8).
    assert "ref" not in problems
    assert check_capacity(docs, ["actor", "rollout"], [*racks, rack_node("a3", "a")]) == []
