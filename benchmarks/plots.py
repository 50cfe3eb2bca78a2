"""PNG plots of scenario results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless, deterministic backend

import matplotlib.pyplot as plt

from benchmarks.registry import Scenario
from benchmarks.results import ScenarioResult, columns, label


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


def write_plot(scenario: Scenario, result: ScenarioResult, out_dir: Path) -> Path | None:
    """Draw ``result`` (with the scenario's own ``plot`` if any) to ``<out>/<name>.png``.

    Returns the path, or None when the scenario did not run or has no rows.
    """
    if result.status != "ok" or not result.rows:
        return None
    fig = plt.figure()
    try:
        (scenario.plot or default_plot)(result, fig)
        fig.suptitle(f"{result.name}: {result.description}", fontsize=10)
        fig.tight_layout()
        path = out_dir / f"{result.name}.png"
        fig.savefig(path, dpi=100)
        return path
    finally:
        plt.close(fig)
