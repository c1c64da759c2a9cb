"""Which lane of `make test` runs a test comes from the test's markers alone (tools/test_lanes.py): each lane is a
`-m` expression and an environment, no lane names a file, and, over the whole suite as collected in each lane's
environment, every test runs in exactly one lane of its own and again only in the lanes a marker of its declares
(REPEATS), so renaming or adding a file cannot move a test out of every lane or into two."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest

# pytest's own evaluator of `-m` expressions, so the lanes here select exactly as pytest would.
from _pytest.mark.expression import Expression

from repo_paths import REPO
from test_lanes import INTEGRATION_TESTS, PYTEST, Lane, before, every_lane, lanes, may_overlap

pytestmark = pytest.mark.unit

# The markers that run a test again, beside its own lane, and the lanes they run it in.
REPEATS = {"both_workers": {"areal", "areal-late"}, "helm4": {"helm4"}}
Census = dict[str, list[str]]  # test id -> the names of its markers


def censuses(environments: list[dict[str, str]], directory: Path) -> list[Census]:
    """The suite collected in each environment (side by side), as lane_census records it: the whole suite in the
    first, the integration tests in the others (a lane's environment changes only what the integration conftest
    deselects)."""
    lane_variables = {name for lane in every_lane() for name in lane.environment}
    base = {name: value for name, value in os.environ.items() if name not in lane_variables}
    runs = []
    for index, environment in enumerate(environments):
        output = directory / f"census-{index}.json"
        pythonpath = os.pathsep.join([str(Path(__file__).parent), base.get("PYTHONPATH", "")])
        command = [str(PYTEST), "--collect-only", "-q", "-p", "lane_census", "-p", "no:cacheprovider"]
        command += ["tests/integration"] if index else []
        env = {**base, **environment, "LANE_CENSUS": str(output), "PYTHONPATH": pythonpath}
        runs.append((output, subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, text=True)))
    found = []
    for output, run in runs:
        stdout, _ = run.communicate(timeout=300)
        assert run.returncode == 0, stdout[-3000:]
        found.append(json.loads(output.read_text()))
    return found


def environment_of(lane: Lane) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(lane.environment.items()))


def selects(lane: Lane, markers: list[str]) -> bool:
    return Expression.compile(lane.selection).evaluate(lambda name, **kwargs: name in markers and not kwargs)


def collects(lane: Lane, test: str) -> bool:
    """Whether the lane's pytest collects the test: those of INTEGRATION_TESTS alone where it says so."""
    return not lane.collection() or test.startswith(f"{INTEGRATION_TESTS}/")


@pytest.fixture(scope="module")
def lanes_of(tmp_path_factory) -> dict[str, tuple[list[str], set[str]]]:
    """Every test of the suite: its markers and the lanes that run it."""
    environments = sorted({environment_of(lane) for lane in every_lane()} - {()})
    [suite, *integration] = censuses([{}, *map(dict, environments)], tmp_path_factory.mktemp("census"))
    outside = {test: markers for test, markers in suite.items() if not test.startswith("tests/integration/")}
    found = {(): suite} | {key: outside | census for key, census in zip(environments, integration, strict=True)}
    tests: dict[str, tuple[list[str], set[str]]] = {}
    for lane in every_lane():
        for test, markers in found[environment_of(lane)].items():
            tests.setdefault(test, (markers, set()))
            if selects(lane, markers) and collects(lane, test):
                tests[test][1].add(lane.name)
    return tests


def test_a_lane_is_a_marker_expression_of_registered_markers_and_names_no_file():
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    registered = {line.split(":")[0] for line in pyproject["tool"]["pytest"]["ini_options"]["markers"]}
    for lane in every_lane():
        parallel = ["-n", str(lane.workers), "--dist", "loadfile"] if lane.workers > 1 else []
        expected = [str(PYTEST), "-m", lane.selection, *parallel, *lane.collection(), f"--junitxml={lane.junit}"]
        assert lane.command([]) == expected
        unregistered = set(Expression.compile(lane.selection).idents()) - registered
        assert not unregistered, f"lane {lane.name}: {unregistered}"


def test_every_test_runs_in_one_lane_of_its_own_and_again_only_where_a_marker_says(lanes_of):
    wrong = []
    for test, (markers, ran) in sorted(lanes_of.items()):
        repeats = [REPEATS[marker] for marker in markers if marker in REPEATS]
        own = ran - set().union(*repeats)
        if len(own) != 1 or any(len(ran & lanes) > 1 for lanes in repeats):
            wrong.append(f"{test}: {sorted(ran) or 'in no lane'} (markers {markers})")
    assert not wrong, "\n".join(wrong[:40])
    assert len(lanes_of) > 2000  # the whole suite, not a collection that stopped early


def test_the_suite_has_tests_run_twice_by_declaration(lanes_of):
    """The rule above allows what REPEATS declare; the markers are in use, and do repeat (else the rule is idle)."""
    scheduler = [ran for test, (_, ran) in lanes_of.items() if test.startswith("tests/integration/test_scheduler.py")]
    assert {"main", "areal", "helm4"} in scheduler and {"main"} in scheduler  # declared thrice, and once


def test_a_test_on_the_real_node_is_in_the_real_node_stream(lanes_of):
    """A trial parametrized onto the real node (`[real]`) shares its few cores with the serial-node lane: it runs
    there, not beside it."""
    real = {
        test: ran for test, (_, ran) in lanes_of.items() if test.startswith("tests/integration/") and "[real]" in test
    }
    assert real and all(ran == {"serial-node"} for ran in real.values()), real


def test_every_lane_runs_once_after_lanes_that_exist():
    every = lanes()
    names = [lane.name for lane in every_lane()]
    assert len(names) == len(set(names))
    cluster = {lane.name for lane in every}
    for lane in every:
        assert set(lane.after) <= cluster and lane.name not in before(lane.name, every), lane.name


def test_no_cluster_lane_runs_beside_the_serial_lane_but_the_real_node_tests():
    """The serial lane changes KWOK nodes and GPU capacity under any test beside it; the real-node tests pin their
    workers to the real node, and the offline lane uses no cluster."""
    every = lanes()
    beside = {lane.name for lane in every if may_overlap("serial", lane.name, every)}
    assert beside == {"serial-node-names", "serial-node", "offline"}


# What tests in different namespaces of their own still share, and the text that shows a test file uses it: the docs'
# pages, which apply the namespace rl (run_script; the deployment guide's test runs them too), the chart in the local
# registry (pushed by distkit's publisher, or by `make release REGISTRY=...`), the demo's namespace.
SHARED_BY = {
    "the docs' pages": ("run_script",),
    "the registry's chart": ("push_chart", '"release", f"REGISTRY='),
    "the demo's namespace": ("bandit-demo", "DEMO_NAMESPACE"),
}


def test_no_two_lanes_that_may_overlap_use_the_same_fixed_name(lanes_of):
    """Two lanes that may run at once must not both hold files that follow the docs' pages, push the chart or use the
    demo's namespace: the real-node tests that do are `fixed_names` (lane serial-node-names), the others `late`
    (main-late, which comes after serial-node-names)."""
    every = lanes()
    cluster = {lane.name for lane in every}
    names_of: dict[str, set[str]] = {}
    for test, (_, ran) in lanes_of.items():
        text = (REPO / test.split("::")[0]).read_text()
        for lane in ran & cluster:
            names_of.setdefault(lane, set()).update(
                shared for shared, marks in SHARED_BY.items() if any(mark in text for mark in marks)
            )
    clashes = [
        (first, second, names_of[first] & names_of[second])
        for first in names_of
        for second in names_of
        if first < second and may_overlap(first, second, every) and names_of[first] & names_of[second]
    ]
    assert not clashes, clashes
    assert set(SHARED_BY) <= names_of["serial-node-names"]
    assert {"the docs' pages", "the registry's chart"} <= names_of["main-late"]
    assert may_overlap("main-late", "serial-node", every)  # it waits only for the real-node tests it shares names with


def test_an_extra_mark_expression_narrows_every_lanes_own():
    lane = Lane("main", "integration and not late")
    assert lane.command(["-x", "-m", "not slow", "-mfast or quick", "-k", "name"]) == [
        str(PYTEST),
        "-m",
        "(integration and not late) and (not slow) and (fast or quick)",
        "-o",
        f"testpaths={INTEGRATION_TESTS}",
        "-x",
        "-k",
        "name",
        f"--junitxml={lane.junit}",
    ]
    with pytest.raises(SystemExit, match="-m without an expression"):
        lane.command(["-m"])
