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
