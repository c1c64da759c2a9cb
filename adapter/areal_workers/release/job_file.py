"""A job file, the input of `areal-workers up` and `render`: AReaL's Job and SchedulingSpec as YAML (one Job
mapping, or `{experiment, trial, jobs: [...]}`), parsed strictly, and the release values `create_workers` would
write for its jobs in order."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import yaml

from .. import naming
from ..areal_types import Job, SchedulingSpec, SchedulingStrategy
from ..config import KubernetesSchedulerConfig
from ..errors import InputError, refuse_unknown_fields
from . import values as job_values
from .model import ReleaseModel

FILE_KEYS = {"experiment", "trial", "jobs"}


def _fields(kind: type) -> set[str]:
    return {f.name for f in dataclasses.fields(kind)}


def _strict(data: Any, kind: type, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InputError(f"{where} must be a mapping of {kind.__name__} fields, got {type(data).__name__}")
    refuse_unknown_fields(data, sorted(_fields(kind)), where, kind.__name__)
    return data


def parse_job(data: Any, where: str) -> Job:
    raw = _strict(data, Job, where)
    if "role" not in raw:
        raise InputError(f"{where}: a job needs a role")
    problem = naming.role_problem(raw["role"])  # before helm, whose schema error names neither role nor rule
    if problem:
        raise InputError(f"{where}: {problem}")
    tasks = [
        SchedulingSpec(**_strict(task, SchedulingSpec, f"{where}.tasks[{i}]"))
        for i, task in enumerate(raw.get("tasks") or [])
    ]
    strategy = SchedulingStrategy(
        **_strict(raw.get("scheduling_strategy") or {}, SchedulingStrategy, f"{where}.scheduling_strategy")
    )
    replicas = raw.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 1:
        raise InputError(f"{where}: replicas must be an integer >= 1, got {replicas!r}")
    return Job(role=raw["role"], replicas=replicas, tasks=tasks, scheduling_strategy=strategy)


def load_job_file(path: Path) -> tuple[dict[str, str], list[Job]]:
    """A job file: one Job mapping, or `{experiment, trial, jobs: [Job, ...]}`."""
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as error:
        raise InputError(f"cannot read job file {path}: {error}") from None
    if isinstance(data, dict) and "jobs" in data:
        unknown = sorted(set(data) - FILE_KEYS)
        if unknown:
            raise InputError(
                f"{path}: unknown key(s) {', '.join(unknown)}; a job file has {', '.join(sorted(FILE_KEYS))}"
            )
        names = {key: str(data[key]) for key in ("experiment", "trial") if data.get(key)}
        return names, [parse_job(job, f"{path}: jobs[{i}]") for i, job in enumerate(data["jobs"] or [])]
    return {}, [parse_job(data, str(path))]


def job_file_values(
    jobs: list[Job], config: KubernetesSchedulerConfig, experiment: str, trial: str
) -> tuple[dict[str, Any], list[str]]:
    """The release values after create_workers(job) for each job in order, as the scheduler builds them, and notes
    on what they cannot show (process forks, whose ports exist only at run time)."""
    values: dict[str, Any] = {}
    notes: list[str] = []
    try:
        base = job_values.base_values(config, experiment, trial)
        for job in jobs:
            model = ReleaseModel(values=values, revision=1 if values else None)
            problem = naming.role_problem(job.role)
            if problem:
                raise InputError(problem)
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
                    notes.append(
                        f"{job.role} forks processes in {strategy.target}'s pods at run time; the ports they get "
                        f"are recorded in a later revision, not rendered here"
                    )
            else:
                raise InputError(
                    f"{job.role}: scheduling_strategy {strategy.type!r} with target {strategy.target!r}: "
                    f"a colocation's target must be a role created earlier in the file"
                )
    except job_values.TopologyError as error:
        raise InputError(f"{error.worker_key}: {error.reason}: {error.details}") from None
    return values, notes
