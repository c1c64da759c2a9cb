"""What a command of `areal-workers` is: its name, help, arguments, examples and handler, declared by its own module
in cli/commands/ and collected by cli/main.py, which builds the parser and dispatches from them."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from . import duration
from .output import Format
from .session import Session

DURATION = "a duration as kubectl and helm take it: 90s, 15m, 1h30m; or plain seconds"
# How a job file's names and the command line's combine (up and render alike).
NAMES_AGREE = (
    "--experiment and --trial fill in names the file leaves out; one that differs from the file's is refused (exit 2)"
)
FORCE_HELP = (
    "also when the trial's trainer is alive: take its Lease at once (the trainer stops writing and raises "
    "LeaseLostError at its next call)"
)


@dataclass(frozen=True)
class Invocation:
    """One parsed command line, as a handler gets it."""

    args: argparse.Namespace
    fmt: Format
    parser: argparse.ArgumentParser
    opened: Session | None = None

    @property
    def session(self) -> Session:
        if self.opened is None:
            raise AssertionError(f"{self.args.command} is declared without a session")
        return self.opened


def no_arguments(parser: argparse.ArgumentParser) -> None:
    """A command with only the global options."""


@dataclass(frozen=True)
class Command:
    name: str
    summary: str  # the subcommand's help and description
    examples: str
    run: Callable[[Invocation], int]
    arguments: Callable[[argparse.ArgumentParser], None] = no_arguments
    uses_cluster: bool = True  # False: no configuration is read and no client made (completion)


def duration_option(parser: argparse.ArgumentParser, name: str, default: str | None, what: str) -> None:
    """An option taking a duration; `what` is the help text before the accepted forms."""
    suffix = f"; default {default}" if default else ""
    parser.add_argument(
        name, type=duration.seconds, metavar="DURATION", default=default, help=f"{what} ({DURATION}{suffix})"
    )


def chart_options(parser: argparse.ArgumentParser) -> None:
    """--values and --chart: the commands that render or apply the chart."""
    parser.add_argument(
        "--values",
        action="append",
        default=[],
        metavar="FILE",
        help="values file under the adapter's values (repeatable)",
    )
    parser.add_argument("--chart", default=None, help="chart directory or reference (default: the bundled one)")
