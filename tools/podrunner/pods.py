"""How podrunner turns a pod into a local process: the command line, its environment, the readiness probe's URL.

The kubelet's `$(VAR)` expansion and downward API, the container's `python` swapped for a local interpreter and
the image's modules for local stand-ins (module maps, chosen by the worker server), and the kind of pod (a worker
run and restarted, or a `helm test` hook run once). ManagedPod is the runner's record of one such pod
(credentials.py adds its ServiceAccount's kubeconfig).
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from podrunner.forked import ForkedProcess
from podrunner.processes import StartFailure
from realnode.config import NODE_NAME as REAL_NODE_NAME
from repo_paths import AREAL_WORKER_PYTHON, LOCALWORKER_PATH, REPO

READINESS_ANNOTATION = "areal-workers.dev/readiness"
KWOK_READINESS = "kwok"  # KWOK reports the pod Ready and nothing runs it (benchmarks)
HOOK_ANNOTATION = "helm.sh/hook"
COMPONENT_LABEL = "app.kubernetes.io/component"
TRAINER_COMPONENT = "trainer"  # pods of `areal-workers submit` (adapter/areal_workers/trainer/job.py)
AREAL_SERVER_MODULE = "areal.infra.rpc.rpc_server"
DEFAULT_MODULE_MAP = {AREAL_SERVER_MODULE: "localworker.reference_guard"}
# Where the stand-ins of module maps live: the localworker package, not part of the installed areal_workers package.
STAND_IN_DIR = LOCALWORKER_PATH
# Where the engines of worker processes come from: the demo's (examples/bandit_demo/) and the local cluster's
# (localworker).
WORKER_PYTHONPATH = (str(REPO / "examples" / "bandit_demo"), str(LOCALWORKER_PATH))
# What a trainer's image holds beside AReaL: this checkout's package.
TRAINER_PYTHONPATH = (str(REPO / "adapter"),)


class UnsupportedPod(ValueError):
    """The pod asks for something podrunner does not emulate; reported like a kubelet's config error."""


def expand_references(text: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: known variables are replaced, `$$` escapes, unknown ones stay."""

    def substitute(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", substitute, text)


def _field_value(pod: client.V1Pod, path: str) -> str:
    if path == "status.podIP":
        return pod.status.pod_ip or ""
    if path == "metadata.name":
        return pod.metadata.name
    if path == "metadata.namespace":
        return pod.metadata.namespace
    if path == "metadata.uid":
        return pod.metadata.uid
    if path == "spec.nodeName":
        return pod.spec.node_name or ""
    if path == "status.hostIP":
        return pod.status.host_ip or ""
    label = re.fullmatch(r"metadata\.labels\['([^']+)'\]", path)
    if label:
        return (pod.metadata.labels or {}).get(label.group(1), "")
    annotation = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", path)
    if annotation:
        return (pod.metadata.annotations or {}).get(annotation.group(1), "")
    raise UnsupportedPod(f"downward API field {path!r} is not emulated by podrunner")


def container_environment(pod: client.V1Pod, container: client.V1Container) -> dict[str, str]:
    """The container's env list resolved in order (later entries may reference earlier ones)."""
    env: dict[str, str] = {}
    for item in container.env or []:
        if item.value_from is not None:
            if item.value_from.field_ref is None:
                raise UnsupportedPod(f"env {item.name}: only fieldRef is emulated by podrunner")
            env[item.name] = _field_value(pod, item.value_from.field_ref.field_path)
        else:
            env[item.name] = expand_references(item.value or "", env)
    return env


def local_argv(argv: list[str], module_map: dict[str, str], python: str) -> list[str]:
    """The container command as a local command: python interpreters become this one, mapped modules swap."""
    result = []
    for index, arg in enumerate(argv):
        if Path(arg).name in ("python", "python3") and (index == 0 or argv[index - 1] in ("--", "exec")):
            result.append(python)
        elif index > 0 and argv[index - 1] == "-m" and arg in module_map:
            result.append(module_map[arg])
        else:
            result.append(arg)
    return result


def pod_kind(pod: client.V1Pod) -> str | None:
    """ "hook" (a `helm test` pod, run once), "once" (restartPolicy Never, e.g. a Job's pod such as a trainer: run
    once, phase Succeeded or Failed from its exit code), "worker" (run and restarted), or None: without a `command` the
    container would run its image's entrypoint, which a machine without a container runtime does not have; a pod
    annotated areal-workers.dev/readiness=kwok is Ready by KWOK alone (localkube/kwok-stages.yaml) and runs nothing;
    a pod on the real node is its kubelet's (tools/realnode/)."""
    if pod.spec.node_name in (None, REAL_NODE_NAME):
        return None
    containers = pod.spec.containers or []
    if not containers or not containers[0].command:
        return None
    if (pod.metadata.annotations or {}).get(READINESS_ANNOTATION) == KWOK_READINESS:
        return None
    if (pod.metadata.annotations or {}).get(HOOK_ANNOTATION) == "test":
        return "hook"
    return "once" if pod.spec.restart_policy == "Never" else "worker"


def is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


@dataclass(frozen=True)
class WorkerServer:
    """What a worker pod's `python -m areal.infra.rpc.rpc_server` runs on this machine."""

    name: str
    python: str
    module_map: dict[str, str]


def worker_server(name: str) -> WorkerServer:
    """ "areal": AReaL's real rpc_server from `make areal-worker`; "reference": our stand-in, in this interpreter."""
    if name == "areal":
        if not AREAL_WORKER_PYTHON.exists():
            raise FileNotFoundError(
                f"{AREAL_WORKER_PYTHON} is missing: run `make areal-worker`, or use the reference worker server"
            )
        return WorkerServer("areal", str(AREAL_WORKER_PYTHON), {})
    if name == "reference":
        return WorkerServer("reference", sys.executable, dict(DEFAULT_MODULE_MAP))
    raise ValueError(f"unknown worker server {name!r}: expected areal or reference")


@dataclass
class ManagedPod:
    uid: str
    name: str  # namespace/name
    container: str
    ip: str
    kind: str  # "worker", "hook" or "once"
    argv: list[str]
    env: dict[str, str]
    probe_url: str | None
    probe_period: float
    grace: float
    log: Path
    # What the kubelet adds before the container's env (KUBECONFIG, KUBERNETES_SERVICE_*), and the directory of the
    # ServiceAccount kubeconfig it points at: credentials.py.
    kubelet_env: dict[str, str] = field(default_factory=dict)
    credentials: Path | None = None
    pythonpath: tuple[str, ...] = ()  # prepended to PYTHONPATH after the runner's own
    process: subprocess.Popen | ForkedProcess | StartFailure | None = None
    ready: bool = False
    restarts: int = 0
    restart_at: float = 0.0
    host_network: bool = False  # its IP is the node's, which many pods share
    address_wait_until: float = 0.0  # set while the first start waits for the pod's IP (supervisor.py)
    next_probe: float = 0.0
    deleted: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def namespace(self) -> str:
        return self.name.split("/", 1)[0]

    def describe(self) -> dict:
        process = self.process
        return {
            "pod": self.name,
            "uid": self.uid,
            "ip": self.ip,
            "kind": self.kind,
            "ready": self.ready,
            "restarts": self.restarts,
            "pid": None if process is None else process.pid,
            "log": str(self.log),
            "kubeconfig": self.kubelet_env.get("KUBECONFIG"),
        }


def managed_pod(pod: client.V1Pod, kind: str, module_map: dict[str, str], python: str, log_dir: Path) -> ManagedPod:
    """The record of a pod about to run: its first container's local command, environment and readiness probe."""
    container = pod.spec.containers[0]
    env = container_environment(pod, container)
    argv = [expand_references(arg, env) for arg in [*(container.command or []), *(container.args or [])]]
    probe_url, period = None, 10.0
    probe = container.readiness_probe
    if probe is not None and probe.http_get is not None:
        port = probe.http_get.port
        if isinstance(port, str) and not port.isdigit():
            port = next((p.container_port for p in container.ports or [] if p.name == port), None)
            if port is None:
                raise UnsupportedPod(f"readiness probe port {probe.http_get.port!r} is not a container port")
        probe_url = f"http://{pod.status.pod_ip}:{int(port)}{probe.http_get.path or '/'}"
        period = float(probe.period_seconds or 10)
    if (pod.metadata.labels or {}).get(COMPONENT_LABEL) == TRAINER_COMPONENT:
        # A trainer's image holds AReaL and areal-workers: its `python` is AReaL's environment (areal-workers from
        # WORKER_PYTHONPATH), or without one this checkout's virtualenv; no module swaps.
        python, module_map = str(AREAL_WORKER_PYTHON) if AREAL_WORKER_PYTHON.exists() else sys.executable, {}
        pythonpath = TRAINER_PYTHONPATH
    else:
        pythonpath = ()
    return ManagedPod(
        uid=pod.metadata.uid,
        name=f"{pod.metadata.namespace}/{pod.metadata.name}",
        container=container.name,
        ip=pod.status.pod_ip,
        host_network=bool(pod.spec.host_network),
        kind=kind,
        argv=local_argv(argv, module_map, python),
        env=env,
        probe_url=probe_url,
        pythonpath=pythonpath,
        probe_period=period,
        grace=float(pod.spec.termination_grace_period_seconds or 30),
        log=log_dir / f"{pod.metadata.namespace}_{pod.metadata.name}_{pod.metadata.uid[:8]}.log",
        ready=is_ready(pod),  # a runner started after its pods: a stale Ready is corrected by the probe
    )
