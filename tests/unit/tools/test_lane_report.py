"""What tools/test_lanes.py reads from a lane's JUnit report: its slowest test files, and its skipped tests, which
fail the lane."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

import test_lanes
from test_lanes import Lane, skipped_tests, slowest_files

pytestmark = pytest.mark.unit

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest">
<testcase classname="tests.integration.test_demo" name="test_a" time="120.5"/>
<testcase classname="tests.integration.test_demo" name="test_b" time="30"/>
<testcase classname="tests.chart.test_render.TestNames" name="test_c[x.y]" time="100"/>
<testcase classname="tests.unit.test_naming" name="test_d" time="0.2"/>
<testcase classname="tests.unit.test_naming" name="test_e"/>
</testsuite></testsuites>
"""


def test_files_are_summed_and_ordered_by_time(tmp_path: Path):
    junit = tmp_path / "main.xml"
    junit.write_text(JUNIT)
    assert slowest_files(junit, count=2) == [
        ("tests/integration/test_demo.py", 150.5),
        ("tests/chart/test_render.py", 100.0),
    ]
    assert slowest_files(junit)[-1] == ("tests/unit/test_naming.py", 0.2)


def test_a_lane_that_wrote_no_report_has_no_slowest_files(tmp_path: Path):
    assert slowest_files(tmp_path / "absent.xml") == []


def test_the_skipped_tests_of_a_report_are_named_with_their_reasons(tmp_path: Path):
    passed, skipped = tmp_path / "passed.xml", tmp_path / "skipped.xml"
    passed.write_text(JUNIT)
    skipped.write_text(
        JUNIT.replace(
            '<testcase classname="tests.unit.test_naming" name="test_e"/>',
            '<testcase classname="tests.unit.test_naming" name="test_e[x]"><skipped message="no bash"/></testcase>',
        )
    )
    assert skipped_tests(passed) == []
    assert skipped_tests(skipped) == ["tests/unit/test_naming.py::test_e[x]: no bash"]


TESTS = """import pytest

def test_kept():
    pass

@pytest.mark.other
def test_left_out_by_the_lane():
    pass

@pytest.mark.slow
def test_skipped():
    pytest.skip("needs what this machine lacks")
"""


@pytest.fixture
def tiny_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A suite of its own (its own ini, so no conftest of this repository) where lanes run, their reports in it."""
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    other\n    slow\n")
    (tmp_path / "test_tiny.py").write_text(TESTS)
    monkeypatch.setattr(test_lanes, "REPO", tmp_path)
    monkeypatch.setattr(test_lanes, "LOGS", tmp_path / "lanes")
    return tmp_path


def test_a_lane_that_skips_a_test_fails_and_names_it(tiny_suite: Path):
    lane = Lane("tiny", "not other")
    with (tiny_suite / "out.log").open("w") as out:
        assert lane.run([], out) is False
    assert lane.code == 0 and lane.failed
    assert lane.skipped == ["test_tiny.py::test_skipped: needs what this machine lacks"]


def test_an_extra_mark_expression_narrows_the_lanes_own_selection(tiny_suite: Path):
    lane = Lane("tiny", "not other")
    with (tiny_suite / "out.log").open("w") as out:
        assert lane.run(["-m", "not slow"], out) is True
    assert [case.get("name") for case in ElementTree.parse(lane.junit).iter("testcase")] == ["test_kept"]


def test_the_lane_mode_fails_on_a_skipped_test_too(tiny_suite: Path, monkeypatch, capfd):
    monkeypatch.setattr(test_lanes, "lanes", lambda: [Lane("tiny", "not other")])
    assert test_lanes.main(["--lane", "tiny"]) == 1
    assert "test_tiny.py::test_skipped: needs what this machine lacks" in capfd.readouterr().out
    assert test_lanes.main(["--lane", "tiny", "-m", "not slow"]) == 0


def test_a_lane_left_empty_by_the_extra_arguments_passes_but_an_empty_lane_fails(tiny_suite: Path):
    lane = Lane("tiny", "other")
    with (tiny_suite / "out.log").open("w") as out:
        assert lane.run(["-m", "slow"], out) is True
        empty = Lane("empty", "other and slow")
        assert empty.run([], out) is False and empty.code == test_lanes.NO_TESTS_COLLECTED


def test_a_lane_of_integration_tests_imports_no_other_test_module_unless_named(tiny_suite: Path, monkeypatch):
    (tiny_suite / "pytest.ini").write_text("[pytest]\nmarkers =\n    integration\n    other\n    slow\n")
    (tiny_suite / "cluster").mkdir()
    (tiny_suite / "cluster" / "test_on_cluster.py").write_text(
        "import pytest\n\npytestmark = pytest.mark.integration\n\ndef test_on_cluster():\n    pass\n"
    )
    (tiny_suite / "test_broken.py").write_text("raise ImportError('imported by a lane that cannot select it')\n")
    monkeypatch.setattr(test_lanes, "INTEGRATION_TESTS", "cluster")
    lane = Lane("tiny", "integration and not other")
    with (tiny_suite / "out.log").open("w") as out:
        assert lane.run([], out) is True
        assert [case.get("name") for case in ElementTree.parse(lane.junit).iter("testcase")] == ["test_on_cluster"]
        assert lane.run(["test_broken.py"], out) is False  # a path given in PYTEST_ARGS is collected as given
    assert "imported by a lane that cannot select it" in (tiny_suite / "out.log").read_text()


def test_a_skipped_test_fails_the_run_and_the_lanes_after_it_do_not_run(tiny_suite: Path, monkeypatch, capfd):
    monkeypatch.setattr(
        test_lanes,
        "lanes",
        lambda: [Lane("tiny", "not other"), Lane("beside", "other"), Lane("later", "other", after=("tiny", "beside"))],
    )
    assert test_lanes.main([]) == 1
    out = capfd.readouterr().out
    assert "lane tiny FAILED: it skipped 1" in out and "test_tiny.py::test_skipped" in out
    assert "lane later: not run, after tiny" in out and "CPU busy" in out
    assert re.search(r"lanes in \d+ s: tiny FAILED \(\d+ s\), beside passed \(\d+ s\), later not run$", out.rstrip())


class FakeNode:
    def __init__(self, absence: str) -> None:
        self._absence = absence

    def absence(self) -> str:
        return self._absence


class FakeCluster:
    absence = ""

    def real_node(self) -> FakeNode:
        return FakeNode(self.absence)


def test_without_the_real_node_every_lane_leaves_its_tests_out_and_says_why(monkeypatch, capsys):
    import localkube.cluster

    monkeypatch.setattr(localkube.cluster, "LocalCluster", FakeCluster)
    assert test_lanes.without_the_real_node(["-x"]) == ["-x"]
    assert capsys.readouterr().out == ""

    monkeypatch.setattr(FakeCluster, "absence", "the local cluster runs no real node (NODE=kwok): start it with ...")
    assert test_lanes.without_the_real_node(["-x"]) == ["-x", "-m", "not real_node"]
    assert "real_node tests are left out: the local cluster runs no real node (NODE=kwok)" in capsys.readouterr().out
    serial_node = test_lanes.by_name("serial-node").command(["-x", "-m", "not real_node"])
    assert serial_node[1:3] == [
        "-m",
        "(integration and serial_cluster and real_node and not fixed_names) and (not real_node)",
    ]


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # its traceback, on stderr
def test_a_lane_that_breaks_fails_the_run_and_the_lanes_after_it_do_not_wait_for_it(
    tiny_suite: Path, monkeypatch, capfd
):
    run = Lane.run

    def breaking(self: Lane, extra: list[str], output=None) -> bool:
        if self.name == "boom":
            raise OSError("no space left on device")
        return run(self, extra, output)

    monkeypatch.setattr(Lane, "run", breaking)
    monkeypatch.setattr(
        test_lanes, "lanes", lambda: [Lane("boom", "not other"), Lane("later", "other", after=("boom",))]
    )
    assert test_lanes.main([]) == 1
    out = capfd.readouterr().out
    assert "lane later: not run, after boom" in out and re.search(r"boom not run, later not run$", out.rstrip())
