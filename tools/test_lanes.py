#!/usr/bin/env python3
"""The test lanes of `make test`, on the local cluster that is already up, and a report of each.

    python tools/test_lanes.py [PYTEST_ARGS...]               every lane (extra arguments go to each)
    python tools/test_lanes.py --lane NAME[,NAME...] [PYTEST_ARGS...]   lanes one by one, output on the terminal

A lane is a `-m` expression over the markers the tests declare (pyproject.toml lists them), with an environment; no lane
names a file. An extra `-m` narrows each lane's own expression (both must match). A lane starts once the lanes it comes
after have passed, and runs beside every other that has started, each test in namespaces of its own (lanes()): at once,
the tests that run on the real node (`serial_cluster` and `real_node`, one at a time: first those in names the docs'
pages use too, `fixed_names`, then the others), the main lane (the integration tests that keep to their namespaces, two
pytest-xdist processes) and the AReaL lane (`areal_worker` and `both_workers` tests on AReaL's real rpc_server, two
processes too); after the main and AReaL lanes, the other `serial_cluster` tests, which change what every test shares
(nodes, GPU capacity, Kueue), and the offline lane (the unit tests that need AReaL's environment, but no cluster); after
those, the helm 4 lane (`helm4`) and the `late` halves of the main and AReaL lanes (the main one also after the
`fixed_names` real-node tests, whose names its tests use). No test stops a component of the control plane that another
test uses (an API server restart is a second API server's). The other unit and chart tests are `make check`'s lanes
(check_lanes), run before the cluster starts. Each lane writes its output to .tools/lanes/<lane>.log and its JUnit
report to .tools/lanes/<lane>.xml; the report prints every lane's log once it ends (whole for a failed lane, the summary
line otherwise), its time, how busy the CPUs were while it ran (/proc/stat: near 100 % the machine computes, well below
it waits on pods and helm), its result and its slowest test files (what to move when the lanes are rebalanced). A lane
that skipped a test fails, naming it and its reason. The exit status is the first failure's, else 0."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from repo_paths import REPO, TOOLS_BIN

PYTEST = REPO / ".venv" / "bin" / "pytest"
LOGS = REPO / ".tools" / "lanes"
HELM4 = TOOLS_BIN / "helm4"
AREAL_WORKER = {"AREAL_WORKERS_WORKER": "areal"}
NO_TESTS_COLLECTED = 5  # pytest's exit status
INTEGRATION_TESTS = "tests/integration"


@dataclass
class Lane:
    """One pytest run of `make test`: the tests whose markers match `selection`, with `environment` set."""

    name: str
    selection: str
    environment: dict[str, str] = field(default_factory=dict)
    workers: int = 1  # pytest-xdist processes, a test file each at a time (its module fixtures and order kept)
    after: tuple[str, ...] = ()  # the lanes that must have ended, passing, before this one starts
    code: int | None = None
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)

    @property
    def log(self) -> Path:
        return LOGS / f"{self.name}.log"

    @property
    def junit(self) -> Path:
        return LOGS / f"{self.name}.xml"

    @property
    def failed(self) -> bool:
        return self.code != 0 or bool(self.skipped)

    def command(self, extra: list[str]) -> list[str]:
        """pytest's arguments: the lane's selection and every `-m` of `extra`, all of which a test must match, then
        the rest of `extra`; the lane's JUnit report last, so that it is the one pytest writes."""
        expressions, rest = split_mark_expressions(extra)
        selection = " and ".join(f"({expression})" for expression in [self.selection, *expressions])
        parallel = ["-n", str(self.workers), "--dist", "loadfile"] if self.workers > 1 else []
        selected = selection if expressions else self.selection
        return [str(PYTEST), "-m", selected, *parallel, *self.collection(), *rest, f"--junitxml={self.junit}"]

    def collection(self) -> list[str]:
        """Where pytest looks for tests when no path is given: only among the integration tests when nothing else
        can match the lane (its selection requires `integration`, the marker of that directory alone, by
        tests/conftest.py). Each of the cluster lanes' processes then imports the integration test modules alone,
        2.8 s of CPU instead of 7.7 for the whole suite; the lane still selects by markers alone."""
        return ["-o", f"testpaths={INTEGRATION_TESTS}"] if self.selection.startswith("integration and ") else []

    def run(self, extra: list[str], output: IO[str] | None = None) -> bool:
        """Runs pytest (its output to `output`, else the terminal) and reads the skipped tests from its report;
        True when it passed and skipped nothing. A lane of which `extra` leaves no test passes."""
        started = time.monotonic()
        self.junit.unlink(missing_ok=True)
        self.code = subprocess.run(
            self.command(extra),
            cwd=REPO,
            stdout=output,
            stderr=subprocess.STDOUT if output else None,
            env={**os.environ, **self.environment},
        ).returncode
        self.seconds = time.monotonic() - started
        if self.code == NO_TESTS_COLLECTED and extra:  # PYTEST_ARGS left this lane nothing to run
            self.code = 0
        if self.junit.exists():
            self.skipped = skipped_tests(self.junit)
        elif self.code == 0:
            self.skipped = [f"(pytest wrote no {self.junit}: whether it skipped a test is unknown)"]
        return not self.failed


def split_mark_expressions(extra: list[str]) -> tuple[list[str], list[str]]:
    """The `-m` expressions of `extra` (`-m EXPR` or `-mEXPR`) and its other arguments."""
    expressions: list[str] = []
    rest: list[str] = []
    arguments = iter(extra)
    for argument in arguments:
        if argument == "-m":
            expression = next(arguments, None)
            if expression is None:
                raise SystemExit("test_lanes: -m without an expression")
            expressions.append(expression)
        elif argument.startswith("-m"):
            expressions.append(argument[2:])
        else:
            rest.append(argument)
    return expressions, rest


SIDE_BY_SIDE = "not serial_cluster"
SERIAL = "integration and serial_cluster"
# The worker server of the areal lanes, AReaL's, runs the tests that check it (`areal_worker`) and those that check
# both it and the stand-in (`both_workers`); the integration conftest deselects the `reference_guard_only` ones.
AREAL = f"integration and (areal_worker or both_workers) and {SIDE_BY_SIDE}"


def lanes() -> list[Lane]:
    """The cluster's lanes, each started once the lanes it comes `after` have passed; the others run side by side.
    Two lanes may overlap unless one comes (transitively) after the other: tests/unit/tools/test_lane_selection.py
    checks that lanes which may overlap share nothing one of them changes."""
    # The real-node tests, the longest lane, start at once (AReaL's start in their containers is most of it). Beside
    # them, the lanes whose tests keep to namespaces of their own and touch neither the real node nor its fixed
    # names (the deployment guide's namespace rl and chart push, the demo's namespace). One test stream keeps about
    # a quarter of the 2 cores busy (it waits on pods and helm), so two processes run the main lane's files.
    # The real-node tests in names that the docs' pages use too (`fixed_names`) go first, so that main-late, which
    # runs those pages, waits for them and not for the whole real-node stream.
    serial_node_names = Lane("serial-node-names", f"{SERIAL} and real_node and fixed_names")
    serial_node = Lane("serial-node", f"{SERIAL} and real_node and not fixed_names", after=("serial-node-names",))
    main = Lane("main", f"integration and not late and {SIDE_BY_SIDE}", workers=2)
    # Two processes for the AReaL lane as well: the serial lane waits for both, and with one process the AReaL lane,
    # whose two largest files are most of it, ended ~200 s after the main lane (811 s against 599 s, warm) while the
    # CPUs were shared among the processes at work.
    areal = Lane("areal", f"{AREAL} and not late", AREAL_WORKER, workers=2)
    # Then the tests that change KWOK nodes and GPU capacity under every other test: beside the real-node tests
    # only (their workers are pinned to the real node), and the unit tests that need AReaL's environment but no
    # cluster (the rest of the unit and chart tests ran in `make check`, before the cluster started).
    side_by_side = ("main", "areal")
    serial = Lane("serial", f"{SERIAL} and not real_node", after=side_by_side)
    offline = Lane("offline", "not integration and areal_worker", after=side_by_side)
    # After them, the helm 4 lane and the `late` tests: those that use the real-node tests' fixed names (they run
    # the docs' pages, push the chart) wait for those too.
    helm4 = Lane(
        "helm4",
        f"integration and helm4 and {SIDE_BY_SIDE}",
        {"AREAL_WORKERS_HELM": str(HELM4)},
        after=("serial",),
    )
    areal_late = Lane("areal-late", f"{AREAL} and late", AREAL_WORKER, after=("serial",))
    main_late = Lane(
        "main-late", f"integration and late and {SIDE_BY_SIDE}", workers=2, after=("serial", "serial-node-names")
    )
    return [serial_node_names, serial_node, main, areal, serial, offline, helm4, areal_late, main_late]


def before(name: str, every: list[Lane]) -> set[str]:
    """The lanes that end before lane `name` starts: those it comes after, and theirs."""
    by = {lane.name: lane for lane in every}
    found: set[str] = set()
    waiting = list(by[name].after)
    while waiting:
        earlier = waiting.pop()
        if earlier not in found:
            found.add(earlier)
            waiting.extend(by[earlier].after)
    return found


def may_overlap(first: str, second: str, every: list[Lane]) -> bool:
    return first != second and first not in before(second, every) and second not in before(first, every)


def check_lanes() -> list[Lane]:
    """The tests of `make check`, the tier without a cluster that `make test` runs first (`--lane unit,chart`): the
    unit tests that need neither AReaL's environment nor helm, and the chart tests. Their tests compute rather than
    wait, so each lane runs as many pytest-xdist processes as there are cores (up to 4: each one collects the whole
    lane again)."""
    workers = min(os.cpu_count() or 1, 4)
    return [
        Lane("unit", "unit and not areal_worker and not chart", workers=workers),
        Lane("chart", "chart", workers=workers),
    ]


def every_lane() -> list[Lane]:
    return [*check_lanes(), *lanes()]


def by_name(name: str) -> Lane:
    found = [lane for lane in every_lane() if lane.name == name]
    if not found:
        raise SystemExit(f"test_lanes: no lane {name!r}; the lanes: {', '.join(lane.name for lane in every_lane())}")
    return found[0]


def case_file(case: ElementTree.Element) -> str:
    """The test file of a JUnit testcase: its classname's module parts (not its classes') as a path."""
    module = case.get("classname", "").split("[")[0]
    return "/".join(part for part in module.split(".") if not part[:1].isupper()) + ".py"


def slowest_files(junit: Path, count: int = 6) -> list[tuple[str, float]]:
    """The test files that took longest in a lane's JUnit report, with their summed seconds (setup included)."""
    if not junit.exists():
        return []
    seconds: Counter[str] = Counter()
    for case in ElementTree.parse(junit).iter("testcase"):
        seconds[case_file(case)] += float(case.get("time") or 0)
    return seconds.most_common(count)


def skipped_tests(junit: Path) -> list[str]:
    """`file::test: reason` of every test a lane's JUnit report records as skipped."""
    return [
        f"{case_file(case)}::{case.get('name')}: {skipped.get('message', '')}"
        for case in ElementTree.parse(junit).iter("testcase")
        if (skipped := case.find("skipped")) is not None
    ]


def print_skipped(lane: Lane) -> None:
    if lane.skipped:
        print(f"      lane {lane.name} FAILED: it skipped {len(lane.skipped)} (no lane may skip a test):", flush=True)
        print("\n".join(f"        {skipped}" for skipped in lane.skipped), flush=True)


def report(lane: Lane, lock: threading.Lock, busy: str = "") -> None:
    text = lane.log.read_text(errors="replace")
    summary = next((line for line in reversed(text.splitlines()) if line.startswith("=")), "(no summary)")
    slowest = ", ".join(f"{path} {spent:.0f} s" for path, spent in slowest_files(lane.junit))
    with lock:
        print(
            f"\n===== lane {lane.name}: exit {lane.code} in {lane.seconds:.0f} s"
            f"{f' ({busy} while it ran)' if busy else ''}: {summary.strip('= ')}",
            flush=True,
        )
        if slowest:
            print(f"      slowest: {slowest}", flush=True)
        if lane.code != 0:
            print(text, flush=True)
        print_skipped(lane)


def cpu_ticks() -> tuple[int, int] | None:
    """The machine's busy and total CPU ticks since boot (/proc/stat; None where there is none)."""
    try:
        fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    except (OSError, ValueError):
        return None
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle and iowait
    return sum(fields) - idle, sum(fields)


def cpu_busy(before: tuple[int, int] | None, after: tuple[int, int] | None) -> str:
    """How busy the CPUs were between two readings, as a percentage of all of them (what tells a lane that waits
    from one that computes)."""
    if before is None or after is None or after[1] == before[1]:
        return "CPU busy unknown"
    return f"CPU busy {100 * (after[0] - before[0]) / (after[1] - before[1]):.0f}%"


def without_the_real_node(extra: list[str]) -> list[str]:
    """`extra`, narrowed to the tests that need no real node when the local cluster runs without one
    (`make test NODE=kwok`, or a machine that cannot run it), which is said once, loudly: those tests would only
    fail at their setup."""
    from localkube.cluster import LocalCluster

    absence = LocalCluster().real_node().absence()
    if not absence:
        return extra
    print(f"test_lanes: the real_node tests are left out: {absence}", flush=True)
    return [*extra, "-m", "not real_node"]


def main(extra: list[str]) -> int:
    LOGS.mkdir(parents=True, exist_ok=True)
    if extra[:1] == ["--lane"] and len(extra) > 1:
        chosen = [by_name(name) for name in extra[1].split(",")]
        check = {lane.name for lane in check_lanes()}
        extra = extra[2:] if all(lane.name in check for lane in chosen) else without_the_real_node(extra[2:])
        for lane in chosen:
            lane.run(extra)
            print_skipped(lane)
        return next((lane.code or 1 for lane in chosen if lane.failed), 0)
    extra = without_the_real_node(extra)
    lock = threading.Lock()
    started = time.monotonic()
    every = lanes()
    by = {lane.name: lane for lane in every}
    ended = {lane.name: threading.Event() for lane in every}

    def run(lane: Lane) -> None:
        for name in lane.after:
            ended[name].wait()
        failed = [name for name in lane.after if by[name].code is None or by[name].failed]
        try:
            if failed:
                with lock:
                    print(f"\n===== lane {lane.name}: not run, after {', '.join(failed)}", flush=True)
                return
            with lock:
                command = shlex.join(lane.command(extra)[1:-1])  # not the report's path
                print(f"lane {lane.name}: {command} (log {lane.log.relative_to(REPO)})", flush=True)
            ticks = cpu_ticks()
            with lane.log.open("w") as out:
                lane.run(extra, out)
            report(lane, lock, cpu_busy(ticks, cpu_ticks()))
        finally:  # whatever happened, the lanes after this one stop waiting (and see it failed or did not run)
            ended[lane.name].set()

    threads = [threading.Thread(target=run, args=(lane,)) for lane in every]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    print(
        f"\n===== lanes in {time.monotonic() - started:.0f} s: "
        + ", ".join(f"{lane.name} {outcome(lane)}" for lane in every),
        flush=True,
    )
    failures = [lane.code or 1 for lane in every if lane.code is not None and lane.failed]
    return failures[0] if failures else 1 if any(lane.code is None for lane in every) else 0  # a lane that never ran


def outcome(lane: Lane) -> str:
    if lane.code is None:
        return "not run"
    return f"{'FAILED' if lane.failed else 'passed'} ({lane.seconds:.0f} s)"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
