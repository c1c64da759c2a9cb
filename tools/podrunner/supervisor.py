"""The processes of the pods a runner manages, supervised as a kubelet would: started (and recorded in the ledger),
probed for readiness, restarted after a back-off when they exit, a test hook run once, stopped within the grace
period and killed with their descendants after it."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from podrunner.credentials import host_environment, remove_credentials
from podrunner.forked import ForkedProcess, ForkServer, ForkServerError
from podrunner.logs import append_cri_line, previous_log, write_cri_log
from podrunner.pods import ManagedPod
from podrunner.processes import ProcessLedger, StartFailure, kill_tree, listening_ports, send_signal
from podrunner.status import StatusWriter, timestamp

# sitecustomize.py that resolves cluster DNS names of StatefulSet pods inside test hooks (PODRUNNER_HOSTS).
RESOLVER_SHIM = Path(__file__).resolve().parent / "dns"
RESTART_BACKOFF_BASE = 1.0
RESTART_BACKOFF_MAX = 20.0
STOP_GRACE_MAX = 10.0
# How long a pod waits for its IP to be released by the processes of a deleted pod that had it (see launch).
ADDRESS_RELEASE_WAIT = 60.0
ADDRESS_RECHECK = 0.25

log = logging.getLogger("podrunner")


def _probe(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1.0) as response:
            return 200 <= response.status < 400
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


class PodSupervisor:
    """Starts, tends and stops the processes of ManagedPods.

    stopping: set when the runner stops; nothing starts after it. hosts: cluster DNS name -> pod IP, handed to
    test hooks when they start. pythonpath: prepended to the workers' PYTHONPATH. tools: prepended to every
    pod's PATH (helm, kubectl). A pod's ServiceAccount credentials are removed once its process is gone."""

    def __init__(
        self,
        status: StatusWriter,
        stopping: threading.Event,
        hosts: dict[str, str],
        pythonpath: tuple[str, ...],
        ledger: ProcessLedger | None,
        tools: Path | None = None,
        fork_server: ForkServer | None = None,
    ) -> None:
        self.status = status
        self.fork_server = fork_server
        self.stopping = stopping
        self.hosts = hosts
        self.pythonpath = pythonpath
        self.ledger = ledger
        self.tools = tools
        self._stoppers: list[threading.Thread] = []
        self._stoppers_lock = threading.Lock()

    # --- starting ----------------------------------------------------------------------------------

    def _environment(self, pod: ManagedPod) -> dict[str, str]:
        environment = {**host_environment(self.tools), **pod.kubelet_env, **pod.env}
        prepend = [str(RESOLVER_SHIM)] if pod.kind == "hook" else [*self.pythonpath, *pod.pythonpath]
        if prepend:
            environment["PYTHONPATH"] = os.pathsep.join(filter(None, [*prepend, environment.get("PYTHONPATH")]))
        if pod.kind == "hook":
            environment["PODRUNNER_HOSTS"] = json.dumps(self.hosts)
        return environment

    def launch(self, pod: ManagedPod) -> None:
        """Starts the pod's process unless it runs, the pod is deleted or the runner stops (under the pod's lock,
        so the watch and the probe thread start it once between them)."""
        environment = self._environment(pod)
        with pod.lock:
            if self.stopping.is_set() or pod.deleted or pod.process is not None:  # an exited one is cleared first
                if self.stopping.is_set() and pod.process is None:  # added while the runner stops: never runs
                    remove_credentials(pod.credentials)
                return
            # Workers only: the probe loop, which retries at restart_at, tends workers alone; hooks listen on nothing.
            if pod.kind == "worker" and not pod.restarts and not pod.host_network and self._address_taken(pod):
                return
            if pod.restarts and pod.log.exists():  # `kubectl logs --previous` reads the last run
                os.replace(pod.log, previous_log(pod.log))
            pod.process = self._spawn(pod, environment)
        if pod.kind in ("hook", "once"):  # run to completion, never restarted
            threading.Thread(target=self._finish_hook, args=(pod,), daemon=True).start()

    def _address_taken(self, pod: ManagedPod) -> bool:
        """Whether the pod's first start must wait for its IP. KWOK frees a deleted pod's IP at once, while that
        pod's processes may still listen on it during their grace period; a kubelet frees it only with the pod's
        network namespace. A pod started meanwhile would fail to bind its port, and its readiness probe would
        reach the old pod's server. Waits at most ADDRESS_RELEASE_WAIT, then starts anyway."""
        ports = listening_ports(pod.ip)
        if not ports:
            return False
        now = time.monotonic()
        if not pod.address_wait_until:
            pod.address_wait_until = now + ADDRESS_RELEASE_WAIT
            log.info("%s: waiting for %s to be released (listening on ports %s)", pod.name, pod.ip, ports)
        if now >= pod.address_wait_until:
            log.warning(
                "%s: %s still in use after %.0f s (ports %s): starting anyway",
                pod.name,
                pod.ip,
                ADDRESS_RELEASE_WAIT,
                ports,
            )
            return False
        pod.restart_at = now + ADDRESS_RECHECK
        return True

    def _start(self, pod: ManagedPod, environment: dict[str, str]) -> subprocess.Popen | ForkedProcess:
        if self.fork_server is not None and pod.kind == "worker" and self.fork_server.handles(pod.argv, environment):
            try:
                return self.fork_server.spawn(pod.argv, environment)
            except (ForkServerError, OSError) as error:  # the pod still runs, as its own `python -m`
                log.warning("%s: fork server: %s; starting it with exec", pod.name, error)
        return subprocess.Popen(
            pod.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=environment,
            start_new_session=True,
        )

    def _spawn(self, pod: ManagedPod, environment: dict[str, str]) -> subprocess.Popen | ForkedProcess | StartFailure:
        try:
            process = self._start(pod, environment)
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

    def _reap(self, process: subprocess.Popen | ForkedProcess) -> None:
        process.wait()
        if self.ledger is not None:
            self.ledger.forget(process.pid)

    def _finish_hook(self, pod: ManagedPod) -> None:
        process = pod.process
        code = 127 if isinstance(process, StartFailure) or process is None else process.wait()  # 127: never started
        log.info("%s: %s pod exited with %d", pod.name, "test hook" if pod.kind == "hook" else "run-once", code)
        self.status.hook_finished(pod, code)

    # --- tending workers ---------------------------------------------------------------------------

    def tend(self, pod: ManagedPod) -> None:
        """One probe-loop step for a worker: record an exit, restart after the back-off, or probe readiness."""
        now = time.monotonic()
        process = pod.process
        if process is not None and process.poll() is not None:
            if pod.deleted:
                return
            self._record_exit(pod, process, now)
            return
        if process is None:
            if now >= pod.restart_at:
                self.launch(pod)
            return
        if now < pod.next_probe:
            return
        # Without a readiness probe a kubelet reports a running container as ready.
        healthy = pod.probe_url is None or _probe(pod.probe_url)
        # Until first Ready, probe fast so tests do not wait a whole period; afterwards at the pod's period.
        pod.next_probe = now + (pod.probe_period if healthy else 0.2)
        if healthy != pod.ready and self.status.container_state(pod, ready=healthy):
            pod.ready = healthy

    def _record_exit(
        self, pod: ManagedPod, process: subprocess.Popen | ForkedProcess | StartFailure, now: float
    ) -> None:
        pod.process = None
        pod.restarts += 1
        pod.ready = False
        pod.restart_at = now + min(RESTART_BACKOFF_BASE * 2 ** (pod.restarts - 1), RESTART_BACKOFF_MAX)
        code = process.returncode
        exit_code = 128 - code if code < 0 else code
        terminated = {
            "exitCode": exit_code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": timestamp(),
            "finishedAt": timestamp(),
        }
        if isinstance(process, StartFailure):
            terminated.update(reason=process.reason, message=process.message)
        log.info("%s: exited with %d, restart %d in %.0f s", pod.name, exit_code, pod.restarts, pod.restart_at - now)
        self.status.container_state(pod, ready=False, last_terminated=terminated)

    # --- stopping ----------------------------------------------------------------------------------

    def stop(self, pod: ManagedPod) -> None:
        """SIGTERM now (the address is freed as soon as the process exits); the wait for the grace period and the
        SIGKILL after it run in the background: the watch must not wait for grace periods."""
        with pod.lock:
            pod.deleted = True  # no restart after this
            process = pod.process
            if process is None or process.poll() is not None:
                remove_credentials(pod.credentials)
                return
            send_signal(process.pid, signal.SIGTERM)
        thread = threading.Thread(target=self._finish_stop, args=(pod, process), daemon=True, name=f"stop-{pod.name}")
        with self._stoppers_lock:
            self._stoppers = [t for t in self._stoppers if t.is_alive()]
            self._stoppers.append(thread)
        thread.start()

    def _finish_stop(self, pod: ManagedPod, process: subprocess.Popen | ForkedProcess) -> None:
        """After the grace period (at most 10 s), SIGKILL to the process group and every descendant; then the
        pod's credentials go (a process may use them while it shuts down, as with a kubelet's token volume)."""
        try:
            process.wait(timeout=min(pod.grace, STOP_GRACE_MAX))
        except subprocess.TimeoutExpired:
            log.warning("%s: pid %d outlived its grace period: SIGKILL", pod.name, process.pid)
            kill_tree(process.pid)
            process.wait()
        remove_credentials(pod.credentials)

    def kill(self, pod: ManagedPod) -> None:
        """Stops the pod's process and waits until it is gone (fault injection in tests: a worker dies)."""
        self.stop(pod)
        process = pod.process
        if process is not None:
            process.wait()

    def wait_for_stops(self) -> None:
        """Waits for every process being stopped to be gone."""
        with self._stoppers_lock:
            stoppers = list(self._stoppers)
        for thread in stoppers:
            thread.join()
