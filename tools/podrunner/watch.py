"""PodRunner: watches the pods of one namespace (or all) and reconciles what runs with what is listed.

Every listing (start-up, a dropped watch, an expired resource version) stops the processes of pods no longer
listed and starts those not run yet; watch events start and stop them in between. Pods of namespaces labelled
private are left to a runner of their own. The processes themselves are PodSupervisor's; the ServiceAccount
kubeconfigs of the pods that mount a token, PodCredentials'.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

import urllib3
import yaml
from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from podrunner.credentials import PodCredentials, host_environment, remove_credentials, tools_directory
from podrunner.forked import ForkServer
from podrunner.logs import publish_logs, withdraw_logs
from podrunner.pods import (
    AREAL_SERVER_MODULE,
    DEFAULT_MODULE_MAP,
    STAND_IN_DIR,
    ManagedPod,
    UnsupportedPod,
    managed_pod,
    pod_kind,
)
from podrunner.processes import ProcessLedger
from podrunner.status import StatusWriter
from podrunner.supervisor import PodSupervisor
from repo_paths import REPO

# PODRUNNER_FORK_SERVER=0: each AReaL rpc_server pod process is its own `python -m` (8 s of imports each), not a
# child of fork_server.py.
FORK_SERVER_SWITCH = "PODRUNNER_FORK_SERVER"
# Namespaces with this label are run by a runner of their own (a test's): the cluster's runner skips them.
PRIVATE_LABEL, PRIVATE_VALUE = "areal-workers.dev/podrunner", "private"
PRIVATE_CACHE_SECONDS = 30.0

log = logging.getLogger("podrunner")


def chart_worker_user() -> str:
    """The USER the chart's worker pods get (workerDefaults.env.USER)."""
    values = yaml.safe_load((REPO / "charts" / "areal-workers" / "values.yaml").read_text())
    return str(values["workerDefaults"]["env"]["USER"])


def areal_fork_server(
    python: str, pythonpath: tuple[str, ...], log_dir: Path, ledger: ProcessLedger | None = None
) -> ForkServer | None:
    """The fork server of AReaL's rpc_server for runners of `python` and `pythonpath` (None when
    PODRUNNER_FORK_SERVER=0). Runners may share one: it imports the module once for all of them, and each request
    carries its pod's own environment, arguments and directory."""
    if os.environ.get(FORK_SERVER_SWITCH, "1") == "0":
        return None
    environment = host_environment(tools_directory())
    environment["PYTHONPATH"] = os.pathsep.join(pythonpath)
    environment["USER"] = chart_worker_user()  # what the chart's worker pods set: they fork
    return ForkServer(python, AREAL_SERVER_MODULE, log_dir, environment, ledger)


class PodRunner:
    """Watches one namespace (or all, namespace=None) and runs the pods with a command; see the package's docstring.

    skip_private: leave namespaces labelled areal-workers.dev/podrunner=private to their own runner (the
    cluster's runner does; a test's runner for its own namespace does not).
    fork_server: one of areal_fork_server() for the same python and pythonpath, shared with other runners: this
    runner forks its AReaL pods from it and leaves it running when it stops (its owner stops it). Without it, the
    runner starts a server of its own on its first AReaL pod."""

    def __init__(
        self,
        kubeconfig: Path | str,
        namespace: str | None,
        log_dir: Path,
        module_map: dict[str, str] | None = None,
        python: str = sys.executable,
        cluster_domain: str = "cluster.local",
        pythonpath: tuple[str, ...] = (),
        skip_private: bool = False,
        ledger: ProcessLedger | None = None,
        fork_server: ForkServer | None = None,
    ) -> None:
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
        self.status = StatusWriter(self.api, self._error)
        self.credentials = PodCredentials(self.api, log_dir / "credentials")
        self._owns_fork_server = fork_server is None
        if self.module_map:
            self.fork_server = None
        elif fork_server is None:
            self.fork_server = areal_fork_server(python, self.pythonpath, log_dir, ledger)
        else:
            if fork_server.python != python or fork_server.environment["PYTHONPATH"] != os.pathsep.join(pythonpath):
                raise ValueError(
                    f"the shared fork server runs {fork_server.python} with PYTHONPATH "
                    f"{fork_server.environment['PYTHONPATH']!r}: this runner's pods need {python} with "
                    f"{os.pathsep.join(pythonpath)!r}"
                )
            self.fork_server = fork_server
        self.supervisor = PodSupervisor(
            self.status,
            self._stop,
            self.hosts,
            self.pythonpath,
            ledger,
            tools=tools_directory(),
            fork_server=self.fork_server,
        )

    # --- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> PodRunner:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.credentials.reset()
        for target in (self._watch_loop, self._probe_loop):
            thread = threading.Thread(target=target, daemon=True, name=f"podrunner-{target.__name__}")
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Stops every process (all at once, each within its grace period) and waits for them. Nothing starts
        after this: a pod the watch is adding now is in `pods` before its process starts, and launch checks."""
        self._stop.set()
        self._connected.set()
        for uid in list(self.pods):
            self._forget(uid, "runner stopping")
        self.supervisor.wait_for_stops()
        if self.fork_server is not None and self._owns_fork_server:
            self.fork_server.stop()
        for thread in self._threads:  # the watch ends with its stream (at most 5 s); it starts nothing now
            thread.join(timeout=1.0)

    def healthy(self) -> bool:
        return self.synced.is_set() and all(thread.is_alive() for thread in self._threads)

    def __enter__(self) -> PodRunner:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> list[dict]:
        return [pod.describe() for pod in list(self.pods.values())]

    def _error(self, message: str) -> None:
        log.error("%s", message)
        self.errors.append(message)

    # --- fault injection ---------------------------------------------------------------------------

    def disconnect(self) -> None:
        """Drops the watch as a lost connection would; no event is seen until reconnect(), which relists.
        `disconnected` is set once the watch is down."""
        self._connected.clear()

    def reconnect(self) -> None:
        self._connected.set()

    def _kill(self, pod: ManagedPod) -> None:
        """Stops the pod's process and waits until it is gone (a worker dies)."""
        self.supervisor.kill(pod)

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
        for event in watch.Watch().stream(
            function, *args, resource_version=version, timeout_seconds=5, allow_watch_bookmarks=True
        ):
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
        managed = self._prepare(pod, kind)
        if managed is None:
            return
        if not publish_logs(self.api.api_client, managed):
            remove_credentials(managed.credentials)
            return
        # Listed before it starts, so that stop() sees it; launch under the pod's lock starts it once, whether
        # the probe thread or this one gets there first.
        self.pods[uid] = managed
        self.supervisor.launch(managed)

    def _prepare(self, pod: client.V1Pod, kind: str) -> ManagedPod | None:
        """The pod's record with its ServiceAccount kubeconfig, None when it is not to run (refused, or its
        namespace is terminating)."""
        try:
            managed = managed_pod(pod, kind, self.module_map, self.python, self.log_dir)
            self.credentials.attach(pod, managed)
        except UnsupportedPod as error:
            self._refuse(pod, error)
            return None
        except ApiException as error:  # 403: the TokenRequest in a terminating namespace; a relist retries
            log.info(
                "%s/%s: not run: no ServiceAccount token (%s %s)",
                pod.metadata.namespace,
                pod.metadata.name,
                error.status,
                error.reason,
            )
            return None
        return managed

    def _forget(self, uid: str, why: str, gone: bool = False) -> None:
        """Stops the pod's process; `gone`: the pod itself is deleted, so its Logs object goes too."""
        self.refused.discard(uid)
        managed = self.pods.pop(uid, None)
        if managed is not None:
            log.info("%s: stopping (%s)", managed.name, why)
            self.supervisor.stop(managed)
            if gone:
                withdraw_logs(self.api.api_client, managed)

    def _refuse(self, pod: client.V1Pod, error: UnsupportedPod) -> None:
        """A pod podrunner cannot emulate gets the kubelet's CreateContainerConfigError, once."""
        self.refused.add(pod.metadata.uid)
        log.warning("%s/%s: not run: %s", pod.metadata.namespace, pod.metadata.name, error)
        self.status.config_error(pod, error)

    # --- cluster DNS names of StatefulSet pods -----------------------------------------------------

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

    # --- probing -----------------------------------------------------------------------------------

    def _probe_loop(self) -> None:
        while not self._stop.wait(0.2):
            for pod in list(self.pods.values()):
                if pod.kind == "worker":
                    try:
                        self.supervisor.tend(pod)
                    except Exception as error:  # noqa: BLE001 - one pod must not stop the others' probes
                        self._error(f"{pod.name}: {error!r}")
