"""release/ownership.py: a helm release of another chart is never this adapter's to change (pure)."""

from __future__ import annotations

from pathlib import Path

import yaml

from areal_workers import naming
from areal_workers.release.ownership import foreign_chart_problem

CHART_YAML = Path(naming.__file__).parent / "chart" / "Chart.yaml"


def test_the_chart_name_is_the_one_chart_yaml_gives():
    assert yaml.safe_load(CHART_YAML.read_text())["name"] == naming.CHART_NAME


def test_a_release_of_this_chart_or_no_release_at_all_is_no_problem():
    assert foreign_chart_problem("aw-x", "rl", naming.CHART_NAME) is None
    assert foreign_chart_problem("aw-x", "rl", None) is None


def test_a_release_of_another_chart_is_named_with_its_namespace_and_chart():
    problem = foreign_chart_problem("db", "rl", "postgresql")
    assert problem == (
        "release db in namespace rl is a release of chart 'postgresql', not 'areal-workers': areal-workers changes "
        "only releases of its own chart"
    )


def test_a_revision_of_another_chart_is_named_as_the_revision():
    problem = foreign_chart_problem("db", "rl", "postgresql", revision=1)
    assert problem is not None and problem.startswith("revision 1 of release db in namespace rl is a release of chart")
    assert foreign_chart_problem("db", "rl", naming.CHART_NAME, revision=1) is None
