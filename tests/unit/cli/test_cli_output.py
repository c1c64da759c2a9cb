"""cli/output.py: JSON and YAML for scripts (keys in the order given, anything else as its text), tables whose cells
are plain text (never rich markup), and the status view of a trial: its header, roles and workers."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime

import pytest
import yaml
from rich.console import Console, RenderableType
from rich.text import Text

from areal_workers.cli import output
from areal_workers.cli.status_view import RoleRow, TrialStatus, WorkerRow

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def rendered(renderable: RenderableType) -> str:
    """The text a terminal 200 columns wide shows, without colours."""
    out = Console(file=io.StringIO(), width=200, color_system=None, highlight=False)
    out.print(renderable)
    return out.file.getvalue()  # type: ignore[attr-defined]


def lines(renderable: RenderableType) -> list[str]:
    return [line.rstrip() for line in rendered(renderable).splitlines()]


def worker_row(index: int, ready: bool = True, **fields: object) -> WorkerRow:
    defaults: dict[str, object] = {
        "id": f"actor/{index}",
        "role": "actor",
        "index": index,
        "pod": f"aw-t-actor-{index}",
        "ready": ready,
        "state": "Running",
        "restarts": 0,
        "node": "gpu-1",
        "ip": f"127.30.0.{index + 1}",
        "ports": ["8000", "8001"],
        "age_seconds": 3700,
    }
    return WorkerRow(**{**defaults, **fields})  # type: ignore[arg-type]


def trial(**fields: object) -> TrialStatus:
    defaults: dict[str, object] = {
        "release": "aw-exp-t-1a2b3c4d",
        "experiment": "exp",
        "trial": "t",
        "revision": 3,
        "helm_status": "deployed",
        "ready_revision": None,
        "roles": [RoleRow("actor", "role", None, 2, 1)],
        "workers": [worker_row(0), worker_row(1, ready=False, state="Pending", reason="Unschedulable")],
    }
    return TrialStatus(**{**defaults, **fields})  # type: ignore[arg-type]


# --- emit -------------------------------------------------------------------------------------------------


def test_json_keeps_the_key_order_and_writes_other_values_as_their_text(capsys):
    output.emit({"z": 1, "a": [WHEN, (1, 2)], "m": None}, "json")
    printed = capsys.readouterr().out
    assert printed == json.dumps({"z": 1, "a": [str(WHEN), [1, 2]], "m": None}, indent=2) + "\n"
    assert list(json.loads(printed)) == ["z", "a", "m"]


def test_yaml_keeps_the_key_order_and_holds_only_plain_values(capsys):
    output.emit({"z": {"b": 1, "a": 2}, "when": WHEN, "pair": (1, "x")}, "yaml")
    printed = capsys.readouterr().out
    assert printed.splitlines()[:3] == ["z:", "  b: 1", "  a: 2"]
    # A datetime goes out as the text JSON gives it, never as a YAML timestamp or a Python object tag.
    assert yaml.safe_load(printed) == {"z": {"b": 1, "a": 2}, "when": str(WHEN), "pair": [1, "x"]}
    assert "!!" not in printed and printed.endswith("\n") and not printed.endswith("\n\n")


# --- console and table ------------------------------------------------------------------------------------


def test_the_console_writes_to_the_stream_asked_for_without_highlighting_or_a_fixed_width_off_a_terminal():
    out, err = output.console(), output.console(stderr=True)
    assert not out.stderr and err.stderr
    assert out.width == output.UNLIMITED_WIDTH  # pytest's captured stdout is no terminal
    assert not out.soft_wrap and not out.is_terminal


def test_a_table_off_a_terminal_is_neither_padded_nor_folded_to_a_width(capsys):
    """Piped to a file, a line is as long as its content (it was padded, and cut, at 200 columns)."""
    long_detail = "the admission policy refuses this identity " * 6  # 258 characters
    made = output.table(["", "CHECK", "DETAIL"], [["pass", "permissions", long_detail], ["warn", "gpu", "short"]])
    output.console().print(made)
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[:2] for line in printed] == [["CHECK", "DETAIL"], ["pass", "permissions"], ["warn", "gpu"]]
    assert printed[1].endswith(long_detail.rstrip()) and printed[2].endswith("gpu          short")
    assert all(line == line.rstrip() for line in printed)


def test_a_table_has_its_columns_title_and_rows_with_cells_as_plain_text():
    made = output.table(["NAME", "COUNT"], [["a", 1], ["[bold]b[/bold]", None]], title="things")
    assert made.title == "things"
    assert [column.header for column in made.columns] == ["NAME", "COUNT"]
    text = lines(made)
    assert text[0] == "things"
    assert text[1].split() == ["NAME", "COUNT"]
    # Cells are str() of the value: rich markup in a value is shown as is, None as "None".
    assert text[2].split() == ["a", "1"] and text[3].split() == ["[bold]b[/bold]", "None"]


def test_a_text_cell_keeps_its_style():
    made = output.table(["READY"], [[Text("yes", style="green")], ["no"]])
    cells = list(made.columns[0].cells)
    assert isinstance(cells[0], Text) and cells[0].style == "green"
    assert isinstance(cells[1], Text) and str(cells[1]) == "no" and not cells[1].style


# --- the status view --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ready", "fatal", "text", "style"),
    [
        (True, False, "yes", "green"),
        (True, True, "yes", "green"),
        (False, False, "no", "yellow"),
        (False, True, "FAILED", "red"),
    ],
)
def test_a_workers_readiness_in_words_and_colour(ready, fatal, text, style):
    shown = output._ready_text(ready, fatal)
    assert (str(shown), shown.style) == (text, style)


def test_the_header_names_the_trial_its_revision_and_how_many_workers_are_ready():
    text = lines(output.trial_renderable(trial(ready_revision=2, trainer="trainer laptop/1 renewing")))
    assert text[0] == (
        "aw-exp-t-1a2b3c4d  experiment exp, trial t · revision 3 (deployed), last all-ready revision 2 · "
        "1/2 workers ready"
    )
    assert text[1] == "trainer laptop/1 renewing"


@pytest.mark.parametrize(
    ("fields", "revision_text"),
    [
        ({}, "revision 3 (deployed) · "),
        ({"revision": None, "helm_status": "applied without helm"}, "applied without helm · "),
        ({"revision": None, "helm_status": "deployed", "roles": [], "workers": []}, "not installed · "),
    ],
)
def test_the_revision_is_helms_the_status_of_a_release_without_one_or_not_installed(fields, revision_text):
    header = lines(output.trial_renderable(trial(**fields)))[0]
    assert revision_text in header and "last all-ready" not in header


def test_without_a_trainer_the_header_is_one_line_followed_by_a_blank_one():
    text = lines(output.trial_renderable(trial()))
    assert text[1] == "" and text[2].split() == ["ROLE", "KIND", "TARGET", "READY"]


def test_the_roles_and_workers_tables_show_each_row_with_dashes_for_what_is_missing():
    roles = [RoleRow("actor", "role", None, 2, 1), RoleRow("gen", "fork (process)", "actor", 2, 2)]
    workers = [
        worker_row(0),
        worker_row(1, ready=False, fatal=True, state="CrashLoopBackOff", restarts=4, reason="exit code 1"),
        worker_row(2, ready=False, pod=None, node=None, ip=None, state="Missing", age_seconds=None),
    ]
    text = lines(output.trial_renderable(trial(roles=roles, workers=workers)))
    assert ["actor", "role", "-", "1/2"] in [line.split() for line in text]
    assert ["gen", "fork", "(process)", "actor", "2/2"] in [line.split() for line in text]
    rows = {line.split()[0]: line.split() for line in text if line.startswith("actor/")}
    assert rows["actor/0"] == ["actor/0", "aw-t-actor-0", "yes", "Running", "0", "gpu-1", "127.30.0.1:8000,8001", "1h"]
    assert rows["actor/1"][2:5] == ["FAILED", "CrashLoopBackOff", "4"] and rows["actor/1"][-3:] == ["exit", "code", "1"]
    assert rows["actor/2"] == ["actor/2", "-", "no", "Missing", "0", "-", "-", "-"]


def test_no_trials_say_so_with_their_namespace():
    assert lines(output.status_renderable("rl", [])) == ["no areal-workers trial in namespace rl"]


def test_several_trials_are_shown_in_order_a_blank_line_apart():
    first, second = trial(release="aw-a"), trial(release="aw-b", workers=[])
    text = lines(output.status_renderable("rl", [first, second]))
    headers = [i for i, line in enumerate(text) if line.startswith("aw-")]
    assert [text[i].split()[0] for i in headers] == ["aw-a", "aw-b"]
    assert text[headers[1] - 1] == ""
    assert text[: headers[1] - 1] == lines(output.trial_renderable(first))
