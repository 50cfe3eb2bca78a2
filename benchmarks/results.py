"""Scenario results, and writing them as results.json and results.md."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Literal

Row = dict[str, str | int | float]
"""One row of a scenario's figures (the contract is :mod:`benchmarks.registry`'s)."""

Status = Literal["ok", "skipped", "failed"]


@dataclasses.dataclass
class Series:
    """One line of a plot: ``points`` (x, y) drawn in ``panel`` as ``line``.

    Lines of one panel share its axes (``x`` and ``y`` name them, with their units);
    ``log_x`` draws x on a log scale (latency CDFs).
    """

    panel: str
    line: str
    x: str
    y: str
    points: list[tuple[float, float]]
    log_x: bool = False


@dataclasses.dataclass
class ScenarioResult:
    """The outcome of one scenario. ``reason`` is set when skipped or failed."""

    name: str
    description: str
    status: Status
    rows: list[Row] = dataclasses.field(default_factory=list)
    reason: str = ""
    notes: list[str] = dataclasses.field(default_factory=list)
    seconds: float = 0.0
    series: list[Series] = dataclasses.field(default_factory=list)
    """Lines to plot (throughput or latency against clients, CDFs, time); when empty
    the plot is the default bar chart of the rows."""

    @property
    def detail(self) -> str:
        """``"skipped: <reason>"`` / ``"failed: <reason>"``, or ``""`` when ok."""
        return "" if self.status == "ok" else f"{self.status}: {self.reason}"


def validate_rows(rows: object) -> list[Row]:
    """Check a scenario's return value; raises TypeError naming what is wrong.

    Rows must be a list of non-empty dicts with ``str`` keys, ``str`` labels and
    finite ``int``/``float`` figures (bools are not figures), at least one figure each.
    """
    if not isinstance(rows, list):
        raise TypeError(f"run() must return a list of rows, got {type(rows).__name__}")
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not row:
            raise TypeError(f"row {i} must be a non-empty dict, got {row!r}")
        figures = 0
        for key, value in row.items():
            if not isinstance(key, str):
                raise TypeError(f"row {i}: key {key!r} must be a str")
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise TypeError(f"row {i}: {key!r} must be a str label or a number, got {value!r}")
            if isinstance(value, float) and not math.isfinite(value):
                raise TypeError(f"row {i}: {key!r} is not finite ({value!r})")
            figures += not isinstance(value, str)
        if not figures:
            raise TypeError(f"row {i} has no numeric figure: {row!r}")
    return rows


def format_figure(value: str | int | float) -> str:
    """A figure as shown in tables: thousands separators for big, 4 significant digits else."""
    if isinstance(value, str):
        return value
    if isinstance(value, int) or abs(value) >= 10_000:
        return f"{value:,.0f}"
    return f"{value:.4g}"


def columns(rows: list[Row]) -> list[str]:
    """Every key used by ``rows``, in first-seen order."""
    return list(dict.fromkeys(key for row in rows for key in row))


def label(row: Row) -> str:
    """A row's label: its ``str`` values joined (``"row"`` when it has none)."""
    return ", ".join(v for v in row.values() if isinstance(v, str)) or "row"


def write_json(
    path: Path, header: dict[str, Any], results: list[ScenarioResult], plots: dict[str, str]
) -> None:
    """``header`` (run info, machine, versions) plus one entry per scenario, in run order."""
    doc = dict(header)
    doc["scenarios"] = [{**dataclasses.asdict(r), "plot": plots.get(r.name)} for r in results]
    path.write_text(json.dumps(doc, indent=2) + "\n")


def _md_table(head: list[str], body: list[list[str]]) -> list[str]:
    def esc(cell: str) -> str:
        return cell.replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(esc(h) for h in head) + " |"]
    lines.append("|" + "|".join("---" for _ in head) + "|")
    lines += ["| " + " | ".join(esc(c) for c in row) + " |" for row in body]
    return lines


def write_markdown(
    path: Path,
    header: dict[str, Any],
    results: list[ScenarioResult],
    plots: dict[str, str],
    goals: str = "",
) -> None:
    """Machine and versions, the ``goals`` markdown if any, then a section per scenario."""
    out = [f"# raftlog benchmarks, {header['started']}", ""]
    out.append(f"Mode: {'quick' if header['quick'] else 'full'}. Command: `{header['command']}`")
    out.append("")
    out += ["## Machine", ""]
    out += _md_table(["", ""], [[k, str(v)] for k, v in header["machine"].items()])
    out += ["", "## Versions", ""]
    out += _md_table(["", ""], [[k, v] for k, v in header["versions"].items()])
    if goals:
        out += ["", "## Goals", "", goals.rstrip("\n")]
    for r in results:
        out += ["", f"## {r.name}", "", r.description, ""]
        if r.status != "ok":
            out += [f"**{r.detail}**"]
            continue
        cols = columns(r.rows)
        body = [[format_figure(row[c]) if c in row else "" for c in cols] for row in r.rows]
        out += _md_table(cols, body)
        out += [""] + [f"- {n}" for n in r.notes]
        out.append(f"Ran in {r.seconds:.1f} s.")
        if r.name in plots:
            out += ["", f"![{r.name}]({plots[r.name]})"]
    path.write_text("\n".join(out) + "\n")
