"""Scenario ``failover``: kill -9 a partition leader under load, N times.

Time from SIGKILL to the first write acknowledged by the new leader (p50, p95,
p99, p99.9 and max over the rounds, 20 by default; goals p50 <= 1 s, p99 <= 2 s).
Between rounds the killed node is restarted and caught up, so every round starts
from a healthy 3-node cluster.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import math

from benchmarks.context import RunContext
from benchmarks.goals import Pick, at_most, row
from benchmarks.registry import Row, Skip, scenario
from benchmarks.workloads import failover_round, raftlog_local
from benchmarks.workloads.latency import latency_columns

FULL_ROUNDS, QUICK_ROUNDS = 20, 2
PLOTTED_ROUNDS = 5
BIN_S = 0.1


def acks_per_second(ack_times: list[float]) -> list[tuple[float, float]]:
    """(bin start, acks/s) over ``BIN_S`` bins from the first ack to the last, empty
    bins included: the gap of a failover shows as zeros."""
    if not ack_times:
        return []
    first = math.floor(min(ack_times) / BIN_S)
    counts = collections.Counter(math.floor(t / BIN_S) - first for t in ack_times)
    return [((first + b) * BIN_S, counts[b] / BIN_S) for b in range(max(counts) + 1)]


TOPIC = "bench-failover"


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--failover-rounds", type=int, default=None, help="leader kills")


async def measure(ctx: RunContext, cluster: object, rounds: int) -> list[Row]:
    servers = cluster.servers  # type: ignore[attr-defined]
    meta = raftlog_local.client_class()(servers, request_timeout_s=raftlog_local.REQUEST_TIMEOUT_S)
    pool = raftlog_local.ClientPool(servers, failover_round.WORKERS)
    rows: list[Row] = []
    times: list[float] = []
    unrecovered = 0
    try:
        await raftlog_local.create_topic(meta, TOPIC, 1)
        for i in range(rounds):
            result = await failover_round.run_round(cluster, TOPIC, meta, pool)
            label = f"round {i + 1}: killed node {result.killed}, new leader {result.new_leader}"
            if result.recovery_s is None:
                unrecovered += 1
                ctx.note(f"{label}: no write acknowledged within the bound")
            else:
                times.append(result.recovery_s)
                rows.append({"case": label, "s to first ack": result.recovery_s})
            if i < PLOTTED_ROUNDS:
                ctx.add_series(
                    "acknowledged writes across a leader kill (t = 0: SIGKILL)",
                    f"round {i + 1}",
                    "s from SIGKILL",
                    "acks/s",
                    acks_per_second(result.ack_times),
                )
            ctx.advance(1)
    finally:
        await pool.close()
        await meta.close()
    summary: Row = {"case": f"{rounds} leader kills", "unrecovered": unrecovered}
    summary.update(latency_columns(times, unit="s"))
    return [summary, *rows]


GOALS = tuple(
    at_most(
        f"failover-{q}",
        f"leader kill to first acknowledged write, {q}",
        (Pick(q, row(case="* leader kills"), f"{q} s"),),
        bound,
        unit="s",
    )
    for q, bound in (("p50", 1.0), ("p99", 2.0))
)


@scenario(
    "failover",
    "kill -9 a leader under load: time to the first acknowledged write (p50 .. max)",
    add_arguments=add_arguments,
    goals=GOALS,
)
def run(ctx: RunContext) -> list[Row]:
    if getattr(ctx.args, "servers", None):
        raise Skip("it kills nodes by PID, so it runs only on a local cluster it starts")
    rounds = ctx.option("failover_rounds", quick=QUICK_ROUNDS, full=FULL_ROUNDS)
    ctx.set_total(rounds)
    with (
        ctx.scratch_dir("failover") as data_dir,
        raftlog_local.local_cluster(data_dir, ctx=ctx) as cluster,
    ):
        rows = asyncio.run(measure(ctx, cluster, rounds))
    ctx.note(
        f"3-node local cluster, 1 partition, {failover_round.WORKERS} writers of 100-byte "
        "records at acks=all; clock from SIGKILL to the first ack after the PID is gone"
    )
    return rows
