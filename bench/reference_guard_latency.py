"""Request latency of a worker guard over one persistent keep-alive connection.

Starts a guard on 127.0.0.1 (our stand-in by default, or AReaL's real rpc_server with --areal-python), sends
`--requests` sequential GET /health and POST /set_env requests on a single http.client connection, and prints
p50/p90/p99/max per endpoint as a Markdown table (results: bench/results/reference-guard-latency.md).

    .venv/bin/python bench/reference_guard_latency.py [--requests 500]
    .venv/bin/python bench/reference_guard_latency.py --areal-python .tools/areal-worker/bin/python
    .venv/bin/python bench/reference_guard_latency.py --pythonpath /tmp/old/tools  # another checkout
    # a checkout from before the stand-in moved to tools/localworker:
    .venv/bin/python bench/reference_guard_latency.py --pythonpath /tmp/old/tests/support \
        --module areal_workers_testing.reference_guard
    # a checkout from before the stand-in left the areal_workers package:
    .venv/bin/python bench/reference_guard_latency.py --pythonpath /tmp/old/adapter \\
        --module areal_workers.reference_guard
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from repo_paths import LOCALWORKER_PATH

STARTUP_TIMEOUT = 120.0  # AReaL's server imports torch first
STAND_IN = "localworker.reference_guard"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def server_command(python: str, module: str, port: int, workdir: Path) -> list[str]:
    return [
        python,
        "-m",
        module,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--experiment-name",
        "bench",
        "--trial-name",
        "latency",
        "--role",
        "bench",
        "--worker-index",
        "0",
        "--name-resolve-type",
        "nfs",
        "--nfs-record-root",
        str(workdir / "name_resolve"),
        "--fileroot",
        str(workdir),
    ]


def wait_until_up(connection_port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", connection_port), timeout=1.0):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server not listening within {STARTUP_TIMEOUT}s")


def measure(port: int, method: str, path: str, body: bytes | None, requests: int) -> tuple[list[float], int]:
    """Latencies in ms, and how many replies closed the connection (http.client then reconnects)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    headers = {"Content-Type": "application/json"} if body is not None else {}
    latencies: list[float] = []
    closed = 0
    try:
        for _ in range(requests + 10):
            started = time.perf_counter()
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            response.read()
            latencies.append((time.perf_counter() - started) * 1000)
            if response.status != 200:
                raise RuntimeError(f"{method} {path} answered {response.status}")
            closed += response.will_close
    finally:
        connection.close()
    return latencies[10:], closed  # the first requests warm up the connection and the server


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=500, help="requests per endpoint (default: 500)")
    parser.add_argument("--areal-python", help="measure AReaL's areal.infra.rpc.rpc_server run by this interpreter")
    parser.add_argument(
        "--pythonpath",
        default=str(LOCALWORKER_PATH),
        help="where the stand-in is imported from (default: tools/)",
    )
    parser.add_argument("--module", default=STAND_IN, help=f"the stand-in's module (default: {STAND_IN})")
    parser.add_argument("--label", help="row label (default: the server measured)")
    args = parser.parse_args()

    if args.areal_python:
        python, module, pythonpath = args.areal_python, "areal.infra.rpc.rpc_server", ""
    else:
        python, module, pythonpath = sys.executable, args.module, args.pythonpath
    label = args.label or module
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="guard-latency-") as workdir:
        process = subprocess.Popen(
            server_command(python, module, port, Path(workdir)),
            env={**os.environ, "PYTHONPATH": pythonpath},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until_up(port, process)
            rows = [
                ("GET /health", measure(port, "GET", "/health", None, args.requests)),
                (
                    "POST /set_env",
                    measure(port, "POST", "/set_env", json.dumps({"env": {"BENCH": "1"}}).encode(), args.requests),
                ),
            ]
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    print("| server | request | n | connection | p50 ms | p90 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|---|---|")
    for name, (latencies, closed) in rows:
        reuse = "kept alive" if closed == 0 else f"closed by {closed} replies"
        print(
            f"| {label} | {name} | {len(latencies)} | {reuse} | {statistics.median(latencies):.2f} | "
            f"{percentile(latencies, 0.90):.2f} | {percentile(latencies, 0.99):.2f} | {max(latencies):.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
