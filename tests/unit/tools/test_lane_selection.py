"""Which lane runs what (tools/test_lanes.py): the main lane leaves out only files the areal lane runs against
AReaL's real worker server (which hold nothing that checks our stand-in alone) and the files its late half runs, and
the areal lane's two halves run its files once each, so no test stops running when lanes are rebalanced."""

from __future__ import annotations

import pytest

from repo_paths import REPO
from test_lanes import AREAL_FILES, AREAL_ONLY_FILES, LATE_AREAL_FILES, LATE_MAIN_FILES, by_name, lanes

pytestmark = pytest.mark.unit


def files_of(lane: str) -> list[str]:
    return [argument for argument in by_name(lane).arguments if argument.startswith("tests/")]


def test_what_the_main_lane_leaves_out_the_areal_lane_or_the_late_main_lane_runs():
    main = by_name("main")
    left_out = [argument.removeprefix("--ignore=") for argument in main.arguments if argument.startswith("--ignore=")]
    assert left_out == [*AREAL_ONLY_FILES, *LATE_MAIN_FILES]
    assert set(AREAL_ONLY_FILES) <= set(AREAL_FILES) == set(files_of("areal")) | set(files_of("areal-late"))
    assert files_of("main-late") == LATE_MAIN_FILES and by_name("main-late").arguments[-1] == main.arguments[1]


def test_the_areal_lanes_halves_are_disjoint_and_select_alike():
    early, late = by_name("areal"), by_name("areal-late")
    assert not set(files_of("areal")) & set(files_of("areal-late")) and files_of("areal-late") == LATE_AREAL_FILES
    assert early.arguments[-4:] == late.arguments[-4:] and early.environment == late.environment


def test_every_lane_runs_once_and_late_lanes_run_after_the_serial_lane():
    names = [lane.name for phase in lanes() for stream in phase for lane in stream]
    assert len(names) == len(set(names))
    [stream] = [stream for stream in lanes()[1] if stream[0].name == "serial"]
    assert [lane.name for lane in stream][1:-1] == ["helm4", "main-late", "areal-late"]


@pytest.mark.parametrize("path", [*AREAL_ONLY_FILES, *LATE_MAIN_FILES, *LATE_AREAL_FILES])
def test_the_files_named_exist(path):
    assert (REPO / path).is_file()


@pytest.mark.parametrize("path", AREAL_ONLY_FILES)
def test_the_files_left_out_have_no_test_of_the_stand_in_alone(path):
    assert "reference_guard_only" not in (REPO / path).read_text()


@pytest.mark.parametrize("path", [*LATE_MAIN_FILES, *LATE_AREAL_FILES])
def test_no_late_file_shares_a_fixed_name_with_the_serial_node_lane(path):
    """Late files run beside the serial-node lane, whose deployment guide uses namespace rl and pushes the release:
    a late file must neither follow the docs' pages (docs_pages, namespace rl) nor push the chart."""
    text = (REPO / path).read_text()
    assert "docs_pages" not in text and '"rl"' not in text and "push_chart" not in text
