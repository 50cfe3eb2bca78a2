"""PNG plots of scenario results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless, deterministic backend

import matplotlib.pyplot as plt

from benchmarks.registry import Scenario
from benchmarks.results import ScenarioResult, Series, columns, label


def default_plot(result: ScenarioResult, fig: plt.Figure) -> None:
    """One horizontal bar chart per figure name (unit), one bar per row that has it."""
    figures = [
        c
        for c in columns(result.rows)
        if any(not isinstance(r.get(c, ""), str) for r in result.rows)
    ]
    axes = fig.subplots(len(figures), 1, squeeze=False)[:, 0]
    for ax, name in zip(axes, figures, strict=True):
        rows = [r for r in result.rows if name in r and not isinstance(r[name], str)]
        ax.barh([label(r) for r in rows], [float(r[name]) for r in rows], color="tab:blue")
        ax.invert_yaxis()  # first row on top, as in the table
        ax.set_xlabel(name)
        ax.grid(axis="x", alpha=0.3)
    # Height grows with the number of bars so labels never overlap.
    fig.set_size_inches(9, 1.0 + sum(1.0 + 0.45 * len(a.patches) for a in axes))


def series_plot(result: ScenarioResult, fig: plt.Figure) -> None:
    """One panel per series panel name, one line per series, in recorded order."""
    panels: dict[str, list[Series]] = {}
    for s in result.series:
        panels.setdefault(s.panel, []).append(s)
    axes = fig.subplots(len(panels), 1, squeeze=False)[:, 0]
    for ax, (title, lines) in zip(axes, panels.items(), strict=True):
        for s in lines:
            xs, ys = zip(*s.points, strict=True)
            ax.plot(xs, ys, marker="o" if len(xs) <= 12 else None, label=s.line)
        if lines[0].log_x:
            ax.set_xscale("log")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel(lines[0].x)
        ax.set_ylabel(lines[0].y)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.set_size_inches(9, 3.2 * len(panels))


def write_plot(scenario: Scenario, result: ScenarioResult, out_dir: Path) -> Path | None:
    """Draw ``result`` (with the scenario's own ``plot`` if any) to ``<out>/<name>.png``.

    Scenarios that recorded series get line panels (:func:`series_plot`), the others a
    bar chart per figure. Returns the path, or None when the scenario did not run or
    has no rows.
    """
    if result.status != "ok" or not result.rows:
        return None
    fig = plt.figure()
    try:
        draw = scenario.plot or (series_plot if result.series else default_plot)
        draw(result, fig)
        fig.suptitle(f"{result.name}: {result.description}", fontsize=10)
        fig.tight_layout()
        path = out_dir / f"{result.name}.png"
        fig.savefig(path, dpi=100)
        return path
    finally:
        plt.close(fig)
