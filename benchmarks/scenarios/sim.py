"""Scenario ``sim``: the deterministic Raft simulation over many seeds.

Runs ``raftlog.sim.run_seeds`` in chunks of seeds (so the progress bar moves)
and reports seeds per second and the number of failing seeds. A failing seed
is a finding, not a harness failure: it is reported (with the first few seeds,
to replay) and the scenario still produces its figures.
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any

from benchmarks.context import RunContext
from benchmarks.registry import Row, require, scenario

QUICK_SEEDS, FULL_SEEDS = 200, 10_000
CHUNK = 50
"""Seeds per call of run_seeds: small enough for a lively bar, large enough to amortize."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--seeds",
        type=_positive_int,
        default=None,
        help=f"simulation seeds to run (default {FULL_SEEDS}, --quick {QUICK_SEEDS})",
    )


def failing_seeds(summary: Any) -> list[int]:
    """The failing seeds of a :class:`raftlog.sim.runner.Summary` (its ``failed`` results)."""
    return [result.seed for result in summary.failed]


def measure(ctx: RunContext, run_seeds: Any) -> list[Row]:
    """Run ``ctx``'s number of seeds (0..n-1) through ``run_seeds``; one row of figures."""
    total = ctx.option("seeds", QUICK_SEEDS, FULL_SEEDS)
    ctx.set_total(total)
    failed: list[int] = []
    start = time.perf_counter()
    for first in range(0, total, CHUNK):
        seeds = list(range(first, min(first + CHUNK, total)))
        failed += failing_seeds(run_seeds(seeds))
        ctx.advance(len(seeds))
    seconds = time.perf_counter() - start
    if failed:
        ctx.note(f"failing seeds (first 20, replay each alone): {failed[:20]}")
    return [
        {
            "case": f"{total} seeds",
            "seeds/s": total / seconds,
            "failures": len(failed),
            "seconds": seconds,
        }
    ]


@scenario(
    "sim",
    "deterministic Raft simulation over many seeds: seeds per second, failures",
    add_arguments=add_arguments,
)
def run(ctx: RunContext) -> list[Row]:
    run_seeds = require("raftlog.sim", "run_seeds")
    # Seeds are independent: spread them over every core.
    return measure(ctx, functools.partial(run_seeds, processes=os.cpu_count() or 1))
