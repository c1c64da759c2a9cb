"""areal-workers: see, debug, roll back and remove AReaL trials' workers on Kubernetes.

Each trial is one Helm release of the areal-workers chart (made by KubernetesScheduler or by helm/Argo CD).
Commands name it with --release, or --experiment and --trial; without them the only trial in the namespace.
The namespace: -n, else AREAL_K8S_NAMESPACE, else the kubeconfig context's, else "default".
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any, cast

import yaml
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from .._version import __version__
from ..config import BUNDLED_CHART
from ..errors import InputError, SchedulerError
from ..release.ownership import UntrustedRevisionError
from .command import Command, Invocation
from .commands import completion, doctor, events, logs, reap, release, render, submit, up, workers
from .output import Format
from .session import (
    EXIT_CLUSTER,
    EXIT_CODES,
    EXIT_INTERRUPTED,
    EXIT_PIPE,
    EXIT_USAGE,
    CliError,
    Selection,
    Session,
    cluster_error,
    make_config,
)

PROGRAM = "areal-workers"
# The commands in the order of the help and the reference page; each module declares its own (cli/command.py).
COMMANDS: tuple[Command, ...] = (
    *workers.COMMANDS,
    *events.COMMANDS,
    *logs.COMMANDS,
    *release.COMMANDS,
    *up.COMMANDS,
    *render.COMMANDS,
    *doctor.COMMANDS,
    *submit.COMMANDS,
    *reap.COMMANDS,
    *completion.COMMANDS,
)
BY_NAME = {command.name: command for command in COMMANDS}
EXAMPLES = {command.name: command.examples for command in COMMANDS}


def _common() -> argparse.ArgumentParser:
    """Options every command takes, before or after its name (SUPPRESS: whichever place set it wins)."""
    common = argparse.ArgumentParser(add_help=False)
    group = common.add_argument_group("cluster and trial")
    group.add_argument("-n", "--namespace", default=argparse.SUPPRESS, help="namespace of the trials")
    group.add_argument("--kubeconfig", default=argparse.SUPPRESS, help="kubeconfig file (default: $KUBECONFIG)")
    group.add_argument("--context", default=argparse.SUPPRESS, help="kubeconfig context")
    group.add_argument("--release", default=argparse.SUPPRESS, help="the trial's helm release")
    group.add_argument("--experiment", default=argparse.SUPPRESS, help="the trial's experiment name")
    group.add_argument("--trial", default=argparse.SUPPRESS, help="the trial name")
    group.add_argument(
        "-o",
        "--output",
        choices=("table", "json", "yaml"),
        default=argparse.SUPPRESS,
        help="output format (default: table)",
    )
    return common


def version_line() -> str:
    """The package's version and that of the chart it carries (equal in a release; a checkout may differ)."""
    chart = yaml.safe_load((BUNDLED_CHART / "Chart.yaml").read_text())
    return f"{PROGRAM} {__version__} (chart {chart['name']} {chart['version']}, for AReaL {chart['appVersion']})"


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    codes = "\n".join(f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())
    parser = argparse.ArgumentParser(
        prog=PROGRAM,
        description=__doc__,
        parents=[common],
        epilog=f"exit codes:\n{codes}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=version_line())
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for declared in COMMANDS:
        sub = commands.add_parser(
            declared.name,
            help=declared.summary,
            description=declared.summary,
            parents=[common],
            epilog="examples:\n" + declared.examples,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        declared.arguments(sub)
    return parser


def _session(args: argparse.Namespace) -> Session:
    overrides: dict[str, Any] = {}
    if getattr(args, "values", None):
        overrides["values_files"] = tuple(args.values)
    if getattr(args, "chart", None):
        overrides["chart"] = args.chart
    if getattr(args, "capacity_check", None):
        overrides["capacity_check"] = args.capacity_check
    config = make_config(
        getattr(args, "namespace", None), getattr(args, "kubeconfig", None), getattr(args, "context", None), **overrides
    )
    return Session(
        config,
        Selection(getattr(args, "release", None), getattr(args, "experiment", None), getattr(args, "trial", None)),
    )


def dispatch(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    fmt = cast(Format, getattr(args, "output", "table"))  # one of --output's choices
    command = BY_NAME[args.command]
    if not command.uses_cluster:
        return command.run(Invocation(args, fmt, parser))
    session = _session(args)
    try:
        return command.run(Invocation(args, fmt, parser, session))
    except BrokenPipeError:  # stdout's reader is gone (a ConnectionError, but not the cluster's): main ends quietly
        raise
    except (ApiException, HTTPError, ConnectionError) as error:  # a request no command caught: its cause named
        raise session.cluster_error(error, args.command) from None
    finally:
        session.close()


def main(argv: Sequence[str] | None = None) -> int:
    logging.getLogger("pyhelm3").setLevel(logging.ERROR)  # its "command failed" warnings: the CLI reports failures
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = _run(args, parser)
        sys.stdout.flush()  # a reader gone shows here, not in the interpreter's last flush (a warning, exit 120)
    except BrokenPipeError:
        # Nothing more can be shown; /dev/null takes what is still buffered, so the exit is quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    return code


def _run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The command, its failures as a message on stderr and an exit code."""
    try:
        return dispatch(args, parser)
    except BrokenPipeError:  # stdout's reader is gone (| head), not the cluster's connection: main ends quietly
        raise
    except CliError as error:
        print(f"error: {error}", file=sys.stderr)
        return error.exit_code
    except InputError as error:  # a submit or job file the product's parsers refused
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except UntrustedRevisionError as error:  # a recorded revision not the chart's, refused before helm acted on it
        print(f"error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except SchedulerError as error:  # from the adapter's release driver: helm's message included
        print(f"error: {error}", file=sys.stderr)
        return EXIT_CLUSTER
    except (ApiException, HTTPError, ConnectionError) as error:
        print(f"error: {cluster_error(error, args.command)}", file=sys.stderr)
        return EXIT_CLUSTER
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
