"""Whether a helm release is one of this chart's: checked before anything that uninstalls, rolls back, upgrades or
deletes, since helm's release names are shared by every chart of the namespace (pure)."""

from __future__ import annotations

from .. import naming

__all__ = ["foreign_chart_problem"]


def foreign_chart_problem(release: str, namespace: str, chart: str | None, revision: int | None = None) -> str | None:
    """Why the release must be left alone, or None when its current revision (or `revision`, the one it would
    return to) is of this chart. `chart`: the chart name helm recorded for it (`Chart.yaml`'s name); None: helm has
    no release of that name."""
    if chart is None or chart == naming.CHART_NAME:
        return None
    what = f"release {release}" if revision is None else f"revision {revision} of release {release}"
    return (
        f"{what} in namespace {namespace} is a release of chart {chart!r}, not {naming.CHART_NAME!r}: "
        f"areal-workers changes only releases of its own chart"
    )
