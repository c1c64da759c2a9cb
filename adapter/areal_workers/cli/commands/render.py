"""`areal-workers render`: the values and manifests a Job file (AReaL's Job and SchedulingSpec as YAML) or a values
file would produce, without a cluster: the values are built by the scheduler's own functions (release.values,
ReleaseModel) and rendered by `helm template`, which also checks them against the chart's schema."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from pathlib import Path
from typing import Any

import yaml

from ... import naming
from ...areal_types import Job, SchedulingSpec, SchedulingStrategy
from ...config import KubernetesSchedulerConfig
from ...release import values as job_values
from ...release.model import ReleaseModel
from ..command import NAMES_AGREE, Command, Invocation, chart_options
from ..output import Format, emit
from ..session import EXIT_OK, EXIT_USAGE, CliError, Session

FILE_KEYS = {"experiment", "trial", "jobs"}
DEFAULT_NAMES = {"experiment": "experiment", "trial": "trial"}  # render's, when neither a file nor a flag names one


def _fields(kind: type) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}


def _strict(data: Any, kind: type, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise CliError(f"{where} must be a mapping of {kind.__name__} fields, got {type(data).__name__}", EXIT_USAGE)
    unknown = sorted(set(data) - _fields(kind))
    if unknown:
        raise CliError(
            f"{where}: unknown field(s) {', '.join(unknown)}; {kind.__name__} has {', '.join(sorted(_fields(kind)))}",
            EXIT_USAGE,
        )
    return data


def parse_job(data: Any, where: str) -> Job:
    raw = _strict(data, Job, where)
    if "role" not in raw:
        raise CliError(f"{where}: a job needs a role", EXIT_USAGE)
    problem = naming.role_problem(raw["role"])  # before helm, whose schema error names neither role nor rule
    if problem:
        raise CliError(f"{where}: {problem}", EXIT_USAGE)
    tasks = [
        SchedulingSpec(**_strict(task, SchedulingSpec, f"{where}.tasks[{i}]"))
        for i, task in enumerate(raw.get("tasks") or [])
    ]
    strategy = SchedulingStrategy(
        **_strict(raw.get("scheduling_strategy") or {}, SchedulingStrategy, f"{where}.scheduling_strategy")
    )
    replicas = raw.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise CliError(f"{where}: replicas must be an integer >= 1, got {replicas!r}", EXIT_USAGE)
    return Job(role=raw["role"], replicas=replicas, tasks=tasks, scheduling_strategy=strategy)


def load_job_file(path: Path) -> tuple[dict[str, str], list[Job]]:
    """A job file: one Job mapping, or `{experiment, trial, jobs: [Job, ...]}`."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise CliError(f"cannot read job file {path}: {error}", EXIT_USAGE) from None
    if isinstance(data, dict) and "jobs" in data:
        unknown = sorted(set(data) - FILE_KEYS)
        if unknown:
            raise CliError(
                f"{path}: unknown key(s) {', '.join(unknown)}; a job file has {', '.join(sorted(FILE_KEYS))}",
                EXIT_USAGE,
            )
        names = {key: str(data[key]) for key in ("experiment", "trial") if data.get(key)}
        return names, [parse_job(job, f"{path}: jobs[{i}]") for i, job in enumerate(data["jobs"] or [])]
    return {}, [parse_job(data, str(path))]


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


def job_file_values(jobs: list[Job], config: KubernetesSchedulerConfig, experiment: str, trial: str) -> dict[str, Any]:
    """The release values after create_workers(job) for each job in order, as the scheduler builds them."""
    values: dict[str, Any] = {}
    try:
        base = job_values.base_values(config, experiment, trial)
        for job in jobs:
            model = ReleaseModel(values=values, revision=1 if values else None)
            problem = naming.role_problem(job.role)
            if problem:
                raise CliError(problem, EXIT_USAGE)
            strategy = job.scheduling_strategy
            if strategy.type == "separation":
                spec = job_values.resolve_spec(job)
                job_values.check_spec(job.role, spec)
                values = model.with_role(job.role, job_values.role_values(spec, job.replicas, config), base)
            elif (
                strategy.type == "colocation"
                and strategy.target is not None
                and strategy.target in (values.get("roles") or {})
            ):
                if not strategy.fork:
                    values = model.with_colocation(job.role, strategy.target)
                elif config.fork_mode == "pod":
                    values = model.with_fork(job.role, {"target": strategy.target, "mode": "pod"})
                else:
                    print(
                        f"note: {job.role} forks processes in {strategy.target}'s pods at run time; the ports "
                        f"they get are recorded in a later revision, not rendered here",
                        file=sys.stderr,
                    )
            else:
                raise CliError(
                    f"{job.role}: scheduling_strategy {strategy.type!r} with target {strategy.target!r}: "
                    f"a colocation's target must be a role created earlier in the file",
                    EXIT_USAGE,
                )
    except job_values.TopologyError as error:
        raise CliError(f"{error.worker_key}: {error.reason}: {error.details}", EXIT_USAGE) from None
    return values


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
        values = job_file_values(jobs, session.config, named["experiment"], named["trial"])
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
