"""Writing the goals of runs to files: a run's own, and ``python -m benchmarks report``.

At the end of every run (:func:`write_run_goals`), beside ``results.json``:
``goals.md`` (the goals table of that run), ``summary.png`` (every goal at a glance)
and ``goal-<key>.png`` (one figure per measured goal).

``python -m benchmarks report [RUN_DIR ...]`` (:func:`main`) reads the runs'
``results.json`` (default: every run under ``benchmarks/reference/``), judges every
declared goal on the newest run that measured it, and writes the README's goals
table (between the :data:`~benchmarks.report.BEGIN` / ``END`` markers),
``benchmarks/summary.png`` (the same outcomes as a picture) and a row per run in
``benchmarks/HISTORY.md``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.goals import Goal, evaluate_run
from benchmarks.machine import git
from benchmarks.plots import write_goal_plots, write_summary
from benchmarks.registry import load_all
from benchmarks.report import (
    Judged,
    RunInfo,
    goals_table,
    history_row,
    latest,
    merge_history,
    run_info,
    splice,
    write_text_if_changed,
)

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "reference"
README = HERE.parent / "README.md"
HISTORY = HERE / "HISTORY.md"
SUMMARY = HERE / "summary.png"


def write_run_goals(
    out_dir: Path, doc: Mapping[str, Any], declared: Sequence[tuple[str, Goal]], commit: str = ""
) -> list[Path]:
    """``goals.md``, ``summary.png`` and ``goal-<key>.png`` of one run in ``out_dir``.

    ``goals.md`` is the run's goals table (:func:`~benchmarks.report.goals_table`)
    followed by the pictures; it is also the "Goals" section of ``results.md``.

    ``doc`` is the run's results.json document (``commit``: the one that added it, for
    a run that did not record its own). Goals of scenarios the run did not select
    are left out (the run says nothing about them). Returns the paths written.
    """
    ran = {s["name"] for s in doc["scenarios"]}
    mine = [(name, goal) for name, goal in declared if name in ran]
    info = run_info(doc, commit)
    outcomes = evaluate_run(mine, doc["scenarios"])
    table = goals_table([Judged(o, info if o.measured else None) for o in outcomes])
    pictures = write_goal_plots(outcomes, out_dir, f"{info.when}, commit {info.commit}")
    paths = list(pictures.values())
    if outcomes:
        title = f"raftlog goals, run of {info.when} (commit {info.commit})"
        paths.append(write_summary(outcomes, out_dir / "summary.png", title))
        table += "\n![every goal at a glance](summary.png)\n"
    table += "".join(f"\n![{key}]({path.name})\n" for key, path in pictures.items())
    (out_dir / "goals.md").write_text(table)
    return [out_dir / "goals.md", *paths]


def committed_in(path: Path) -> str:
    """The short commit that first added ``path`` to git, or ``""``."""
    found = git(path.parent, "log", "--diff-filter=A", "--format=%h", "--", path.name)
    return found.split()[-1] if found else ""


def load_run(run_dir: Path) -> tuple[RunInfo, list[dict[str, Any]]]:
    """The :class:`RunInfo` and scenario entries of ``run_dir/results.json``.

    Raises ValueError naming the file when it is missing or not a results document.
    """
    path = run_dir / "results.json"
    try:
        doc = json.loads(path.read_text())
        info = run_info(doc, commit="" if doc.get("commit") else committed_in(path))
        return info, list(doc["scenarios"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a results.json of python -m benchmarks ({exc})") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks report",
        description="Judge every declared goal on the newest of the given runs that measured "
        "it; write the README's goals table, summary.png and a HISTORY.md row per run.",
    )
    parser.add_argument(
        "runs",
        nargs="*",
        type=Path,
        metavar="RUN_DIR",
        help="directories holding a results.json (default: every run under benchmarks/reference/)",
    )
    parser.add_argument("--readme", type=Path, default=README, help="default: README.md")
    parser.add_argument(
        "--history", type=Path, default=HISTORY, help="default: benchmarks/HISTORY.md"
    )
    parser.add_argument(
        "--summary", type=Path, default=SUMMARY, help="default: benchmarks/summary.png"
    )
    return parser


def main(argv: list[str]) -> int:
    """``python -m benchmarks report``; 0 on success, 2 on bad input (said on stderr)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    dirs = args.runs or sorted(p.parent for p in REFERENCE.glob("*/results.json"))
    if not dirs:
        parser.error(f"no run given and none under {REFERENCE}")
    try:
        runs = [load_run(d) for d in dirs]
        readme = args.readme.read_text()
    except (ValueError, OSError) as exc:
        parser.error(str(exc))
    declared = load_all().goals()
    judged = latest(declared, runs)
    try:
        picture = f"\n![every goal at a glance]({_rel(args.summary, args.readme)})\n"
        text = splice(readme, goals_table(judged) + picture)
    except ValueError as exc:
        parser.error(f"{args.readme}: {exc}")
    write_text_if_changed(args.readme, text)
    old = args.history.read_text() if args.history.exists() else ""
    rows = [history_row(info, evaluate_run(declared, scenarios)) for info, scenarios in runs]
    write_text_if_changed(args.history, merge_history(old, rows))
    newest = max(runs, key=lambda r: r[0].started)[0]
    title = f"raftlog goals, latest figures as of {newest.when}"
    write_summary([j.outcome for j in judged], args.summary, title)
    print(f"wrote the goals of {len(runs)} run(s) to {args.readme}, {args.history}, {args.summary}")
    return 0


def _rel(path: Path, beside: Path) -> str:
    """``path`` relative to ``beside``'s directory (as a markdown link from it)."""
    try:
        return str(path.resolve().relative_to(beside.resolve().parent))
    except ValueError:
        return str(path.resolve())
