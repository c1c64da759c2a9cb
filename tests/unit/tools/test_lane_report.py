"""The lane report's slowest test files, read from a lane's JUnit report."""

from __future__ import annotations

from pathlib import Path

import pytest

from test_lanes import slowest_files

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
