"""The data of AReaL's scheduler contract: AReaL's own classes when `areal` is importable, otherwise dataclasses
with the same names, fields and defaults (areal/api/scheduler_api.py and areal/api/cli_args.py, AReaL 1.0.4)."""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

__all__ = ["Job", "SchedulingSpec", "SchedulingStrategy", "Worker", "AREAL_SCHEDULER_BASE", "USING_AREAL_TYPES"]


def _import_areal(module: str) -> Any | None:
    """AReaL's module, or None when areal is absent or cannot be imported here (e.g. torch is missing)."""
    if importlib.util.find_spec("areal") is None:
        return None
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


_scheduler_api = _import_areal("areal.api.scheduler_api")
_cli_args = _import_areal("areal.api.cli_args")
USING_AREAL_TYPES = _scheduler_api is not None and _cli_args is not None

# mypy checks against the dataclasses below, which have AReaL's names, fields and defaults.
if not TYPE_CHECKING and USING_AREAL_TYPES:
    Worker = _scheduler_api.Worker
    Job = _scheduler_api.Job
    SchedulingSpec = _cli_args.SchedulingSpec
    SchedulingStrategy = _cli_args.SchedulingStrategy
    AREAL_SCHEDULER_BASE: type = _scheduler_api.Scheduler
else:

    @dataclass
    class SchedulingStrategy:
        type: str = "separation"
        target: str | None = None
        fork: bool = True

    @dataclass
    class SchedulingSpec:
        cpu: int = 8
        gpu: int = 0
        mem: int = 32
        port_count: int = 2
        image: str = "/storage/openpsi/images/areal-latest.sif"
        task_type: str = "worker"
        env_vars: dict[str, str] = field(default_factory=dict)
        cmd: str | None = None
        srun_additional_args: str = "--unbuffered --mpi=pmi2 -K --chdir $PWD"
        additional_bash_cmds: list[str] | None = None
        container_type: str = "apptainer"
        mount: str = "/storage:/storage"
        nodelist: str | None = None
        exclude: str | None = None
        ray_placement_strategy: str = "shared"

        def __post_init__(self) -> None:
            if self.ray_placement_strategy not in {"shared", "separate", "deferred"}:
                raise ValueError(
                    f"ray_placement_strategy must be shared, separate or deferred, got {self.ray_placement_strategy!r}"
                )

    @dataclass
    class Worker:
        id: str
        ip: str
        worker_ports: list[str] = field(default_factory=list)
        engine_ports: list[str] = field(default_factory=list)

    @dataclass
    class Job:
        role: str
        replicas: int = 0
        tasks: list[SchedulingSpec] = field(default_factory=list)
        scheduling_strategy: SchedulingStrategy = field(default_factory=SchedulingStrategy)

    AREAL_SCHEDULER_BASE = object
