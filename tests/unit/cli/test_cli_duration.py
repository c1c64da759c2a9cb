"""Time-outs of the areal-workers command (cli/duration.py): Go durations as kubectl and helm take them, or plain
seconds; anything else is argparse's usage error (exit 2) listing the accepted forms."""

from __future__ import annotations

import argparse

import pytest

from areal_workers.cli.duration import seconds
from areal_workers.cli.main import build_parser, main


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("600", 600.0),
        ("1.5", 1.5),
        ("0", 0.0),
        ("90s", 90.0),
        ("15m", 900.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        ("500ms", 0.5),
        ("2m0.5s", 120.5),
        ("250us", 250e-6),
        ("1µs", 1e-6),
        ("10ns", 10e-9),
        (" 5m ", 300.0),
    ],
)
def test_go_durations_and_plain_seconds(text, expected):
    assert seconds(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["", "ten", "15 m", "1d", "m", "1.2.3s", "1h-30m", "-5", "-1h", "inf", "nan"])
def test_anything_else_is_refused_with_the_accepted_forms(text):
    with pytest.raises(argparse.ArgumentTypeError, match="90s, 15m, 1h30m or 500ms .* or plain seconds"):
        seconds(text)


@pytest.mark.parametrize(
    ("argv", "dest"),
    [
        (["up", "-f", "job.yaml", "--timeout"], "timeout"),
        (["rollback", "--timeout"], "timeout"),
        (["reap", "--timeout"], "timeout"),
        (["submit", "--start-timeout"], "start_timeout"),
        (["status", "--watch-seconds"], "watch_seconds"),
    ],
)
def test_every_time_out_of_the_command_takes_a_duration(argv, dest, capsys):
    assert getattr(build_parser().parse_args([*argv, "1h30m"]), dest) == 5400.0
    assert getattr(build_parser().parse_args([*argv, "90"]), dest) == 90.0
    with pytest.raises(SystemExit) as usage:
        main([*argv, "ten minutes"])
    assert usage.value.code == 2
    assert "'ten minutes' is not a duration: use a duration such as 90s" in capsys.readouterr().err


def test_defaults_are_durations_too():
    parser = build_parser()
    assert parser.parse_args(["rollback"]).timeout == 600.0 and parser.parse_args(["reap"]).timeout == 300.0
    assert parser.parse_args(["submit"]).start_timeout == 600.0
    assert parser.parse_args(["status"]).watch_seconds is None
