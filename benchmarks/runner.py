"""Running the selected scenarios one after another, each with its own progress bar."""

from __future__ import annotations

import argparse
import time
import traceback
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from benchmarks.context import RunContext
from benchmarks.registry import Scenario, Skip
from benchmarks.results import ScenarioResult, validate_rows


def run_one(scenario: Scenario, ctx: RunContext) -> ScenarioResult:
    """Run ``scenario``; a :class:`Skip` becomes "skipped", any other error "failed".

    Never raises for a scenario's own errors (KeyboardInterrupt still propagates):
    one broken scenario must not lose the results of the others.
    """
    start = time.perf_counter()
    result = ScenarioResult(
        scenario.name, scenario.description, "ok", notes=ctx.notes, series=ctx.series
    )
    try:
        result.rows = validate_rows(scenario.run(ctx))
    except Skip as skip:
        result.status, result.reason = "skipped", skip.reason
    except Exception as exc:
        result.status, result.reason = "failed", f"{type(exc).__name__}: {exc}"
        result.notes.append(traceback.format_exc())
    result.seconds = time.perf_counter() - start
    return result


def run_all(
    scenarios: list[Scenario],
    *,
    quick: bool,
    out_dir: Path,
    args: argparse.Namespace,
    console: Console,
) -> list[ScenarioResult]:
    """Run ``scenarios`` in order, showing a progress bar per scenario on ``console``."""
    results = []
    columns = (
        TextColumn("{task.description:<10}"),
        BarColumn(),
        TextColumn("{task.percentage:>5.1f}%"),
        TimeElapsedColumn(),
        TextColumn("{task.fields[status]}"),
    )
    with Progress(*columns, console=console) as progress:
        for scenario in scenarios:
            task = progress.add_task(scenario.name, total=1.0, status="")

            def set_total(total: float, task: int = task) -> None:
                progress.update(task, total=max(total, 1e-9), completed=0)

            def advance(amount: float, task: int = task) -> None:
                progress.advance(task, amount)

            ctx = RunContext(quick, out_dir, args, set_total, advance, earlier=list(results))
            result = run_one(scenario, ctx)
            total = progress.tasks[task].total or 1.0
            progress.update(task, completed=total, status=result.detail or "done")
            results.append(result)
    return results
