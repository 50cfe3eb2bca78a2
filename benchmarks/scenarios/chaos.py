"""Scenario ``chaos``: the nemeses at random for N minutes, checked Jepsen-style.

``python -m benchmarks chaos --minutes N`` starts a 3-node cluster behind a
proxy per link and runs rounds until N minutes have passed: each round picks a
nemesis at random (kill -9 chase, SIGSTOP/SIGCONT, network partition via the
proxies, dropped responses, power-cut crash via ``RAFTLOG_FAILPOINTS``, torn
tail; see :mod:`benchmarks.workloads.chaos_nemeses`) and runs it against a
bounded workload of idempotent producers on a fresh topic, heals, reads every
partition back and runs :func:`raftlog.checker.check`. Each round's checker
report is printed; the rows give, per nemesis, the operations, lost,
duplicated and inconsistent counts (and the other anomaly kinds).
``--quick`` (~30 s) runs every nemesis once, in random order, with small rounds.
A round whose history shows an anomaly, or that did not complete, keeps its
history under ``<out>/chaos-histories/`` for replay.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import time

from benchmarks.context import RunContext
from benchmarks.registry import Row, Skip, require, scenario
from benchmarks.workloads import raftlog_local

QUICK_BATCHES, FULL_BATCHES = 24, 60
QUICK_CHASE, FULL_CHASE = 2, 5
DEFAULT_MINUTES = 5.0
MAX_ROUNDS = 10_000


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--minutes", type=float, default=None, help=f"chaos: how long (default {DEFAULT_MINUTES})"
    )
    group.add_argument("--chaos-seed", type=int, default=None, help="chaos: random seed")


def _rows(results: list, minutes: float) -> list[Row]:
    from raftlog.checker import FATAL_KINDS

    by_nemesis: dict[str, list] = {}
    for r in results:
        by_nemesis.setdefault(r.nemesis, []).append(r)
    rows: list[Row] = []
    for name, rounds in [*sorted(by_nemesis.items()), ("all", results)]:
        if not rounds:
            continue
        row: Row = {"nemesis": name, "rounds": len(rounds)}
        for key in ("operations", "produce_ok", "produce_unknown", "values_in_final_reads"):
            row[key] = sum(r.report.counts()[key] for r in rounds)
        row["values expected"] = sum(r.expected for r in rounds)
        for kind in FATAL_KINDS:
            row[kind] = sum(r.report.count(kind) for r in rounds)
        row["incomplete rounds"] = sum(1 for r in rounds if r.error)
        row["s"] = sum(r.seconds for r in rounds)
        rows.append(row)
    return rows


async def _run(ctx: RunContext, data_dir, minutes: float, seed: int) -> list:
    from benchmarks.workloads.chaos_nemeses import NEMESES, RoundPlan, run_round
    from benchmarks.workloads.nemesis_cluster import proxied_cluster

    rng = random.Random(seed)
    plan = RoundPlan(
        batches=QUICK_BATCHES if ctx.quick else FULL_BATCHES,
        chase=QUICK_CHASE if ctx.quick else FULL_CHASE,
    )
    names = sorted(NEMESES)
    order = rng.sample(names, len(names)) if ctx.quick else []  # quick: each once
    histories = data_dir / "histories"
    histories.mkdir()
    keep = ctx.out_dir / "chaos-histories"
    results = []
    deadline = time.monotonic() + minutes * 60.0
    with proxied_cluster(
        data_dir / "cluster", extra_args=raftlog_local.server_flags(ctx)
    ) as cluster:
        for index in range(MAX_ROUNDS):
            if ctx.quick:
                if index >= len(order):
                    break
                name = order[index]
            else:
                if time.monotonic() > deadline:
                    break
                name = rng.choice(names)
            result = await run_round(cluster, name, index, plan, rng, histories)
            results.append(result)
            status = "OK" if result.report.ok and not result.error else "FAILED"
            print(f"\n[chaos round {index}: {name}] {status}: {result.detail}")
            if result.error:
                print(f"  round did not complete: {result.error}")
            print(result.report.render())
            if status == "FAILED":
                keep.mkdir(parents=True, exist_ok=True)
                for path in histories.glob(f"{result.topic}.*"):
                    shutil.copy(path, keep / path.name)
                ctx.note(f"round {index} ({name}) failed; history in {keep}")
            ctx.advance(1 if ctx.quick else result.seconds)
    return results


@scenario(
    "chaos",
    "random nemeses under idempotent producers; the checker's lost/duplicated/inconsistent",
    add_arguments=add_arguments,
)
def run(ctx: RunContext) -> list[Row]:
    if getattr(ctx.args, "servers", None):
        raise Skip("it kills and partitions nodes, so it runs only on a cluster it starts")
    require("raftlog.checker", "check")
    require("raftlog.faults.proxy_process", "ProxyProcess")
    minutes = getattr(ctx.args, "minutes", None)
    minutes = DEFAULT_MINUTES if minutes is None else float(minutes)
    if minutes <= 0:
        raise ValueError(f"--minutes must be > 0, got {minutes}")
    seed = getattr(ctx.args, "chaos_seed", None)
    seed = random.randrange(2**32) if seed is None else int(seed)
    ctx.set_total(6 if ctx.quick else minutes * 60.0)
    from benchmarks.workloads.chaos_nemeses import no_failpoints

    start = time.monotonic()
    with ctx.scratch_dir("chaos") as data_dir, no_failpoints():
        results = asyncio.run(_run(ctx, data_dir, minutes, seed))
    ctx.note(
        f"seed {seed}; {len(results)} rounds in {time.monotonic() - start:.0f} s"
        + ("" if ctx.quick else f" (--minutes {minutes:g})")
        + "; each round: 2 partitions (R=3, acks=all), 2 idempotent producers per partition, "
        f"{QUICK_BATCHES if ctx.quick else FULL_BATCHES} one-record batches each"
    )
    return _rows(results, minutes)
