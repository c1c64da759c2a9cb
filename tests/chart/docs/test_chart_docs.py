"""The values table of the chart's README is what tools/docgen/chart.py generates from values.yaml and
values.schema.json, and the generator refuses a value without a description. (The same rows in
docs/*/configuration.md: tests/unit/docs/test_config_docs.py.)"""

from __future__ import annotations

import copy
import difflib
import json

import pytest

import docgen.chart as chart_docs
from chartlib import CHART, REPO
from docgen.chart import REGENERATE, ChartDocsError, flow, rows

VALUES = (CHART / "values.yaml").read_text()
SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def test_the_committed_tables_are_the_generated_ones():
    stale = []
    for path, expected in chart_docs.expected_files().items():
        actual = path.read_text()
        if actual != expected:
            diff = difflib.unified_diff(
                actual.splitlines(), expected.splitlines(), str(path.relative_to(REPO)), "generated", lineterm="", n=0
            )
            stale.append("\n".join(list(diff)[:30]))
    assert not stale, f"values tables out of date; run {REGENERATE}\n" + "\n\n".join(stale)


def test_every_value_is_a_row_with_its_default():
    table = {row.key: row for row in rows(VALUES, SCHEMA)}
    assert table["workerDefaults.resources.cpu"].default == '`"1"`'
    assert table["workerDefaults.command"].default == "`[python, -m, areal.infra.rpc.rpc_server]`"
    assert table["networkPolicy.controller.podSelector.matchLabels"].default == '`{areal.io/controller: "true"}`'
    assert table["image.pullPolicy"].type == "string: `Always`, `IfNotPresent`, `Never`"
    assert table["workerDefaults.probes.startup.failureThreshold"].description.startswith("*role* ")
    assert table["roles.<name>.replicas"].default == "required"
    assert [key for key in table if key.startswith("forks.<name>.")] == [
        f"forks.<name>.{name}" for name in SCHEMA["definitions"]["fork"]["properties"]
    ]


def with_value(line: str, comment: str = "") -> str:
    """values.yaml with one more top-level value (and its comment lines) before `serviceAccount:`."""
    return VALUES.replace("\nserviceAccount:\n", f"\n{comment}{line}\n\nserviceAccount:\n", 1)


def schema_with(name: str, node: dict) -> dict:
    schema = copy.deepcopy(SCHEMA)
    schema["properties"][name] = node
    return schema


@pytest.mark.parametrize(
    "comment", ["", "# A plain comment is for maintainers, not a description.\n"], ids=["no comment", "plain comment"]
)
def test_an_undocumented_value_is_refused(comment):
    with pytest.raises(ChartDocsError, match=r"newValue: no `# -- description` comment"):
        rows(with_value("newValue: 3", comment), schema_with("newValue", {"type": "integer"}))


def test_a_documented_new_value_becomes_a_row():
    table = rows(
        with_value("newValue: 3", "# -- What it does.\n# @default -- three\n"),
        schema_with("newValue", {"type": "integer", "minimum": 1}),
    )
    assert [row for row in table if row.key == "newValue"] == [
        chart_docs.Row("newValue", "integer (>= 1)", "three", "What it does.")
    ]


def test_a_value_the_schema_does_not_know_is_refused():
    with pytest.raises(ChartDocsError, match="newValue, which the schema does not know"):
        rows(with_value("newValue: 3", "# -- What it does.\n"), SCHEMA)


def test_a_per_fork_key_of_the_schema_needs_a_description():
    schema = copy.deepcopy(SCHEMA)
    schema["definitions"]["fork"]["properties"]["priority"] = {"type": "integer"}
    with pytest.raises(ChartDocsError, match=r"forks.<name>.priority: no `# forks.<name>.priority -- description`"):
        rows(VALUES, schema)


def test_a_description_of_a_key_that_does_not_exist_is_refused():
    values = VALUES.replace("# forks.<name>.target --", "# forks.<name>.targt --", 1)
    with pytest.raises(ChartDocsError) as refused:
        rows(values, SCHEMA)
    assert "forks.<name>.targt: documented in values.yaml, but the schema has no such key" in str(refused.value)
    assert "forks.<name>.target: no `# forks.<name>.target -- description`" in str(refused.value)


@pytest.mark.parametrize(
    "value,text",
    [
        ("", '""'),
        ("1", '"1"'),
        ("true", '"true"'),
        ("localhost:2379", "localhost:2379"),
        ("a: b", '"a: b"'),
        (True, "true"),
        (None, "null"),
        (0, "0"),
        ({"a": ["-m", "x y"]}, "{a: [-m, x y]}"),
        ([], "[]"),
    ],
)
def test_defaults_are_shown_as_yaml_flow_text(value, text):
    assert flow(value) == text
