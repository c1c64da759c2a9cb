"""The process side of a kubelet for pods on KWOK nodes, so tests and the demo talk to real worker servers.

KWOK schedules pods onto fake nodes and gives them loopback IPs, but runs nothing. For pods annotated
`areal-workers.dev/readiness=external` (KWOK leaves them Running but not Ready), PodRunner:
- runs the pod's container command as a local process, expanding `$(VAR)` from the container's env and the
  downward API (status.podIP, metadata.name/namespace/labels) exactly as the kubelet does; the guard binds
  the pod's own 127.x IP. Its `python` becomes a local interpreter (`python`), and the image's Python modules
  are swapped for local stand-ins (`module_map`; by default AReaL's rpc_server becomes
  areal_workers.reference_guard, which has the same CLI and HTTP API; an empty map runs AReaL's real server
  from an interpreter that has it, with `pythonpath` prepended to PYTHONPATH for the engines it loads);
- probes the container's readinessProbe (httpGet) and writes Ready / ContainersReady into the pod status;
- when the process exits, records it as the kubelet would (lastState.terminated, restartCount, not Ready) and
  restarts it after a back-off;
- stops the process (SIGTERM, then SIGKILL after the grace period) when the pod is deleted.
Pods annotated `helm.sh/hook: test` are run to completion once and get phase Succeeded or Failed, so a real
`helm test` passes or fails on what the hook's command really did; cluster DNS names of StatefulSet pods
(`<hostname>.<subdomain>.<namespace>.svc.<domain>`) resolve to the pods' IPs inside that process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import IO

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

READINESS_ANNOTATION = "areal-workers.dev/readiness"
HOOK_ANNOTATION = "helm.sh/hook"
LOGS_GROUP, LOGS_VERSION = "kwok.x-k8s.io", "v1alpha1"
DEFAULT_MODULE_MAP = {"areal.infra.rpc.rpc_server": "areal_workers.reference_guard"}
RESOLVER_SHIM = Path(__file__).resolve().parent / "podrunner_dns"
RESTART_BACKOFF_BASE = 1.0
RESTART_BACKOFF_MAX = 20.0


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
    raise ValueError(f"downward API field {path!r} is not emulated by podrunner")


def container_environment(pod: client.V1Pod, container: client.V1Container) -> dict[str, str]:
    """The container's env list resolved in order (later entries may reference earlier ones)."""
    env: dict[str, str] = {}
    for item in container.env or []:
        if item.value_from is not None:
            if item.value_from.field_ref is None:
                raise ValueError(f"env {item.name}: only fieldRef is emulated by podrunner")
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


@dataclass
class ManagedPod:
    uid: str
    name: str
    container: str
    ip: str
    kind: str  # "worker" or "hook"
    argv: list[str]
    env: dict[str, str]
    probe_url: str | None
    probe_period: float
    grace: float
    log: Path
    process: subprocess.Popen | None = None
    ready: bool = False
    restarts: int = 0
    restart_at: float = 0.0
    next_probe: float = 0.0
    deleted: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class PodRunner:
    """Watches one namespace (or all, namespace=None) and runs the annotated pods; see the module docstring."""

    def __init__(self, kubeconfig: Path | str, namespace: str | None, log_dir: Path,
                 module_map: dict[str, str] | None = None, python: str = sys.executable,
                 cluster_domain: str = "cluster.local", pythonpath: tuple[str, ...] = ()) -> None:
        self.api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self.namespace = namespace
        self.log_dir = log_dir
        self.module_map = DEFAULT_MODULE_MAP if module_map is None else module_map
        self.python = python
        self.pythonpath = pythonpath
        self.cluster_domain = cluster_domain
        self.pods: dict[str, ManagedPod] = {}
        self.hosts: dict[str, str] = {}  # cluster DNS name -> pod IP
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> PodRunner:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for target in (self._watch_loop, self._probe_loop):
            thread = threading.Thread(target=target, daemon=True, name=f"podrunner-{target.__name__}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._stop.set()
        for pod in list(self.pods.values()):
            self._kill(pod)
        for thread in self._threads:
            thread.join(timeout=10)

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- watching ----------------------------------------------------------------------------------

    def _list(self, **kwargs):
        if self.namespace is None:
            return self.api.list_pod_for_all_namespaces(**kwargs)
        return self.api.list_namespaced_pod(self.namespace, **kwargs)

    def _watch_loop(self) -> None:
        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listing = self._list()
                    version = listing.metadata.resource_version
                    for pod in listing.items:
                        self._on_pod("ADDED", pod)
                function = self.api.list_pod_for_all_namespaces if self.namespace is None else self.api.list_namespaced_pod
                args = () if self.namespace is None else (self.namespace,)
                for event in watch.Watch().stream(function, *args, resource_version=version, timeout_seconds=5,
                                                  allow_watch_bookmarks=True):
                    if self._stop.is_set():
                        return
                    pod = event["object"]
                    if event["type"] == "ERROR":  # e.g. 410 Gone: the resource version expired; relist
                        version = None
                        break
                    if event["type"] == "BOOKMARK":  # the client leaves bookmarks as raw dicts
                        version = event["raw_object"]["metadata"]["resourceVersion"]
                        continue
                    version = pod.metadata.resource_version
                    self._on_pod(event["type"], pod)
            except ApiException as error:
                if error.status == 410:  # resource version too old: relist
                    version = None
                    continue
                self.errors.append(f"watch: {error.status} {error.reason}")
                time.sleep(0.5)
            except (urllib3.exceptions.HTTPError, OSError):  # apiserver restarting: reconnect, relist
                version = None
                time.sleep(0.5)

    def _on_pod(self, event: str, pod: client.V1Pod) -> None:
        annotations = pod.metadata.annotations or {}
        if pod.spec.hostname and pod.spec.subdomain and pod.status.pod_ip:
            name = f"{pod.spec.hostname}.{pod.spec.subdomain}.{pod.metadata.namespace}.svc.{self.cluster_domain}"
            self.hosts[name] = pod.status.pod_ip
        is_worker = annotations.get(READINESS_ANNOTATION) == "external"
        is_hook = annotations.get(HOOK_ANNOTATION) == "test"
        if not (is_worker or is_hook):
            return
        uid = pod.metadata.uid
        if event == "DELETED" or pod.metadata.deletion_timestamp is not None:
            managed = self.pods.pop(uid, None)
            if managed is not None:
                self._kill(managed)
            return
        if uid in self.pods or pod.status.phase != "Running" or not pod.status.pod_ip:
            return
        managed = self._manage(pod, "worker" if is_worker else "hook")
        self._publish_logs(managed)
        self._launch(managed)  # before the probe thread can see it, so it is never started twice
        self.pods[uid] = managed

    def _manage(self, pod: client.V1Pod, kind: str) -> ManagedPod:
        container = pod.spec.containers[0]
        env = container_environment(pod, container)
        argv = [expand_references(arg, env) for arg in [*(container.command or []), *(container.args or [])]]
        probe_url, period = None, 10.0
        probe = container.readiness_probe
        if probe is not None and probe.http_get is not None:
            port = probe.http_get.port
            if isinstance(port, str) and not port.isdigit():
                port = next(p.container_port for p in container.ports or [] if p.name == port)
            probe_url = f"http://{pod.status.pod_ip}:{int(port)}{probe.http_get.path or '/'}"
            period = float(probe.period_seconds or 10)
        return ManagedPod(
            uid=pod.metadata.uid, name=f"{pod.metadata.namespace}/{pod.metadata.name}", container=container.name,
            ip=pod.status.pod_ip,
            kind=kind, argv=local_argv(argv, self.module_map, self.python), env=env, probe_url=probe_url,
            probe_period=period, grace=float(pod.spec.termination_grace_period_seconds or 30),
            log=self.log_dir / f"{pod.metadata.namespace}_{pod.metadata.name}_{pod.metadata.uid[:8]}.log",
        )

    # --- processes ---------------------------------------------------------------------------------

    def _publish_logs(self, pod: ManagedPod) -> None:
        """A KWOK Logs object, so `kubectl logs` (the apiserver's pods/log) serves this pod's log files."""
        namespace, name = pod.name.split("/", 1)
        logs = {"apiVersion": f"{LOGS_GROUP}/{LOGS_VERSION}", "kind": "Logs",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"logs": [{"containers": [pod.container], "logsFile": str(pod.log.resolve()),
                                   "previousLogsFile": str(previous_log(pod.log).resolve()), "follow": False}]}}
        objects = client.CustomObjectsApi(self.api.api_client)
        try:
            objects.create_namespaced_custom_object(LOGS_GROUP, LOGS_VERSION, namespace, "logs", logs)
        except ApiException as error:
            if error.status != 409:  # 409: a pod of the same name ran before; point at this one's files
                raise
            objects.patch_namespaced_custom_object(LOGS_GROUP, LOGS_VERSION, namespace, "logs", name,
                                                   {"spec": logs["spec"]})

    def _launch(self, pod: ManagedPod) -> None:
        environment = {**os.environ, **pod.env}
        prepend = [str(RESOLVER_SHIM)] if pod.kind == "hook" else list(self.pythonpath)
        if prepend:
            environment["PYTHONPATH"] = os.pathsep.join(filter(None, [*prepend, environment.get("PYTHONPATH")]))
        if pod.kind == "hook":
            environment["PODRUNNER_HOSTS"] = json.dumps(self.hosts)
        with pod.lock:
            if self._stop.is_set() or pod.deleted or (pod.process is not None and pod.process.poll() is None):
                return
            if pod.restarts and pod.log.exists():  # `kubectl logs --previous` reads the last run
                os.replace(pod.log, previous_log(pod.log))
            pod.process = subprocess.Popen(pod.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           stdin=subprocess.DEVNULL, env=environment, start_new_session=True)
            threading.Thread(target=write_cri_log, args=(pod.process.stdout, pod.log), daemon=True).start()
        if pod.kind == "hook":
            threading.Thread(target=self._finish_hook, args=(pod,), daemon=True).start()

    def _finish_hook(self, pod: ManagedPod) -> None:
        code = pod.process.wait()
        namespace, name = pod.name.split("/", 1)
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                      "startedAt": _now(), "finishedAt": _now()}
        self._patch_status(namespace, name, {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": _now()}],
            "containerStatuses": [{"name": pod.container, "ready": False, "restartCount": 0,
                                   "state": {"terminated": terminated}}],
        })

    def _kill(self, pod: ManagedPod) -> None:
        with pod.lock:
            pod.deleted = True  # no restart after this
            process = pod.process
            if process is None or process.poll() is not None:
                return
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=min(pod.grace, 10.0))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    # --- probing -----------------------------------------------------------------------------------

    def _probe_loop(self) -> None:
        while not self._stop.wait(0.2):
            for pod in list(self.pods.values()):
                if pod.kind == "worker":
                    self._tend_worker(pod)

    def _tend_worker(self, pod: ManagedPod) -> None:
        now = time.monotonic()
        namespace, name = pod.name.split("/", 1)
        process = pod.process
        if process is not None and process.poll() is not None:
            pod.process = None
            pod.restarts += 1
            pod.ready = False
            pod.restart_at = now + min(RESTART_BACKOFF_BASE * 2 ** (pod.restarts - 1), RESTART_BACKOFF_MAX)
            code = process.returncode
            reason = "Completed" if code == 0 else "Error"
            exit_code = 128 - code if code < 0 else code
            self._write_container_state(namespace, name, pod, ready=False, last_terminated={
                "exitCode": exit_code, "reason": reason, "startedAt": _now(), "finishedAt": _now()})
            return
        if process is None:
            if now >= pod.restart_at:
                self._launch(pod)
            return
        if now < pod.next_probe:
            return
        # Without a readiness probe a kubelet reports a running container as ready.
        healthy = pod.probe_url is None or _probe(pod.probe_url)
        # Until first Ready, probe fast so tests do not wait a whole period; afterwards at the pod's period.
        pod.next_probe = now + (pod.probe_period if healthy else 0.2)
        if healthy != pod.ready and self._write_container_state(namespace, name, pod, ready=healthy):
            pod.ready = healthy

    def _write_container_state(self, namespace: str, name: str, pod: ManagedPod, ready: bool,
                               last_terminated: dict | None = None) -> bool:
        status = "True" if ready else "False"
        container_status: dict = {"name": pod.container, "ready": ready,
                                  "restartCount": pod.restarts, "started": pod.process is not None,
                                  "state": {"running": {"startedAt": _now()}}}
        if last_terminated is not None:
            container_status["lastState"] = {"terminated": last_terminated}
            container_status["state"] = {"waiting": {"reason": "CrashLoopBackOff" if pod.restarts > 1 else "Error",
                                                     "message": "back-off restarting failed container"}}
        conditions = [{"type": kind, "status": status, "lastTransitionTime": _now(),
                       **({} if ready else {"reason": "ContainersNotReady"})} for kind in ("ContainersReady", "Ready")]
        return self._patch_status(namespace, name, {"conditions": conditions, "containerStatuses": [container_status]})

    def _patch_status(self, namespace: str, name: str, status: dict) -> bool:
        """Writes pod status; False when it could not (the caller tries again on its next probe)."""
        try:
            self.api.patch_namespaced_pod_status(name, namespace, {"status": status})
        except ApiException as error:
            if error.status != 404:  # the pod is gone: nothing to report
                self.errors.append(f"status of {namespace}/{name}: {error.status} {error.reason}")
            return False
        except (urllib3.exceptions.HTTPError, OSError):  # apiserver restarting
            return False
        return True


def previous_log(log: Path) -> Path:
    return log.with_name(log.stem + ".previous.log")


def write_cri_log(stream: IO[bytes], path: Path) -> None:
    """Copies a process's output into `path` in the CRI log format the kubelet (and KWOK) serve logs from."""
    with stream, open(path, "ab", buffering=0) as log:
        for line in stream:
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()
            log.write(stamp + b" stdout F " + line.rstrip(b"\n") + b"\n")


def _probe(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return 200 <= response.status < 400
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False
