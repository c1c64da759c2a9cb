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
  engines it loads (and, when modules are swapped, tests/support for the stand-ins); the tools directory
  (.tools/bin: helm, kubectl) comes first on its PATH, and the host's KUBECONFIG and KUBERNETES_SERVICE_* are not
  passed on;
- for a pod whose container mounts its ServiceAccount's token (automountServiceAccountToken not false), requests
  that token (TokenRequest, bound to the pod) and hands the process a kubeconfig of its own (KUBECONFIG) and the
  apiserver's address (KUBERNETES_SERVICE_HOST/PORT), instead of writing into the host's /var/run/secrets;
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

This module is the component's command line and health endpoint. The rest: podrunner_watch (PodRunner, the
watch and reconcile loop), podrunner_pods (pod -> command line, environment, probe), podrunner_supervisor
(starting, probing, restarting and stopping processes), podrunner_credentials (ServiceAccount kubeconfigs, the
process environment's base), podrunner_status (pod status writes), podrunner_logs (CRI log files, KWOK Logs
objects), podrunner_processes (process trees and the ledger).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from podrunner_pods import WORKER_PYTHONPATH, worker_server
from podrunner_processes import ProcessLedger
from podrunner_watch import PRIVATE_LABEL, PRIVATE_VALUE, PodRunner

__all__ = ["PRIVATE_LABEL", "PRIVATE_VALUE", "PodRunner", "ProcessLedger", "main", "serve_health"]

log = logging.getLogger("podrunner")


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
