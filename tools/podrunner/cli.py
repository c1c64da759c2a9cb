"""podrunner as a component of the local cluster (`python -m podrunner`): its command line and its health endpoint.
One process runs the pods of every namespace but the private ones (see the package's docstring)."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from podrunner.pods import WORKER_PYTHONPATH, worker_server
from podrunner.processes import ProcessLedger
from podrunner.watch import PodRunner

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
    parser = argparse.ArgumentParser(
        prog="python -m podrunner",
        description="Run the pods of the local cluster as local processes (a component of tools/localcluster.py).",
    )
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--log-dir", required=True, type=Path, help="one log file per pod container run")
    parser.add_argument(
        "--workers",
        choices=("areal", "reference"),
        default="reference",
        help="the server a worker pod's `python -m areal.infra.rpc.rpc_server` runs",
    )
    parser.add_argument("--namespace", help="only this namespace (default: all but the private ones)")
    parser.add_argument(
        "--pythonpath",
        action="append",
        default=None,
        help=f"prepended to the workers' PYTHONPATH (default: {', '.join(WORKER_PYTHONPATH)})",
    )
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
    runner = PodRunner(
        args.kubeconfig,
        args.namespace,
        args.log_dir,
        module_map=server.module_map,
        python=server.python,
        cluster_domain=args.cluster_domain,
        pythonpath=pythonpath,
        skip_private=args.namespace is None,
        ledger=ledger,
    )
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    log.info(
        "worker server: %s (%s, module map %s); pythonpath %s",
        server.name,
        server.python,
        server.module_map or "none",
        ":".join(runner.pythonpath),
    )
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
