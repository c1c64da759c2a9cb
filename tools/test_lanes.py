#!/usr/bin/env python3
"""The test lanes of `make test`, on the local cluster that is already up, and a report of each.

    python tools/test_lanes.py [PYTEST_ARGS...]               every lane (extra arguments go to each)
    python tools/test_lanes.py --lane NAME[,NAME...] [PYTEST_ARGS...]   lanes one by one, output on the terminal

Lanes that share nothing but the cluster run side by side, each test in namespaces of its own: the main lane (the
integration tests that keep to their namespaces) beside the AReaL lane (scheduler and conformance tests on AReaL's
real rpc_server). Then the tests marked `serial_cluster`, which load or change what every test shares (nodes, GPU
capacity, Kueue, the real node), in two streams: those that run on the real node (`real_node`) beside those that do
not, followed in that stream by the helm 4 lane, the late halves of the main and AReaL lanes (LATE_*_FILES) and the
offline lane (unit and chart tests, which need no cluster).
Last, alone, the tests that restart a component of the control plane (`restarts_control_plane`). Each lane writes
its output to .tools/lanes/<lane>.log and its JUnit report to .tools/lanes/<lane>.xml; the report prints every
lane's log once it ends (whole for a failed lane, the summary line otherwise), its time, its result and its slowest
test files (what to move when the lanes are rebalanced). The exit status is the first failure's, else 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from repo_paths import REPO, TOOLS_BIN

PYTEST = REPO / ".venv" / "bin" / "pytest"
LOGS = REPO / ".tools" / "lanes"
HELM4 = TOOLS_BIN / "helm4"
AREAL_FILES = [
    "tests/integration/test_scheduler.py",
    "tests/integration/test_areal_worker.py",
    "tests/integration/test_areal_conformance.py",
    "tests/integration/test_areal_scheduler_semantics.py",
    "tests/integration/test_train_controller.py",
    "tests/integration/test_rollout_controller.py",
    "tests/integration/test_trainer_restart.py",
    "tests/integration/test_etcd_name_resolve.py",
]
# AReaL's own semantics, checked against its real worker server by the areal lane; run against the reference guard
# as well, they would only check the stand-in (neither file has a reference_guard_only test), so the main lane
# leaves them out.
AREAL_ONLY_FILES = [
    "tests/integration/test_areal_conformance.py",
    "tests/integration/test_areal_scheduler_semantics.py",
]
# Phase 2's second stream waits on little (the serial lane, then the offline lane), while the serial-node lane beside
# it mostly waits on the real node's throttled pods; these side-by-side files run there ("late") instead of in the
# CPU-bound phase 1, which they would lengthen by their time. Not files that share a name with a serial-node test:
# test_docs_commands.py and test_deployment_guide.py both follow pages that use namespace rl, and the guide pushes
# the release test_registry_chart.py pushes.
LATE_MAIN_FILES = [
    "tests/integration/test_reaper_cronjob.py",
    "tests/integration/test_trainer_lifetime.py",
    "tests/integration/test_bench.py",
    "tests/integration/test_bench_modules.py",
    "tests/integration/test_launch_on_cluster.py",
]
LATE_AREAL_FILES = [
    "tests/integration/test_rollout_controller.py",
    "tests/integration/test_train_controller.py",
    "tests/integration/test_trainer_restart.py",
]
HELM4_FILES = [
    "tests/integration/test_harness_smoke.py",
    "tests/integration/test_chart_install.py",
    "tests/integration/test_scheduler.py",
]


@dataclass
class Lane:
    name: str
    arguments: list[str]
    environment: dict[str, str] = field(default_factory=dict)
    code: int | None = None
    seconds: float = 0.0

    @property
    def log(self) -> Path:
        return LOGS / f"{self.name}.log"

    @property
    def junit(self) -> Path:
        return LOGS / f"{self.name}.xml"

    def run(self, extra: list[str]) -> int:
        started = time.monotonic()
        with self.log.open("w") as out:
            self.code = subprocess.run(
                [str(PYTEST), *self.arguments, f"--junitxml={self.junit}", *extra],
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.environment},
            ).returncode
        self.seconds = time.monotonic() - started
        return self.code


SIDE_BY_SIDE = "not serial_cluster and not restarts_control_plane"
SERIAL = "serial_cluster and not restarts_control_plane"


def lanes() -> list[list[list[Lane]]]:
    """Phases, run one after the other; in a phase, streams run side by side; in a stream, lanes one by one."""
    left_out = [f"--ignore={path}" for path in [*AREAL_ONLY_FILES, *LATE_MAIN_FILES]]
    main = Lane("main", ["-m", f"integration and {SIDE_BY_SIDE}", *left_out])
    main_late = Lane("main-late", [*LATE_MAIN_FILES, "-m", f"integration and {SIDE_BY_SIDE}"])
    # The unit and chart tests need no cluster, so they may run beside any lane: after the serial lane, in the
    # serial phase's shorter stream, they take CPU time phase 1 (CPU-bound) would otherwise spend on them.
    offline = Lane("offline", ["-m", "not integration"])
    # -k "not rbac" deselects the [rbac] half of test_scheduler.py (each of its tests again as the least-privilege
    # controller of rbac/: docs/en/testing.md, "The RBAC lane"), so that half runs in the main lane only. On AReaL's
    # worker it would check nothing new: the controller's identity changes nothing on the worker side (ibid., "The
    # AReaL-worker lane", "Not in this lane"). The helm 4 lane keeps to the [admin] half likewise: helm 4 within the
    # controller's Role passed all 26 [rbac] tests once (stop 29), but run on every lane it slows the main lane's
    # stream on these 2 cores.
    areal_selection = ["-m", f"not reference_guard_only and {SIDE_BY_SIDE}", "-k", "not rbac"]
    areal_environment = {"AREAL_WORKERS_WORKER": "areal"}
    early_areal_files = [path for path in AREAL_FILES if path not in LATE_AREAL_FILES]
    areal = Lane("areal", [*early_areal_files, *areal_selection], areal_environment)
    areal_late = Lane("areal-late", [*LATE_AREAL_FILES, *areal_selection], areal_environment)
    helm4 = Lane("helm4", [*HELM4_FILES, "-m", SIDE_BY_SIDE, "-k", "not rbac"], {"AREAL_WORKERS_HELM": str(HELM4)})
    serial_node = Lane("serial-node", ["-m", f"{SERIAL} and real_node"])
    serial = Lane("serial", ["-m", f"{SERIAL} and not real_node"])
    restarts = Lane("restarts", ["-m", "restarts_control_plane"])
    return [
        [[main], [areal]],
        [[serial_node], [serial, helm4, main_late, areal_late, offline]],
        [[restarts]],
    ]


def by_name(name: str) -> Lane:
    found = [lane for phase in lanes() for lanes_ in phase for lane in lanes_ if lane.name == name]
    if not found:
        raise SystemExit(
            f"test_lanes: no lane {name!r}; the lanes: "
            f"{', '.join(lane.name for phase in lanes() for lanes_ in phase for lane in lanes_)}"
        )
    return found[0]


def slowest_files(junit: Path, count: int = 6) -> list[tuple[str, float]]:
    """The test files that took longest in a lane's JUnit report, with their summed seconds (setup included)."""
    if not junit.exists():
        return []
    seconds: Counter[str] = Counter()
    for case in ElementTree.parse(junit).iter("testcase"):
        module = case.get("classname", "").split("[")[0]
        path = "/".join(part for part in module.split(".") if not part[:1].isupper())
        seconds[f"{path}.py"] += float(case.get("time") or 0)
    return seconds.most_common(count)


def report(lane: Lane, lock: threading.Lock) -> None:
    text = lane.log.read_text(errors="replace")
    summary = next((line for line in reversed(text.splitlines()) if line.startswith("=")), "(no summary)")
    slowest = ", ".join(f"{path} {spent:.0f} s" for path, spent in slowest_files(lane.junit))
    with lock:
        print(f"\n===== lane {lane.name}: exit {lane.code} in {lane.seconds:.0f} s: {summary.strip('= ')}", flush=True)
        if slowest:
            print(f"      slowest: {slowest}", flush=True)
        if lane.code != 0:
            print(text, flush=True)


def main(extra: list[str]) -> int:
    if extra[:1] == ["--lane"] and len(extra) > 1:
        codes = [
            subprocess.run(
                [str(PYTEST), *lane.arguments, *extra[2:]], cwd=REPO, env={**os.environ, **lane.environment}
            ).returncode
            for lane in map(by_name, extra[1].split(","))
        ]
        return next((code for code in codes if code != 0), 0)
    LOGS.mkdir(parents=True, exist_ok=True)
    lock = threading.Lock()
    started = time.monotonic()
    every: list[Lane] = []
    for phase in lanes():

        def stream(lanes_: list[Lane]) -> None:
            for lane in lanes_:
                with lock:
                    print(
                        f"lane {lane.name}: {' '.join(lane.arguments)} (log {lane.log.relative_to(REPO)})", flush=True
                    )
                lane.run(extra)
                report(lane, lock)

        threads = [threading.Thread(target=stream, args=(lanes_,)) for lanes_ in phase]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        every += [lane for lanes_ in phase for lane in lanes_]
        if any(lane.code != 0 for lane in every):
            break
    print(
        f"\n===== lanes in {time.monotonic() - started:.0f} s: "
        + ", ".join(f"{lane.name} {'passed' if lane.code == 0 else 'FAILED'} ({lane.seconds:.0f} s)" for lane in every),
        flush=True,
    )
    return next((lane.code or 1 for lane in every if lane.code != 0), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
