"""The process side of a kubelet for pods on KWOK nodes, so tests and the demo talk to real worker servers.

KWOK schedules pods onto fake nodes and gives them loopback IPs, but runs nothing. For every Running pod whose
first container has a `command` (KWOK starts such pods Running but not Ready, see tools/kwok/stages.yaml),
PodRunner:
- runs the container command as a local process, expanding `$(VAR)` from the container's env and the
  downward API (status.podIP, metadata.name/namespace/labels) exactly as the kubelet does; the worker binds
  the pod's own 127.x IP. Its `python` becomes a local interpreter (`python`), and the image's Python modules
  are swapped for local stand-ins (`module_map`; by default AReaL's rpc_server becomes
  areal_workers_testing.reference_guard from tests/support, which has the same CLI and HTTP API; an empty map
  runs AReaL's real server from an interpreter that has it), with `pythonpath` prepended to PYTHONPATH for the
  engines it loads (and, when modules are swapped, tests/support for the stand-ins);
- probes the container's readinessProbe (httpGet) and writes Ready / ContainersReady into the pod status;
- when the process exits, records it as the kubelet would (lastState.terminated, restartCount, not Ready) and
  restarts it after a back-off;
- stops the process (SIGTERM, then SIGKILL of it and its descendants after the grace period) when the pod is
  deleted, and, after every listing (start-up, a dropped watch, an expired resource version), stops the
  processes of pods that are no longer listed: a pod deleted while the watch was down leaves nothing behind.
Pods annotated `helm.sh/hook: test` are run to completion once and get phase Succeeded or Failed, so a real
`helm test` passes or fails on what the hook's command really did; cluster DNS names of StatefulSet pods
(`<hostname>.<subdomain>.<namespace>.svc.<domain>`) resolve to the pods' IPs inside that process.

Two ways to run it:
- a component of the local cluster (tools/localcluster.py starts `python tools/podrunner.py ...`): one process
  for all namespaces except those labelled `areal-workers.dev/podrunner=private`, with a health endpoint and a
  ledger of the processes it started, so that `localcluster.py down` stops whatever it left;
- in a test (`PodRunner(kubeconfig, namespace, ...)`, the `pod_runner` fixture): threads of the test process
  for one private namespace, with the test's own interpreter and module map.
"""

from __future__ import annotations

import argparse
import json
import logging
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
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO

import urllib3
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

READINESS_ANNOTATION = "areal-workers.dev/readiness"
HOOK_ANNOTATION = "helm.sh/hook"
# Namespaces with this label are run by a runner of their own (a test's): the cluster's runner skips them.
PRIVATE_LABEL, PRIVATE_VALUE = "areal-workers.dev/podrunner", "private"
LOGS_GROUP, LOGS_VERSION = "kwok.x-k8s.io", "v1alpha1"
DEFAULT_MODULE_MAP = {"areal.infra.rpc.rpc_server": "areal_workers_testing.reference_guard"}
REPO_ROOT = Path(__file__).resolve().parent.parent
# Where the stand-ins of module maps live: test infrastructure, not part of the installed areal_workers package.
STAND_IN_DIR = REPO_ROOT / "tests" / "support"
RESOLVER_SHIM = Path(__file__).resolve().parent / "podrunner_dns"
AREAL_WORKER_PYTHON = REPO_ROOT / ".tools" / "areal-worker" / "bin" / "python"
# Where the engines of worker processes come from: the demo's (examples/) and the tests' (tests/support).
WORKER_PYTHONPATH = (str(REPO_ROOT / "examples"), str(REPO_ROOT / "tests" / "support"))
RESTART_BACKOFF_BASE = 1.0
RESTART_BACKOFF_MAX = 20.0
STOP_GRACE_MAX = 10.0
PRIVATE_CACHE_SECONDS = 30.0

log = logging.getLogger("podrunner")


class UnsupportedPod(ValueError):
    """The pod asks for something podrunner does not emulate; reported like a kubelet's config error."""


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
    """"hook" (a `helm test` pod, run once), "worker" (run and restarted), or None: without a `command` the
    container would run its image's entrypoint, which a machine without a container runtime does not have."""
    containers = pod.spec.containers or []
    if not containers or not containers[0].command:
        return None
    return "hook" if (pod.metadata.annotations or {}).get(HOOK_ANNOTATION) == "test" else "worker"


@dataclass(frozen=True)
class WorkerServer:
    """What a worker pod's `python -m areal.infra.rpc.rpc_server` runs on this machine."""

    name: str
    python: str
    module_map: dict[str, str]


def worker_server(name: str) -> WorkerServer:
    """"areal": AReaL's real rpc_server from `make areal-worker`; "reference": our stand-in, in this interpreter."""
    if name == "areal":
        if not AREAL_WORKER_PYTHON.exists():
            raise FileNotFoundError(f"{AREAL_WORKER_PYTHON} is missing: run `make areal-worker`, or use the "
                                    f"reference worker server")
        return WorkerServer("areal", str(AREAL_WORKER_PYTHON), {})
    if name == "reference":
        return WorkerServer("reference", sys.executable, dict(DEFAULT_MODULE_MAP))
    raise ValueError(f"unknown worker server {name!r}: expected areal or reference")


# --- processes and their ledger --------------------------------------------------------------------------


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat after the command name (state, ppid, pgrp, ...), None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot: with the pid, it names one process for good."""
    fields = _proc_stat(pid)
    return fields[19] if fields else None


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid`, also those in sessions of their own (forked workers)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _proc_stat(int(stat.parent.name))
        if fields:
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, pending = [], [pid]
    while pending:
        kids = children.get(pending.pop(), [])
        found.extend(kids)
        pending.extend(kids)
    return found


def _signal(pid: int, signum: signal.Signals, group: bool = True) -> None:
    try:
        (os.killpg if group else os.kill)(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(pid: int) -> None:
    """SIGKILL to a process, its process group and every descendant with theirs."""
    for member in [pid, *descendants(pid)]:
        _signal(member, signal.SIGKILL)
        _signal(member, signal.SIGKILL, group=False)


class ProcessLedger:
    """The processes a runner started, on disk: one file per process, named by its pid and holding its start time,
    so that whoever stops the runner (or a runner started after a crash) can stop what it left behind."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def record(self, pid: int) -> None:
        (self.directory / str(pid)).write_text(start_time(pid) or "")

    def forget(self, pid: int) -> None:
        (self.directory / str(pid)).unlink(missing_ok=True)

    def kill_leftovers(self, timeout: float = 10.0) -> list[int]:
        """SIGKILLs every recorded process still alive (and its descendants); returns their pids."""
        killed = []
        for entry in sorted(self.directory.iterdir()):
            pid = int(entry.name)
            if entry.read_text() and start_time(pid) == entry.read_text():  # not a reused pid
                kill_tree(pid)
                killed.append(pid)
            entry.unlink(missing_ok=True)
        deadline = time.monotonic() + timeout
        while any(start_time(pid) for pid in killed) and time.monotonic() < deadline:
            time.sleep(0.05)
        return killed


class StartFailure:
    """Stands in for a process whose command could not be started (the kubelet's StartError)."""

    pid = None
    returncode = 128
    stdout = None
    reason = "StartError"

    def __init__(self, message: str) -> None:
        self.message = message

    def poll(self) -> int:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        return self.returncode


@dataclass
class ManagedPod:
    uid: str
    name: str  # namespace/name
    container: str
    ip: str
    kind: str  # "worker" or "hook"
    argv: list[str]
    env: dict[str, str]
    probe_url: str | None
    probe_period: float
    grace: float
    log: Path
    process: subprocess.Popen | StartFailure | None = None
    ready: bool = False
    restarts: int = 0
    restart_at: float = 0.0
    next_probe: float = 0.0
    deleted: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def namespace(self) -> str:
        return self.name.split("/", 1)[0]

    def describe(self) -> dict:
        process = self.process
        return {"pod": self.name, "uid": self.uid, "ip": self.ip, "kind": self.kind, "ready": self.ready,
                "restarts": self.restarts, "pid": None if process is None else process.pid, "log": str(self.log)}


def _is_ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


class PodRunner:
    """Watches one namespace (or all, namespace=None) and runs the pods with a command; see the module docstring.

    skip_private: leave namespaces labelled areal-workers.dev/podrunner=private to their own runner (the
    cluster's runner does; a test's runner for its own namespace does not)."""

    def __init__(self, kubeconfig: Path | str, namespace: str | None, log_dir: Path,
                 module_map: dict[str, str] | None = None, python: str = sys.executable,
                 cluster_domain: str = "cluster.local", pythonpath: tuple[str, ...] = (),
                 skip_private: bool = False, ledger: ProcessLedger | None = None) -> None:
        self.api = client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig)))
        self.namespace = namespace
        self.log_dir = log_dir
        self.module_map = DEFAULT_MODULE_MAP if module_map is None else module_map
        self.python = python
        self.pythonpath = tuple(dict.fromkeys([str(STAND_IN_DIR), *pythonpath])) if self.module_map else pythonpath
        self.cluster_domain = cluster_domain
        self.skip_private = skip_private
        self.ledger = ledger
        self.pods: dict[str, ManagedPod] = {}
        self.refused: set[str] = set()  # uids of pods reported as unsupported
        self.hosts: dict[str, str] = {}  # cluster DNS name -> pod IP
        self.errors: list[str] = []
        self.synced = threading.Event()  # the first listing is reconciled
        self.disconnected = threading.Event()  # the watch is down on purpose (disconnect())
        self._connected = threading.Event()
        self._connected.set()
        self._private_until: dict[str, float] = {}  # namespace -> time until which it is known private
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._stoppers: list[threading.Thread] = []
        self._stoppers_lock = threading.Lock()

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> PodRunner:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for target in (self._watch_loop, self._probe_loop):
            thread = threading.Thread(target=target, daemon=True, name=f"podrunner-{target.__name__}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stops every process (all at once, each within its grace period) and waits for them. Nothing starts
        after this: a pod the watch is adding now is in `pods` before its process starts, and _launch checks."""
        self._stop.set()
        self._connected.set()
        for uid in list(self.pods):
            self._forget(uid, "runner stopping")
        with self._stoppers_lock:
            stoppers = list(self._stoppers)
        for thread in stoppers:
            thread.join()
        for thread in self._threads:  # the watch ends with its stream (at most 5 s); it starts nothing now
            thread.join(timeout=1.0)

    def healthy(self) -> bool:
        return self.synced.is_set() and all(thread.is_alive() for thread in self._threads)

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- fault injection ---------------------------------------------------------------------------

    def disconnect(self) -> None:
        """Drops the watch as a lost connection would; no event is seen until reconnect(), which relists.
        `disconnected` is set once the watch is down."""
        self._connected.clear()

    def reconnect(self) -> None:
        self._connected.set()

    # --- watching ----------------------------------------------------------------------------------

    def _list_call(self) -> tuple:
        if self.namespace is None:
            return self.api.list_pod_for_all_namespaces, ()
        return self.api.list_namespaced_pod, (self.namespace,)

    def _watch_loop(self) -> None:
        version = None
        while not self._stop.is_set():
            if not self._connected.is_set():
                version = None
                self.disconnected.set()
                self._connected.wait(0.5)
                continue
            self.disconnected.clear()
            try:
                version = self._relist() if version is None else self._follow(version)
            except ApiException as error:
                if error.status == 410:  # resource version too old: relist
                    version = None
                    continue
                self._error(f"watch: {error.status} {error.reason}")
                time.sleep(0.5)
            except (urllib3.exceptions.HTTPError, OSError):  # apiserver restarting: reconnect, relist
                version = None
                time.sleep(0.5)
            except Exception as error:  # noqa: BLE001 - a bug must not stop the watch; it fails the tests
                self._error(f"watch: {error!r}")
                version = None
                time.sleep(1.0)

    def _relist(self) -> str:
        """Lists every pod and reconciles: processes of pods gone meanwhile (or now in a private namespace)
        stop, pods not run yet start. Returns the listing's resource version to watch from."""
        function, args = self._list_call()
        listing = function(*args)
        private = self._private_namespaces() if self.skip_private else set()
        present = {pod.metadata.uid for pod in listing.items}
        for uid, managed in list(self.pods.items()):
            if uid not in present:
                self._forget(uid, "no longer listed", gone=True)
            elif managed.namespace in private:
                self._forget(uid, "its namespace is private")
        self.refused &= present
        self.hosts.clear()
        for pod in listing.items:
            self._on_pod("ADDED", pod)
        if not self.synced.is_set():
            log.info("listed %d pod(s), running %d", len(listing.items), len(self.pods))
        self.synced.set()
        return listing.metadata.resource_version

    def _follow(self, version: str) -> str | None:
        """Watches from `version` until the stream ends; returns the version to go on from (None: relist)."""
        function, args = self._list_call()
        for event in watch.Watch().stream(function, *args, resource_version=version, timeout_seconds=5,
                                          allow_watch_bookmarks=True):
            if self._stop.is_set():
                return version
            if not self._connected.is_set():  # fault injection: the connection drops here
                return None
            if event["type"] == "ERROR":  # e.g. 410 Gone: the resource version expired; relist
                return None
            if event["type"] == "BOOKMARK":  # the client leaves bookmarks as raw dicts
                version = event["raw_object"]["metadata"]["resourceVersion"]
                continue
            pod = event["object"]
            version = pod.metadata.resource_version
            self._on_pod(event["type"], pod)
        return version

    def _on_pod(self, event: str, pod: client.V1Pod) -> None:
        uid = pod.metadata.uid
        if event == "DELETED" or pod.metadata.deletion_timestamp is not None:
            self._drop_host(pod)
            self._forget(uid, "pod deleted", gone=True)
            return
        self._note_host(pod)
        if uid in self.pods or uid in self.refused or pod.status.phase != "Running" or not pod.status.pod_ip:
            return
        kind = pod_kind(pod)
        if kind is None or (self.skip_private and self._is_private(pod.metadata.namespace)):
            return
        try:
            managed = self._manage(pod, kind)
        except UnsupportedPod as error:
            self._refuse(pod, error)
            return
        if not self._publish_logs(managed):
            return
        # Listed before it starts, so that stop() sees it; _launch under the pod's lock starts it once, whether
        # the probe thread or this one gets there first.
        self.pods[uid] = managed
        self._launch(managed)

    def _forget(self, uid: str, why: str, gone: bool = False) -> None:
        """Stops the pod's process; `gone`: the pod itself is deleted, so its Logs object goes too."""
        self.refused.discard(uid)
        managed = self.pods.pop(uid, None)
        if managed is not None:
            log.info("%s: stopping (%s)", managed.name, why)
            self._stop_pod(managed)
            if gone:
                self._withdraw_logs(managed)

    def _cluster_name(self, pod: client.V1Pod) -> str | None:
        if pod.spec.hostname and pod.spec.subdomain:
            return f"{pod.spec.hostname}.{pod.spec.subdomain}.{pod.metadata.namespace}.svc.{self.cluster_domain}"
        return None

    def _note_host(self, pod: client.V1Pod) -> None:
        name = self._cluster_name(pod)
        if name and pod.status.pod_ip:
            self.hosts[name] = pod.status.pod_ip

    def _drop_host(self, pod: client.V1Pod) -> None:
        name = self._cluster_name(pod)
        if name and pod.status.pod_ip and self.hosts.get(name) == pod.status.pod_ip:
            self.hosts.pop(name, None)

    # --- private namespaces ------------------------------------------------------------------------

    def _private_namespaces(self) -> set[str]:
        selector = f"{PRIVATE_LABEL}={PRIVATE_VALUE}"
        names = {ns.metadata.name for ns in self.api.list_namespace(label_selector=selector).items}
        until = time.monotonic() + PRIVATE_CACHE_SECONDS
        self._private_until = {name: until for name in names}
        return names

    def _is_private(self, namespace: str) -> bool:
        """Read fresh before a pod starts (a private answer is remembered for a while: its pods change often)."""
        if self._private_until.get(namespace, 0.0) > time.monotonic():
            return True
        try:
            labels = self.api.read_namespace(namespace).metadata.labels or {}
        except ApiException as error:
            if error.status == 404:  # the namespace is gone, and its pods with it
                return True
            raise
        private = labels.get(PRIVATE_LABEL) == PRIVATE_VALUE
        if private:
            self._private_until[namespace] = time.monotonic() + PRIVATE_CACHE_SECONDS
        return private

    # --- pods --------------------------------------------------------------------------------------

    def _manage(self, pod: client.V1Pod, kind: str) -> ManagedPod:
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
        return ManagedPod(
            uid=pod.metadata.uid, name=f"{pod.metadata.namespace}/{pod.metadata.name}", container=container.name,
            ip=pod.status.pod_ip,
            kind=kind, argv=local_argv(argv, self.module_map, self.python), env=env, probe_url=probe_url,
            probe_period=period, grace=float(pod.spec.termination_grace_period_seconds or 30),
            log=self.log_dir / f"{pod.metadata.namespace}_{pod.metadata.name}_{pod.metadata.uid[:8]}.log",
            ready=_is_ready(pod),  # a runner started after its pods: a stale Ready is corrected by the probe
        )

    def _refuse(self, pod: client.V1Pod, error: UnsupportedPod) -> None:
        """A pod podrunner cannot emulate gets the kubelet's CreateContainerConfigError, once."""
        self.refused.add(pod.metadata.uid)
        name = f"{pod.metadata.namespace}/{pod.metadata.name}"
        log.warning("%s: not run: %s", name, error)
        container = pod.spec.containers[0].name
        self._patch_status(pod.metadata.namespace, pod.metadata.name, {"containerStatuses": [{
            "name": container, "ready": False, "restartCount": 0, "image": pod.spec.containers[0].image,
            "imageID": "", "state": {"waiting": {"reason": "CreateContainerConfigError", "message": str(error)}}}]})

    # --- processes ---------------------------------------------------------------------------------

    def _publish_logs(self, pod: ManagedPod) -> bool:
        """A KWOK Logs object, so `kubectl logs` (the apiserver's pods/log) serves this pod's log files. False when
        the namespace is terminating or gone (403/404): its pods are about to go, there is nothing to run."""
        namespace, name = pod.name.split("/", 1)
        logs = {"apiVersion": f"{LOGS_GROUP}/{LOGS_VERSION}", "kind": "Logs",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {"logs": [{"containers": [pod.container], "logsFile": str(pod.log.resolve()),
                                   "previousLogsFile": str(previous_log(pod.log).resolve()), "follow": False}]}}
        objects = client.CustomObjectsApi(self.api.api_client)
        try:
            objects.create_namespaced_custom_object(LOGS_GROUP, LOGS_VERSION, namespace, "logs", logs)
        except ApiException as error:
            if error.status in (403, 404):
                log.info("%s: not run: its namespace is terminating or gone (%s)", pod.name, error.reason)
                return False
            if error.status != 409:  # 409: a pod of the same name ran before; point at this one's files
                raise
            objects.patch_namespaced_custom_object(LOGS_GROUP, LOGS_VERSION, namespace, "logs", name,
                                                   {"spec": logs["spec"]})
        return True

    def _withdraw_logs(self, pod: ManagedPod) -> None:
        """Deletes the pod's Logs object while it still points at this pod's files: a successor of the same name
        that never starts (its image never pulls) must not show its predecessor's log as its own. The delete is
        conditional on the object's resourceVersion, so a successor that published its own files keeps them."""
        namespace, name = pod.name.split("/", 1)
        objects = client.CustomObjectsApi(self.api.api_client)
        try:
            current = objects.get_namespaced_custom_object(LOGS_GROUP, LOGS_VERSION, namespace, "logs", name)
            files = [entry.get("logsFile") for entry in current.get("spec", {}).get("logs", [])]
            if files != [str(pod.log.resolve())]:
                return
            objects.delete_namespaced_custom_object(
                LOGS_GROUP, LOGS_VERSION, namespace, "logs", name,
                body=client.V1DeleteOptions(preconditions=client.V1Preconditions(
                    resource_version=current["metadata"]["resourceVersion"])))
        except ApiException as error:
            if error.status not in (403, 404, 409):  # gone with its namespace, or taken over by a successor
                raise

    def _environment(self, pod: ManagedPod) -> dict[str, str]:
        environment = {**os.environ, **pod.env}
        prepend = [str(RESOLVER_SHIM)] if pod.kind == "hook" else list(self.pythonpath)
        if prepend:
            environment["PYTHONPATH"] = os.pathsep.join(filter(None, [*prepend, environment.get("PYTHONPATH")]))
        if pod.kind == "hook":
            environment["PODRUNNER_HOSTS"] = json.dumps(self.hosts)
        return environment

    def _launch(self, pod: ManagedPod) -> None:
        environment = self._environment(pod)
        with pod.lock:
            if self._stop.is_set() or pod.deleted or pod.process is not None:  # an exited one is cleared first
                return
            if pod.restarts and pod.log.exists():  # `kubectl logs --previous` reads the last run
                os.replace(pod.log, previous_log(pod.log))
            pod.process = self._spawn(pod, environment)
        if pod.kind == "hook":
            threading.Thread(target=self._finish_hook, args=(pod,), daemon=True).start()

    def _spawn(self, pod: ManagedPod, environment: dict[str, str]) -> subprocess.Popen | StartFailure:
        try:
            process = subprocess.Popen(pod.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, env=environment, start_new_session=True)
        except OSError as error:
            message = f"failed to start {pod.argv[0]!r}: {error}"
            log.warning("%s: %s", pod.name, message)
            append_cri_line(pod.log, message.encode())
            return StartFailure(message)
        if self.ledger is not None:
            self.ledger.record(process.pid)
        log.info("%s: started pid %d: %s", pod.name, process.pid, " ".join(pod.argv)[:300])
        threading.Thread(target=write_cri_log, args=(process.stdout, pod.log), daemon=True).start()
        threading.Thread(target=self._reap, args=(process,), daemon=True).start()
        return process

    def _reap(self, process: subprocess.Popen) -> None:
        process.wait()
        if self.ledger is not None:
            self.ledger.forget(process.pid)

    def _finish_hook(self, pod: ManagedPod) -> None:
        code = pod.process.wait()
        namespace, name = pod.name.split("/", 1)
        log.info("%s: test hook exited with %d", pod.name, code)
        terminated = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                      "startedAt": _now(), "finishedAt": _now()}
        self._patch_status(namespace, name, {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": _now()}],
            "containerStatuses": [{"name": pod.container, "ready": False, "restartCount": 0,
                                   "state": {"terminated": terminated}}],
        })

    def _stop_pod(self, pod: ManagedPod) -> None:
        """SIGTERM now (the address is freed as soon as the process exits); the wait for the grace period and the
        SIGKILL after it run in the background: the watch must not wait for grace periods."""
        with pod.lock:
            pod.deleted = True  # no restart after this
            process = pod.process
            if process is None or process.poll() is not None:
                return
            _signal(process.pid, signal.SIGTERM)
        thread = threading.Thread(target=self._finish_stop, args=(pod, process), daemon=True, name=f"stop-{pod.name}")
        with self._stoppers_lock:
            self._stoppers = [t for t in self._stoppers if t.is_alive()]
            self._stoppers.append(thread)
        thread.start()

    def _finish_stop(self, pod: ManagedPod, process: subprocess.Popen) -> None:
        """After the grace period (at most 10 s), SIGKILL to the process group and every descendant."""
        try:
            process.wait(timeout=min(pod.grace, STOP_GRACE_MAX))
        except subprocess.TimeoutExpired:
            log.warning("%s: pid %d outlived its grace period: SIGKILL", pod.name, process.pid)
            kill_tree(process.pid)
            process.wait()

    def _kill(self, pod: ManagedPod) -> None:
        """Stops the pod's process and waits until it is gone (fault injection in tests: a worker dies)."""
        self._stop_pod(pod)
        process = pod.process
        if process is not None:
            process.wait()

    # --- probing -----------------------------------------------------------------------------------

    def _probe_loop(self) -> None:
        while not self._stop.wait(0.2):
            for pod in list(self.pods.values()):
                if pod.kind == "worker":
                    try:
                        self._tend_worker(pod)
                    except Exception as error:  # noqa: BLE001 - one pod must not stop the others' probes
                        self._error(f"{pod.name}: {error!r}")

    def _tend_worker(self, pod: ManagedPod) -> None:
        now = time.monotonic()
        namespace, name = pod.name.split("/", 1)
        process = pod.process
        if process is not None and process.poll() is not None:
            if pod.deleted:
                return
            self._record_exit(pod, process, now)
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

    def _record_exit(self, pod: ManagedPod, process: subprocess.Popen | StartFailure, now: float) -> None:
        namespace, name = pod.name.split("/", 1)
        pod.process = None
        pod.restarts += 1
        pod.ready = False
        pod.restart_at = now + min(RESTART_BACKOFF_BASE * 2 ** (pod.restarts - 1), RESTART_BACKOFF_MAX)
        code = process.returncode
        exit_code = 128 - code if code < 0 else code
        terminated = {"exitCode": exit_code, "reason": "Completed" if code == 0 else "Error",
                      "startedAt": _now(), "finishedAt": _now()}
        if isinstance(process, StartFailure):
            terminated.update(reason=process.reason, message=process.message)
        log.info("%s: exited with %d, restart %d in %.0f s", pod.name, exit_code, pod.restarts, pod.restart_at - now)
        self._write_container_state(namespace, name, pod, ready=False, last_terminated=terminated)

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
                self._error(f"status of {namespace}/{name}: {error.status} {error.reason}")
            return False
        except (urllib3.exceptions.HTTPError, OSError):  # apiserver restarting
            return False
        return True

    def _error(self, message: str) -> None:
        log.error("%s", message)
        self.errors.append(message)

    def snapshot(self) -> list[dict]:
        return [pod.describe() for pod in list(self.pods.values())]


def previous_log(log_path: Path) -> Path:
    return log_path.with_name(log_path.stem + ".previous.log")


def _cri_line(line: bytes) -> bytes:
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ").encode()
    return stamp + b" stdout F " + line.rstrip(b"\n") + b"\n"


def append_cri_line(path: Path, line: bytes) -> None:
    with open(path, "ab") as log_file:
        log_file.write(_cri_line(line))


def write_cri_log(stream: IO[bytes], path: Path) -> None:
    """Copies a process's output into `path` in the CRI log format the kubelet (and KWOK) serve logs from."""
    with stream, open(path, "ab", buffering=0) as log_file:
        for line in stream:
            log_file.write(_cri_line(line))


def _probe(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return 200 <= response.status < 400
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


# --- the local cluster's component -------------------------------------------------------------------------


def serve_health(runner: PodRunner, host: str, port: int) -> ThreadingHTTPServer:
    """GET /healthz: 200 once the first listing is reconciled and the watch runs; GET /pods: what runs, as JSON."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if self.path == "/healthz":
                healthy = runner.healthy()
                self._answer(200 if healthy else 503, b"ok\n" if healthy else b"not synced\n", "text/plain")
            elif self.path == "/pods":
                self._answer(200, json.dumps(runner.snapshot()).encode(), "application/json")
            else:
                self._answer(404, b"not found\n", "text/plain")

        def _answer(self, code: int, body: bytes, content_type: str) -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="podrunner-health").start()
    return server


def _host_port(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host.startswith("127."):
        raise argparse.ArgumentTypeError(f"{text}: the health endpoint binds a loopback address only")
    return host, int(port)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Run the pods of the local cluster as local processes "
                                                 "(a component of tools/localcluster.py).")
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--log-dir", required=True, type=Path, help="one log file per pod container run")
    parser.add_argument("--workers", choices=("areal", "reference"), default="reference",
                        help="the server a worker pod's `python -m areal.infra.rpc.rpc_server` runs")
    parser.add_argument("--namespace", help="only this namespace (default: all but the private ones)")
    parser.add_argument("--pythonpath", action="append", default=None,
                        help=f"prepended to the workers' PYTHONPATH (default: {', '.join(WORKER_PYTHONPATH)})")
    parser.add_argument("--health", type=_host_port, help="127.x.y.z:PORT for /healthz and /pods")
    parser.add_argument("--ledger", type=Path, help="directory recording the processes started")
    parser.add_argument("--cluster-domain", default="cluster.local")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server = worker_server(args.workers)
    ledger = ProcessLedger(args.ledger) if args.ledger else None
    if ledger is not None and (left := ledger.kill_leftovers()):
        log.warning("killed %d process(es) left by an earlier run: %s", len(left), left)
    pythonpath = tuple(args.pythonpath) if args.pythonpath is not None else WORKER_PYTHONPATH
    runner = PodRunner(args.kubeconfig, args.namespace, args.log_dir, module_map=server.module_map,
                       python=server.python, cluster_domain=args.cluster_domain, pythonpath=pythonpath,
                       skip_private=args.namespace is None, ledger=ledger)
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info("worker server: %s (%s, module map %s); pythonpath %s", server.name, server.python,
             server.module_map or "none", ":".join(runner.pythonpath))
    runner.start()
    health = serve_health(runner, *args.health) if args.health else None
    while not stop.wait(1.0):
        pass
    log.info("stopping %d pod(s)", len(runner.pods))
    runner.stop()
    if health is not None:
        health.shutdown()
    log.info("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
