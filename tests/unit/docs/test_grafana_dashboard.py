"""The Grafana dashboard (examples/grafana-dashboard.json) queries only what the scheduler exports: every metric name
in a panel's or variable's PromQL is one runtime/metrics.py's registry exposes, and every label a query matches or
groups by is one of that metric's labels."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from areal_workers.errors import WorkerTimeoutError
from areal_workers.runtime import metrics

DASHBOARD = Path(__file__).resolve().parents[3] / "examples" / "grafana-dashboard.json"
# A metric selector (a name followed by its label matchers) and the names inside label_values(); functions and
# aggregations are followed by "(" and never match.
SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
LABEL_VALUES = re.compile(r"label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def panels() -> list[dict]:
    found = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        found += [panel, *panel.get("panels", [])]
    return found


def queries() -> list[tuple[str, str]]:
    """(where, PromQL) of every panel target and every query variable."""
    dashboard = json.loads(DASHBOARD.read_text())
    found = [(f"panel {p['title']!r}", t["expr"]) for p in panels() for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            found.append((f"variable {variable['name']}", query["query"] if isinstance(query, dict) else query))
    return found


def exported() -> tuple[set[str], dict[str, set[str]]]:
    """The series names the registry exposes, and the labels of each, from a registry where every hook counted once
    and the release's state has a value of each kind."""
    observer = metrics.PrometheusObserver("aw-x")
    state = metrics.ReleaseState(desired={"actor": 1}, ready={"actor": 1}, revision=2, ready_revision=2, lease_age=1.0)
    observer.registry.register(metrics.StateCollector("aw-x", lambda: state))
    observer.waited("get_workers", "actor", "ok", 1.0)
    observer.rolled_back("rolled_back", WorkerTimeoutError("actor", 1))
    observer.worker_failed("actor", WorkerTimeoutError("actor", 1))
    observer.guard_request("/call", 0.1, "timeout")
    labels: dict[str, set[str]] = {}
    for family in observer.registry.collect():
        for sample in family.samples:
            labels.setdefault(sample.name, set()).update(sample.labels)
    assert set(labels) <= observer.metric_names()
    return set(labels), labels


def test_the_dashboard_is_importable_json_with_its_datasource_as_a_variable():
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "areal-workers" and dashboard["panels"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert "__inputs" not in dashboard  # no import-time question: the datasource is chosen on the dashboard
    ids = [p["id"] for p in panels()]
    assert len(ids) == len(set(ids))


def test_every_panel_queries_something():
    for panel in panels():
        if panel["type"] != "row":
            assert panel.get("targets"), panel["title"]


@pytest.mark.parametrize(("where", "expr"), queries())
def test_every_query_names_only_exported_metrics_and_their_labels(where, expr):
    names, labels = exported()
    selectors = SELECTOR.findall(expr) + [(name, f"{label}=") for name, label in LABEL_VALUES.findall(expr)]
    assert selectors, f"{where}: no metric selector in {expr!r}"
    used = set()
    for name, matchers in selectors:
        assert name in names, f"{where}: {name} is not exported (exported: {sorted(names)})"
        used |= labels[name]
        unknown = set(MATCHER.findall(matchers)) - labels[name]
        assert not unknown, f"{where}: {name} has no label(s) {sorted(unknown)}"
    for group in GROUPING.findall(expr):
        unknown = {label.strip() for label in group.split(",") if label.strip()} - used
        assert not unknown, f"{where}: grouped by {sorted(unknown)}, which no metric of the query has"


def test_the_dashboard_shows_every_metric_the_scheduler_exports():
    names, _ = exported()
    shown = {name for _, expr in queries() for name, _ in SELECTOR.findall(expr)}
    families = {re.sub(r"_(bucket|count|sum|created|total)$", "", name) for name in names}
    assert families == {re.sub(r"_(bucket|count|sum|created|total)$", "", name) for name in shown}
