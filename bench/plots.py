"""PNG line plots of a benchmark's series (matplotlib, the `bench` extra), saved under bench/results/."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harness import BENCH, RESULTS


@dataclass
class Series:
    label: str
    x: list[float]
    y: list[float]
    style: str = "-o"
    color: str | None = None  # matplotlib's cycle when None; series that belong together share one


@dataclass
class Plot:
    title: str
    xlabel: str
    ylabel: str
    series: list[Series] = field(default_factory=list)
    log_x: bool = True
    log_y: bool = False


def save(plot: Plot, name: str, directory: Path = RESULTS) -> str:
    """Writes <directory>/<name>.png; returns its path relative to bench/ (what Result.plots holds)."""
    import matplotlib

    matplotlib.use("Agg")  # no display
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(7, 4.5))
    for series in plot.series:
        points = [(x, y) for x, y in zip(series.x, series.y) if y > 0 or not plot.log_y]  # log scales skip zeros
        if points:
            axes.plot(*zip(*points), series.style, label=series.label, color=series.color)
    if plot.log_x:
        axes.set_xscale("log", base=2)
        ticks = sorted({x for series in plot.series for x in series.x})
        axes.set_xticks(ticks, [f"{x:g}" for x in ticks])
    if plot.log_y:
        axes.set_yscale("log")
    axes.set_title(plot.title)
    axes.set_xlabel(plot.xlabel)
    axes.set_ylabel(plot.ylabel)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize="small")
    figure.tight_layout()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    try:
        return str(path.relative_to(BENCH))
    except ValueError:  # a directory outside bench/ (tests)
        return str(path)
