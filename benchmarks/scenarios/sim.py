"""Scenario ``sim``: the deterministic Raft simulation over many seeds.

Runs ``raftlog.sim.run_seeds`` in chunks of seeds (so the progress bar moves)
and reports seeds per second and the number of failing seeds. A failing seed
is a finding, not a harness failure: it is reported (with the first few seeds,
to replay) and the scenario still produces its figures.

``--mutations`` instead plants each named fault of ``raftlog.raft.mutations``
in the core in turn and reports, per mutation, how many of the seeds (default
300, ``--quick`` 50) caught it; the unmutated core must fail none of them.
``--mutation NAME`` (repeatable) plants only the named ones (and the baseline).
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from typing import Any

from benchmarks.context import RunContext
from benchmarks.registry import Row, require, scenario

QUICK_SEEDS, FULL_SEEDS = 50, 10_000
QUICK_MUTATION_SEEDS, FULL_MUTATION_SEEDS = 50, 300
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
        help=f"simulation seeds to run (default {FULL_SEEDS}, --quick {QUICK_SEEDS}; with "
        f"--mutations {FULL_MUTATION_SEEDS}, --quick {QUICK_MUTATION_SEEDS})",
    )
    group.add_argument(
        "--mutations",
        action="store_true",
        help="mutation testing: plant each named fault in the Raft core and report how "
        "many seeds catch it",
    )
    group.add_argument(
        "--mutation",
        action="append",
        default=None,
        metavar="NAME",
        help="with --mutations: only this mutation (repeatable; default every one of "
        "raftlog.raft.mutations.MUTATIONS)",
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


def measure_mutations(ctx: RunContext, run_mutations: Any, format_scores: Any) -> list[Row]:
    """One row per mutation (and the unmutated baseline): seeds that caught it."""
    total = ctx.option("seeds", QUICK_MUTATION_SEEDS, FULL_MUTATION_SEEDS)
    ctx.set_total(1)
    start = time.perf_counter()
    scores = run_mutations(range(total), getattr(ctx.args, "mutation", None))
    seconds = time.perf_counter() - start
    ctx.advance(1)
    print(format_scores(scores), flush=True)
    runs = total * len(scores)
    ctx.note(f"{runs} seed runs in {seconds:.1f} s ({runs / seconds:.1f} seeds/s)")
    return [
        {
            "case": score.mutation,
            "caught": score.caught,
            "seeds": score.seeds,
            "caught %": 100 * score.fraction,
        }
        for score in scores
    ]


@scenario(
    "sim",
    "deterministic Raft simulation over many seeds: seeds per second, failures",
    add_arguments=add_arguments,
)
def run(ctx: RunContext) -> list[Row]:
    processes = os.cpu_count() or 1
    if getattr(ctx.args, "mutations", False):
        run_mutations = require("raftlog.sim.mutation", "run_mutations")
        format_scores = require("raftlog.sim.mutation", "format_scores")
        return measure_mutations(
            ctx, functools.partial(run_mutations, processes=processes), format_scores
        )
    run_seeds = require("raftlog.sim", "run_seeds")
    # Seeds are independent: spread them over every core.
    return measure(ctx, functools.partial(run_seeds, processes=processes))
