"""The goals of one or more runs as a person reads them: a markdown table, HISTORY.md rows.

Pure functions on results data (``results.json`` documents); the files are written
by :mod:`benchmarks.cli` (at the end of every run, and by ``python -m benchmarks
report``). Which goal a figure answers is declared once per scenario
(:mod:`benchmarks.goals`), so the README table, ``summary.png`` and the history
lines come from the same :class:`~benchmarks.goals.Outcome` objects.
"""

from __future__ import annotations

import dataclasses
import datetime
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.goals import TIMES, Goal, Outcome, evaluate_run
from benchmarks.results import format_figure

BEGIN = "<!-- benchmarks-goals:begin (python -m benchmarks report writes this part) -->"
END = "<!-- benchmarks-goals:end -->"
HISTORY_HEAD = (
    "| run | commit | scenarios | goals met | headline figures (ratio to the peer or bound) |"
)
NONE = "-"


@dataclasses.dataclass(frozen=True)
class RunInfo:
    """Where a run's figures come from: when, which commit, which machine."""

    started: str
    """ISO 8601 with offset, as ``results.json`` has it."""
    commit: str
    machine: str
    quick: bool = False
    scenarios: tuple[str, ...] = ()
    commit_recorded: bool = True
    """False: the run did not record its commit; ``commit`` is the one that added its
    files to the repository (the code measured is at or before it)."""

    @property
    def source(self) -> str:
        """``commit `abc`, on <machine>`` as the tables say it."""
        if self.commit_recorded:
            return f"commit `{self.commit}`, on {self.machine}"
        return f"files committed in `{self.commit}` (code at or before it), on {self.machine}"

    @property
    def when(self) -> str:
        """``2026-11-28 08:28 UTC``."""
        moment = datetime.datetime.fromisoformat(self.started)
        if moment.tzinfo is not None:
            moment = moment.astimezone(datetime.UTC)
        return moment.strftime("%Y-%m-%d %H:%M") + (" UTC" if moment.tzinfo else "")

    @property
    def date(self) -> str:
        return self.when[:10]


def machine_line(machine: Mapping[str, Any], load: Sequence[float] | None = None) -> str:
    """``2 cores (Intel(R) Xeon(R) Processor), 23.5 GiB, ext4 on /dev/vda (hdd)``, + load."""
    text = (
        f"{machine.get('cores', '?')} cores ({machine.get('cpu', 'unknown CPU')}), "
        f"{machine.get('memory_gib', '?')} GiB, {machine.get('disk_filesystem', '?')} on "
        f"{machine.get('disk_device', '?')} ({machine.get('disk_kind', '?')})"
    )
    if load:
        text += ", load average " + " → ".join(f"{x:.1f}" for x in load)
    return text


def run_info(doc: Mapping[str, Any], commit: str = "") -> RunInfo:
    """The :class:`RunInfo` of a ``results.json`` document.

    ``commit`` is used when the document does not name one (runs recorded before
    the harness wrote it: the commit that added their files to the repository).
    """
    return RunInfo(
        started=str(doc["started"]),
        commit=str(doc.get("commit") or commit or "unknown"),
        machine=machine_line(doc.get("machine", {}), doc.get("load")),
        quick=bool(doc.get("quick")),
        scenarios=tuple(s["name"] for s in doc.get("scenarios", [])),
        commit_recorded=bool(doc.get("commit")),
    )


@dataclasses.dataclass(frozen=True)
class Judged:
    """A goal's outcome and the run it comes from (None: measured in no run given)."""

    outcome: Outcome
    run: RunInfo | None


def latest(
    declared: Sequence[tuple[str, Goal]],
    runs: Sequence[tuple[RunInfo, Sequence[Mapping[str, Any]]]],
) -> list[Judged]:
    """Each declared goal judged on the newest run (by start time) that measured it.

    ``runs``: ``(info, scenarios)`` pairs, in any order. A goal no run measured is
    judged on the newest run (not measured) with ``run`` None.
    """
    ordered = sorted(runs, key=lambda r: _instant(r[0].started), reverse=True)
    judged_runs = [(info, evaluate_run(declared, scenarios)) for info, scenarios in ordered]
    out = []
    for i in range(len(declared)):
        found = next(((info, oc[i]) for info, oc in judged_runs if oc[i].measured), None)
        if found is not None:
            out.append(Judged(found[1], found[0]))
        elif judged_runs:
            out.append(Judged(judged_runs[0][1][i], None))
    return out


def _instant(started: str) -> datetime.datetime:
    moment = datetime.datetime.fromisoformat(started)
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.UTC)


def figure(value: float | None, unit: str) -> str:
    """``686,000 rows/s``; ``not measured`` for None."""
    return "not measured" if value is None else f"{format_figure(value)} {unit}"


def cells(outcome: Outcome) -> list[str]:
    """The table cells what, peer, ours, ratio, met of one outcome."""
    goal = outcome.goal
    unit = goal.unit or goal.ours[0].column
    if goal.bound is not None:
        peer = f"bound: {format_figure(goal.bound)} {unit}"
    else:
        peer = f"{outcome.peer_name}: {figure(outcome.peer, unit)}"
    ours = figure(outcome.ours, unit)
    if outcome.ours is not None and len(goal.ours) > 1:
        ours += f" ({outcome.ours_name})"
    ratio = outcome.ratio
    target = 1.0 if goal.bound is not None else goal.target
    shown = NONE if ratio is None else f"{ratio:.2f}{TIMES}"
    ratio_cell = f"{shown} (goal {goal.sign} {format_figure(target)}{TIMES})"
    met = {True: "yes", False: "**no**", None: "not measured"}[outcome.met]
    return [goal.what, peer, ours, ratio_cell, met]


def _md_row(values: Sequence[str]) -> str:
    return "| " + " | ".join(v.replace("|", "\\|").replace("\n", " ") for v in values) + " |"


def goals_table(judged: Sequence[Judged]) -> str:
    """The markdown of the goals: a line naming the run(s), then one table.

    Columns what, peer, ours, ratio, met; when the figures come from more than one
    run, a ``run`` column gives each row's date, and every run is listed under the
    table with its commit and machine.
    """
    runs = list(dict.fromkeys(j.run for j in judged if j.run is not None))
    runs.sort(key=lambda r: _instant(r.started), reverse=True)
    head = ["what", "peer", "ours", "ratio", "met"]
    several = len(runs) > 1
    lines = []
    if not runs:
        lines.append("No run measured any goal.")
    elif not several:
        run = runs[0]
        lines.append(
            f"Run of {run.when}, {run.source}"
            + (" (`--quick`: sizes too small to judge a goal)" if run.quick else "")
            + "."
        )
    else:
        lines.append(
            f"The latest figure of each goal, from {len(runs)} runs; each row says its run "
            "(listed under the table)."
        )
        head.append("run")
    lines += ["", _md_row(head), "|" + "|".join("---" for _ in head) + "|"]
    for j in judged:
        row = cells(j.outcome)
        if several:
            row.append(j.run.when if j.run is not None else NONE)
        lines.append(_md_row(row))
    if several:
        lines.append("")
        for run in runs:
            quick = " (`--quick`)" if run.quick else ""
            lines.append(f"- {run.when}{quick}: {run.source}")
    met = sum(1 for j in judged if j.outcome.met)
    measured = sum(1 for j in judged if j.outcome.met is not None)
    lines += ["", f"{met} of {measured} measured goals met ({len(judged)} declared)."]
    return "\n".join(lines) + "\n"


def splice(text: str, block: str, begin: str = BEGIN, end: str = END) -> str:
    """``text`` with what lies between the ``begin`` and ``end`` marker lines replaced.

    Raises ValueError naming the marker when either is missing or they are out of order.
    """
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < 0 or stop < start:
        raise ValueError(
            f"the file needs the marker lines {begin!r} and then {end!r} "
            "around the part the report writes"
        )
    return text[: start + len(begin)] + "\n" + block.rstrip("\n") + "\n" + text[stop:]


def history_row(run: RunInfo, outcomes: Sequence[Outcome]) -> str:
    """One HISTORY.md table row: run, commit, scenarios, goals met, headline ratios."""
    measured = [o for o in outcomes if o.met is not None]
    figures = ", ".join(
        f"{o.goal.key} {o.ratio:.2f}{TIMES}{'' if o.met else ' (missed)'}"
        for o in measured
        if o.ratio is not None
    )
    met = f"{sum(1 for o in measured if o.met)} / {len(measured)}"
    scenarios = " ".join(run.scenarios) + (" (quick)" if run.quick else "")
    return _md_row([run.when, f"`{run.commit}`", scenarios, met, figures or NONE])


_ROW_KEY = re.compile(r"^\| (\d{4}-\d\d-\d\d \d\d:\d\d[^|]*?) \|")


def merge_history(text: str, rows: Sequence[str]) -> str:
    """HISTORY.md ``text`` with ``rows`` added, newest first; a row of the same run replaces.

    Rows are keyed by their first cell (the run's time). ``text`` empty: a new file.
    """
    keyed: dict[str, str] = {}
    for line in text.splitlines():
        if m := _ROW_KEY.match(line):
            keyed[m.group(1)] = line
    for line in rows:
        m = _ROW_KEY.match(line)
        if m is None:
            raise ValueError(f"not a history row: {line!r}")
        keyed[m.group(1)] = line
    body = [keyed[k] for k in sorted(keyed, reverse=True)]
    head = [
        "# Benchmark history",
        "",
        "One row per recorded run of `python -m benchmarks`, newest first: the scenarios",
        "it ran, how many of their goals it met, and each goal's ratio (ours to the peer or",
        "ceiling of the same run, or to the goal's bound; the goals are declared in each",
        "scenario's module, and `python -m benchmarks report RUN_DIR` adds a run's row).",
        "`commit` is the code measured, as the run recorded it; runs from before runs",
        "recorded it (2026-12-01) give the commit that added their files, where they still",
        "are (`git show COMMIT --stat`). `benchmarks/reference/` keeps the latest full run",
        "only.",
        "",
        HISTORY_HEAD,
        "|---|---|---|---|---|",
    ]
    return "\n".join(head + body) + "\n"


def write_text_if_changed(path: Path, text: str) -> bool:
    """Write ``text`` to ``path`` unless it already holds it; whether it wrote."""
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True
