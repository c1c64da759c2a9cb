"""A pytest plugin (`-p lane_census`, with this directory on PYTHONPATH): once collection and every deselection by a
conftest are done, writes each test's id and the names of its markers, as JSON, to the file $LANE_CENSUS."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    markers = {item.nodeid: sorted({mark.name for mark in item.iter_markers()}) for item in session.items}
    Path(os.environ["LANE_CENSUS"]).write_text(json.dumps(markers))
