"""PNG plots of scenario results (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: headless, deterministic backend

import matplotlib.pyplot as plt
from matplotlib.ticker import FuncFormatter

from benchmarks.goals import TIMES, Outcome
from benchmarks.registry import Scenario
from benchmarks.results import ScenarioResult, Series, columns, format_figure, label

MET, MISSED, PEER, OTHER_PEER = "tab:green", "tab:red", "dimgray", "silver"

# A figure column worth a bar: a rate, a latency, a share or a ratio (its name says so);
# counts (rows, micro-batches, errors, MiB written) answer no question on their own, nor
# does how long a step ran ("s", "seconds").
_MEASURE = re.compile(r"/| per |\w (ms|s)\b|^(ms|s) \w|\bratio\b|^x |^of |share")


def is_measure(column: str) -> bool:
    """Whether ``column`` names a rate, latency, share or ratio rather than a count."""
    return bool(_MEASURE.search(column))


def default_plot(result: ScenarioResult, fig: plt.Figure) -> None:
    """One horizontal bar chart per measure (see :func:`is_measure`), one bar per row."""
    figures = [
        c
        for c in columns(result.rows)
        if is_measure(c) and any(not isinstance(r.get(c, ""), str) for r in result.rows)
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

    Scenarios that recorded series get line panels (:func:`series_plot`); one with
    goals and no series gets none here (its goal figures answer its question); the
    others a bar chart per measure. Returns the path, or None when nothing was drawn
    (the scenario did not run, has no rows, or no measure to show).
    """
    if result.status != "ok" or not result.rows:
        return None
    bars_only = scenario.plot is None and not result.series
    if bars_only and (scenario.goals or not any(is_measure(c) for c in columns(result.rows))):
        return None
    fig = plt.figure()
    try:
        draw = scenario.plot or (series_plot if result.series else default_plot)
        draw(result, fig)
        fig.suptitle(_wrap(f"{result.name}: {result.description}", 90), fontsize=10)
        fig.tight_layout()
        path = out_dir / f"{result.name}.png"
        fig.savefig(path, dpi=100)
        return path
    finally:
        plt.close(fig)


def _wrap(text: str, width: int) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


def _ratio_text(outcome: Outcome) -> str:
    goal = outcome.goal
    target = 1.0 if goal.bound is not None else goal.target
    ratio = outcome.ratio
    shown = "not measured" if ratio is None else f"{ratio:.2f}{TIMES}"
    return f"{shown} (goal {goal.sign} {format_figure(target)}{TIMES})"


def goal_plot(outcome: Outcome, fig: plt.Figure, when: str = "") -> None:
    """Ours beside the peer or ceiling (or the bound), the goal as a line, the ratio on ours.

    Ours is green where the goal is met, red where not; the peer the ratio is to is
    dark grey, other peers of the same figure (etcd's other API) light grey.
    """
    goal = outcome.goal
    unit = goal.unit or goal.ours[0].column
    ax = fig.subplots()
    names, values, colours = [], [], []
    if goal.bound is None:
        for value, name in outcome.peers_found:
            names.append(_wrap(name, 22))
            values.append(value)
            colours.append(PEER if name == outcome.peer_name else OTHER_PEER)
    if outcome.ours is not None:
        names.append(_wrap(outcome.ours_name, 22))
        values.append(outcome.ours)
        colours.append(MET if outcome.met else MISSED)
    bars = ax.bar(names, values, color=colours, width=0.5)
    if outcome.peer is not None:
        line = outcome.peer * (1.0 if goal.bound is not None else goal.target)
        label = f"goal {goal.statement()}" + (
            f" = {format_figure(line)} {unit}" if goal.bound is None else ""
        )
        # A legend, not a text on the line: matplotlib keeps it clear of the bars' labels.
        ax.axhline(line, color="black", linestyle="--", linewidth=1, label=_wrap(label, 40))
        ax.legend(loc="upper center", fontsize=8, frameon=False)
    for i, (bar, value) in enumerate(zip(bars.patches, values, strict=True)):
        ours = outcome.ours is not None and i == len(values) - 1
        text = format_figure(value) + (f"\n{_ratio_text(outcome)}" if ours else "")
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, value),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=9,
            weight="bold" if ours else "normal",
            # legible where the goal line crosses it (ours just under the goal)
            bbox={"facecolor": "white", "edgecolor": "none", "alpha": 0.85, "pad": 1},
        )
    top = max([*values, outcome.peer or 0.0]) if values else 1.0
    ax.set_ylim(0, top * 1.45)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: format_figure(float(y))))
    ax.set_ylabel(unit)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(_wrap(goal.what, 60) + (f"\n{when}" if when else ""), fontsize=9)
    fig.set_size_inches(max(6.4, 2.2 * len(values)), 4.2)


def summary_plot(outcomes: Sequence[Outcome], fig: plt.Figure, title: str) -> None:
    """Every goal at a glance: its ratio over its target (log scale, 1 = just met).

    A bar per goal, green where met and red where not; a goal not measured is named
    with no bar. Lower-is-better goals are inverted so that right is always better.
    """
    ax = fig.subplots()
    labels = [_wrap(o.goal.what, 48) for o in outcomes]
    ys = range(len(outcomes))
    scores = [o.score for o in outcomes]
    shown = [s for s in scores if s is not None]
    low = min([0.5, *shown]) / 1.6
    high = max([2.0, *shown]) * 8.0  # room for the label right of the longest bar
    for y, o, score in zip(ys, outcomes, scores, strict=True):
        if score is None:
            ax.text(1.08, y, "not measured", va="center", fontsize=8, color=PEER)
            continue
        # From 1 (just met) to the score: a missed goal points left, a met one right.
        ax.barh(y, score - 1.0, left=1.0, color=MET if o.met else MISSED, height=0.6)
        ax.text(max(score, 1.0) * 1.08, y, _ratio_text(o), va="center", fontsize=8)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(low, high)
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(
        "ratio ÷ goal ratio (inverted where lower is better): right of 1 met, left missed"
    )
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(_wrap(title, 80), fontsize=10)
    fig.set_size_inches(10, 1.2 + 0.5 * max(len(outcomes), 1))


def save(fig: plt.Figure, path: Path) -> Path:
    """Lay out, write ``path`` as PNG (100 dpi) and close ``fig``; returns ``path``."""
    try:
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        return path
    finally:
        plt.close(fig)


def write_goal_plots(outcomes: Sequence[Outcome], out_dir: Path, when: str = "") -> dict[str, Path]:
    """``goal-<key>.png`` for every goal measured (ours and its peer); ``{key: path}``."""
    written = {}
    for outcome in outcomes:
        if not outcome.measured:
            continue
        fig = plt.figure()
        goal_plot(outcome, fig, when)
        written[outcome.goal.key] = save(fig, out_dir / f"goal-{outcome.goal.key}.png")
    return written


def write_summary(outcomes: Sequence[Outcome], path: Path, title: str) -> Path:
    """``summary.png``: :func:`summary_plot` of ``outcomes``."""
    fig = plt.figure()
    summary_plot(outcomes, fig, title)
    return save(fig, path)
