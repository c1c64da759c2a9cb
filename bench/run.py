"""Runs the benchmarks on a local cluster of their own, saves each result as bench/results/<name>.json and renders
bench/RESULTS.md (bench/report.py).

    python bench/run.py --profile quick|full [--only NAME ...]

The cluster lives beside the development one: ports from 20440, state in .tools/bench-cluster, pod addresses
127.61.x.y (these override AREAL_WORKERS_CLUSTER_* of the environment, so the benchmarks never stop another
cluster), 8 KWOK nodes that hold 1600 pods, podrunner serving the reference stand-in guard. It is stopped at the
end, also when a benchmark fails. Each benchmark is a module of bench/ with NAME and
run(profile, kubeconfig, progress) -> harness.Result.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
import traceback
from types import ModuleType
from typing import TextIO

import harness
import report
from repo_paths import REPO

BENCHMARKS = ("startup", "api_economy", "rpc_overhead", "detection", "release_growth", "controller_cost")
CLUSTER_ENV = {
    "AREAL_WORKERS_CLUSTER_PORT_BASE": "20440",
    "AREAL_WORKERS_CLUSTER_DIR": str(REPO / ".tools" / "bench-cluster"),
    "AREAL_WORKERS_CLUSTER_POD_OCTET": "61",
}
NODES = 8
# 200 pods a node: a node's pods get addresses of one /24 (tools/localkube/nodes.py). Every worker asks for
# 1 CPU and 1 GiB.
NODE_CPU, NODE_MEMORY, NODE_PODS = "256", "1Ti", 200


class Steps:
    """Progress on stderr: one line per step, with the time since the start."""

    def __init__(self, stream: TextIO = sys.stderr) -> None:
        self.started = time.monotonic()
        self.stream = stream

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, message: str) -> None:
        print(f"[bench {self.elapsed():7.1f}s] {message}", file=self.stream, flush=True)


def run_all(modules: list[ModuleType], profile: str, steps: Steps) -> list[str]:
    """Starts the cluster, runs each benchmark, saves its result; stops the cluster. Returns the failures."""
    os.environ.update(CLUSTER_ENV)
    from localkube.cluster import LocalCluster
    from localkube.nodes import NodeShape

    cluster = LocalCluster()
    failures = []
    try:
        steps(f"starting the benchmark cluster ({NODES} nodes, state {cluster.state})")
        cluster.up(nodes=NODES, shape=NodeShape(cpu=NODE_CPU, memory=NODE_MEMORY, pods=NODE_PODS), workers="reference")
        steps("cluster ready")
        for module in modules:
            started = steps.elapsed()
            steps(f"{module.NAME}: started")
            try:
                result = module.run(profile, str(cluster.kubeconfig), steps)
            except Exception:  # the others still run; the failure is reported at the end
                traceback.print_exc()
                failures.append(module.NAME)
                steps(f"{module.NAME}: FAILED after {steps.elapsed() - started:.1f}s")
                continue
            path = harness.save(result)
            verdicts = "; ".join(result.targets) or "no targets"
            steps(
                f"{module.NAME}: done in {steps.elapsed() - started:.1f}s, saved {path.relative_to(REPO)} ({verdicts})"
            )
    finally:
        steps("stopping the benchmark cluster")
        cluster.down()
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", choices=("quick", "full"), default="quick")
    parser.add_argument(
        "--only",
        nargs="+",
        metavar="NAME",
        choices=BENCHMARKS,
        help=f"run only these benchmarks ({', '.join(BENCHMARKS)})",
    )
    args = parser.parse_args(argv)
    logging.getLogger("pyhelm3").setLevel(logging.ERROR)  # "command failed: helm status" of every new release
    steps = Steps()
    modules = [importlib.import_module(name) for name in args.only or BENCHMARKS]
    failures = run_all(modules, args.profile, steps)
    steps(f"wrote {report.write().relative_to(REPO)}")
    steps(f"total {steps.elapsed():.1f}s" + (f"; FAILED: {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
