"""Which lane runs what (tools/test_lanes.py): the main lane leaves out only files the areal lane runs against
AReaL's real worker server, and those hold nothing that checks our stand-in alone, so no test stops running."""

from __future__ import annotations

import pytest

from repo_paths import REPO
from test_lanes import AREAL_FILES, AREAL_ONLY_FILES, by_name

pytestmark = pytest.mark.unit


def test_what_the_main_lane_leaves_out_the_areal_lane_runs():
    main, areal = by_name("main"), by_name("areal")
    left_out = [argument.removeprefix("--ignore=") for argument in main.arguments if argument.startswith("--ignore=")]
    assert left_out == AREAL_ONLY_FILES and set(left_out) <= set(AREAL_FILES) <= set(areal.arguments)


@pytest.mark.parametrize("path", AREAL_ONLY_FILES)
def test_the_files_left_out_have_no_test_of_the_stand_in_alone(path):
    assert "reference_guard_only" not in (REPO / path).read_text()
