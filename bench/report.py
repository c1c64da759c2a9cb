"""Renders bench/RESULTS.md from every bench/results/*.json (bench/run.py calls it after the benchmarks).

python bench/report.py [--results DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

from harness import BENCH, RESULTS, Result, Table, load

TITLE = "areal-workers benchmarks"
MACHINE_FIELDS = (
    ("cpus", "CPUs"),
    ("cpu_model", "CPU model"),
    ("memory_gib", "memory (GiB)"),
    ("kernel", "kernel"),
    ("python", "Python"),
    ("load_average", "load average (1, 5, 15 min)"),
)


def load_all(directory: Path = RESULTS) -> list[Result]:
    """Every *.json there, each a Result (harness.NotAResult names a file that is not one)."""
    return [load(path) for path in sorted(directory.glob("*.json"))]


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def table_markdown(table: Table) -> str:
    lines = [f"| {' | '.join(_cell(c) for c in table.columns)} |", f"|{'---|' * len(table.columns)}"]
    lines += [f"| {' | '.join(_cell(v) for v in row)} |" for row in table.rows]
    return "\n".join(lines)


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def _machine(machine: dict[str, Any]) -> str:
    def shown(value: Any) -> str:
        return ", ".join(str(v) for v in value) if isinstance(value, list) else str(value)

    rows = [f"| {label} | {_cell(shown(machine[key]))} |" for key, label in MACHINE_FIELDS if key in machine]
    return "\n".join(["| | |", "|---|---|", *rows])


def _target(line: str) -> str:
    mark = {"met": "✅", "missed": "❌"}.get(line.split(":", 1)[0].strip(), "•")
    return f"- {mark} {line}"


def _verdicts(result: Result) -> str:
    met = sum(t.startswith("met") for t in result.targets)
    missed = sum(t.startswith("missed") for t in result.targets)
    return f"{met} met, {missed} missed" if result.targets else "none"


def _section(result: Result) -> str:
    load_average = result.machine.get("load_average")
    measured = f"Measured {result.date}, profile `{result.profile}`"
    if load_average:
        measured += f", load average {', '.join(str(v) for v in load_average)} at the end"
    parts = [f"## {result.title}", f"*{measured}.*", result.summary]
    if result.targets:
        parts.append("**Targets**\n\n" + "\n".join(_target(t) for t in result.targets))
    for table in result.tables:
        parts.append(f"**{table.caption}**\n\n{table_markdown(table)}")
    for plot in result.plots:
        parts.append(f"![{result.name}]({plot})")
    parts.append(f"Command: `{result.command}`")
    return "\n\n".join(parts)


def render(results: list[Result], generated: str | None = None) -> str:
    generated = generated or time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    parts = [
        f"# {TITLE}",
        f"Generated {generated} by `bench/report.py` from `bench/results/*.json`. `make bench` runs the quick "
        "profile on a local cluster of its own and rewrites this file; `make bench-full` the full one; "
        "`python bench/run.py --profile quick --only NAME` one benchmark. Load averages show how busy the "
        "machine was: other work on it slows every number here.",
    ]
    if not results:
        return "\n\n".join([*parts, "No results yet: run `make bench`."]) + "\n"
    newest = max(results, key=lambda r: r.date)
    parts.append(f"## Machine\n\nOf the newest result ({newest.date}):\n\n{_machine(newest.machine)}")
    overview = ["| benchmark | profile | measured | targets |", "|---|---|---|---|"]
    overview += [
        f"| [{_cell(r.title)}](#{_anchor(r.title)}) | {r.profile} | {r.date} | {_verdicts(r)} |" for r in results
    ]
    parts.append("## Overview\n\n" + "\n".join(overview))
    parts += [_section(r) for r in results]
    return "\n\n".join(parts) + "\n"


def write(results_dir: Path = RESULTS, out: Path = BENCH / "RESULTS.md") -> Path:
    out.write_text(render(load_all(results_dir)))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=BENCH / "RESULTS.md")
    args = parser.parse_args(argv)
    print(f"wrote {write(args.results, args.out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
