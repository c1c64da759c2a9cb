"""What every benchmark returns and how it is stored: a Result of tables and plots, saved as
bench/results/<name>.json (read by bench/report.py into bench/RESULTS.md)."""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"

Profile = Literal["quick", "full"]
# What a benchmark reports its steps to (bench/run.py prints each with the elapsed time).
Progress = Callable[[str], None]


@dataclass
class Table:
    caption: str
    columns: list[str]
    rows: list[list[Any]]


@dataclass
class Result:
    """One benchmark's outcome. `plots` are paths relative to bench/ (PNG files under bench/results/)."""

    name: str
    title: str
    summary: str
    command: str
    profile: str
    tables: list[Table] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    targets: list[str] = field(default_factory=list)  # "met: ..." / "missed: ..." lines
    date: str = field(default_factory=lambda: time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))
    machine: dict[str, Any] = field(default_factory=lambda: machine_info())


def real_node_result(name: str, title: str, summary: str, command: str, table: Table) -> Result:
    """A benchmark on the real node, with its one table: profile `real-node`, which `make bench` does not run (the
    real node needs root and runs one per machine); `command` is its script under bench/ and that script's arguments,
    run by the virtualenv's python."""
    return Result(
        name=name,
        title=title,
        summary=summary,
        command=f".venv/bin/python bench/{command}",
        profile="real-node",
        tables=[table],
    )


def machine_info() -> dict[str, Any]:
    memory_kib = 0
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
    cpu_model = platform.processor()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        models = [
            line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")
        ]
        cpu_model = models[0] if models else cpu_model
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_gib": round(memory_kib / 2**20, 1),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_average": [round(load, 2) for load in os.getloadavg()],
    }


def save(result: Result, directory: Path = RESULTS) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{result.name}.json"
    path.write_text(json.dumps(asdict(result), indent=2, default=str) + "\n")
    return path


class NotAResult(ValueError):
    """A results file that does not hold a Result."""


def load(path: Path) -> Result:
    data = json.loads(path.read_text())
    if not isinstance(data, dict):
        raise NotAResult(f"{path}: a {type(data).__name__}, not a benchmark Result")
    known = {f.name for f in fields(Result)}
    required = {f.name for f in fields(Result) if f.default is MISSING and f.default_factory is MISSING}
    if data.keys() - known or required - data.keys():
        raise NotAResult(
            f"{path}: not a benchmark Result (unknown fields {sorted(data.keys() - known)}, missing "
            f"{sorted(required - data.keys())}); every file there is a Result that harness.save wrote"
        )
    data["tables"] = [Table(**table) for table in data.get("tables", [])]
    return Result(**data)
