"""Helpers for the integration tests (imported by name; conftest.py holds the fixtures)."""

from __future__ import annotations

import json
import subprocess
import urllib.request

from areal_workers import Job, SchedulingSpec, SchedulingStrategy
from localcluster import REPO_ROOT, service_account_kubeconfig

# Worker pods whose processes tools/podrunner.py runs and whose readiness it probes, as a kubelet would.
RUN_PODS = {"workerDefaults": {"podAnnotations": {"areal-workers.dev/readiness": "external"},
                               "terminationGracePeriodSeconds": 5}}
# KWOK and podrunner leave pods with this annotation alone: tests write their status (fault injection).
HOLD = {"areal-workers.dev/kwok-hold": "true"}


def spec(**overrides) -> SchedulingSpec:
    values = {"cpu": 1, "mem": 1, "gpu": 0, "port_count": 2, "cmd": "python -m areal.infra.rpc.rpc_server"}
    values.update(overrides)
    return SchedulingSpec(**values)


def job(role: str, replicas: int, tasks: list[SchedulingSpec] | None = None, **strategy) -> Job:
    return Job(role=role, replicas=replicas, tasks=tasks or [spec()],
               scheduling_strategy=SchedulingStrategy(**strategy) if strategy else SchedulingStrategy())


def guard_health(worker) -> dict:
    with urllib.request.urlopen(f"http://{worker.ip}:{worker.worker_ports[0]}/health", timeout=5) as response:
        return json.load(response)


def controller_kubeconfig(admin_kubeconfig, namespace: str, out) -> str:
    """Applies rbac/ in the namespace and returns a kubeconfig of its ServiceAccount's token."""
    subprocess.run([str(REPO_ROOT / ".tools" / "bin" / "kubectl"), "--kubeconfig", str(admin_kubeconfig), "apply",
                    "-n", namespace, "-f", str(REPO_ROOT / "rbac")], check=True, capture_output=True)
    return str(service_account_kubeconfig(admin_kubeconfig, namespace, "areal-controller", out))
