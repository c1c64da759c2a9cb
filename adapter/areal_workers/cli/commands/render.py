"""`areal-workers render`: the values and manifests a Job file (AReaL's Job and SchedulingSpec as YAML) or a values
file would produce, without a cluster: the values are built by the scheduler's own functions (release.values,
ReleaseModel) and rendered by `helm template`, which also checks them against the chart's schema."""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any

import yaml

from ... import naming
from ...release.job_file import job_file_values, load_job_file
from ..command import NAMES_AGREE, Command, Invocation, chart_options
from ..output import Format, emit
from ..session import EXIT_OK, EXIT_USAGE, CliError, Session

DEFAULT_NAMES = {"experiment": "experiment", "trial": "trial"}  # render's, when neither a file nor a flag names one


def trial_names(names: dict[str, str], experiment: str | None, trial: str | None, source: str) -> dict[str, str]:
    """The trial's names from `source` (a job or values file) and the command line, which must agree: a flag naming
    another trial than the file is refused rather than either overriding the other, so a command never renders or
    changes a trial its user did not mean."""
    flags = {key: value for key, value in (("experiment", experiment), ("trial", trial)) if value}
    for key, flag in flags.items():
        if names.get(key, flag) != flag:
            raise CliError(
                f"--{key} {flag} conflicts with {key} {names[key]} in {source}: drop --{key}, or change "
                f"{key} in the file",
                EXIT_USAGE,
            )
    return {**names, **flags}


def values_alone(session: Session, experiment: str | None, trial: str | None) -> tuple[dict[str, str], dict[str, Any]]:
    """The values files without a job file, as `helm template -f` renders them: their roles included, and the
    trial's names from the files, the flags or render's defaults."""
    files = ", ".join(session.config.values_files)
    if not files:
        raise CliError("nothing to render: give a job file (-f job.yaml) or values files (--values FILE)", EXIT_USAGE)
    values = copy.deepcopy(session.releases.file_values)
    if not values.get("roles"):
        raise CliError(
            f"{files}: no roles (a values file alone renders the roles under its roles: key, e.g. roles: "
            f"{{actor: {{replicas: 2}}}}); add roles there, or render a job file with -f",
            EXIT_USAGE,
        )
    names = {key: str(values[key]) for key in DEFAULT_NAMES if values.get(key)}
    named = {**DEFAULT_NAMES, **trial_names(names, experiment, trial, files)}
    return named, {**values, **named}


def render(
    session: Session, job_file: str | None, experiment: str | None, trial: str | None, show: str, fmt: Format
) -> int:
    if job_file:
        names, jobs = load_job_file(Path(job_file))
        named = {**DEFAULT_NAMES, **trial_names(names, experiment, trial, job_file)}
        values, notes = job_file_values(jobs, session.config, named["experiment"], named["trial"])
        for note in notes:
            print(f"note: {note}", file=sys.stderr)
    else:
        named, values = values_alone(session, experiment, trial)
    release = session.selection.release or naming.release_name(named["experiment"], named["trial"])
    layered = session.releases.layered(values)
    # Rendered for --show values too: helm template is what checks the values against the chart's schema.
    manifests = session.helm(session.releases.render(release, values), "rendering the chart", EXIT_USAGE)
    if show == "values":
        manifests = []
    if fmt != "table":
        emit({"release": release, "namespace": session.namespace, "values": layered, "manifests": manifests}, fmt)
        return EXIT_OK
    if show in ("values", "all"):
        print(f"# values of release {release} (helm get values would show these; values files included)")
        print(yaml.safe_dump(layered, sort_keys=False), end="")
    for manifest in manifests:
        print("---")
        print(yaml.safe_dump(manifest, sort_keys=False), end="")
    return EXIT_OK


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-f",
        "--job-file",
        help="AReaL Job(s) as YAML: {role, replicas, tasks: "
        "[SchedulingSpec], scheduling_strategy} or {experiment, trial, "
        "jobs: [...]}; " + NAMES_AGREE,
    )
    parser.add_argument(
        "--show",
        choices=("all", "values", "manifests"),
        default="all",
        help="what to print; helm template checks the values against the chart's schema either way",
    )
    chart_options(parser)


def _run(call: Invocation) -> int:
    args = call.args
    experiment, trial = getattr(args, "experiment", None), getattr(args, "trial", None)
    return render(call.session, args.job_file, experiment, trial, args.show, call.fmt)


COMMANDS = (
    Command(
        "render",
        "dry run without a cluster: the values and manifests of a job file and/or "
        "values files (helm template, schema-checked)",
        "  areal-workers render -f job.yaml            values and manifests create_workers would apply\n"
        "  areal-workers render --values platform.yaml -f job.yaml --show values\n"
        "  areal-workers render --values values.yaml   a values file alone: its roles (helm template + schema)",
        _run,
        _arguments,
    ),
)
