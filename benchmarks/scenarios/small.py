"""Scenario ``small``: 100-byte records, one per request, acks=all, 1/64/256 clients.

Requests/s and latency from the shared closed-loop generator (the ``peers``
scenario runs the same one against etcd), and fsyncs per acknowledged request:
the rise of every node's fsync counter over the run divided by the requests
acknowledged, which shows how well followers and the leader coalesce flushes.
"""

from __future__ import annotations

import argparse
import asyncio

from benchmarks.context import RunContext
from benchmarks.goals import Pick, at_most, row
from benchmarks.registry import Row, scenario
from benchmarks.workloads import raftlog_local
from benchmarks.workloads.closed_loop import LoadResult, record_client_series
from benchmarks.workloads.raftlog_load import small_load

FULL_CLIENTS, QUICK_CLIENTS = (1, 64, 256), (1, 16)
FULL_SECONDS, QUICK_SECONDS = 10.0, 2.0
MAX_REQUESTS = 2_000_000
TOPIC = "bench-small"


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--small-seconds", type=float, default=None, help="seconds per client count")


def seconds_per_step(ctx: RunContext, quick: float, full: float, flag: str) -> float:
    """The duration flag if given, else the mode's default."""
    value = getattr(ctx.args, flag, None)
    return float(value) if value is not None else (quick if ctx.quick else full)


async def measure(
    ctx: RunContext, servers: list[str], counts: tuple[int, ...], seconds: float
) -> list[Row]:
    """One row per client count."""
    rows: list[Row] = []
    client = raftlog_local.client_class()(servers)
    try:
        await raftlog_local.create_topic(client, TOPIC, 1)
    finally:
        await client.close()
    fsync_seen = False
    loads: dict[int, LoadResult] = {}
    for clients in counts:
        before = raftlog_local.fsync_total(servers)
        load = await small_load(servers, TOPIC, clients, seconds, MAX_REQUESTS)
        after = raftlog_local.fsync_total(servers)
        row: Row = {
            "clients": f"{clients} clients",
            "requests/s": load.requests_per_s,
            **load.latency(),
            "errors": load.errors,
        }
        # acks=all cannot be acknowledged without a flush, so a counter that did not move
        # is a counter that is not wired, not zero fsyncs.
        if before is not None and after is not None and after > before and load.requests:
            row["fsyncs/request"] = (after - before) / load.requests
            fsync_seen = True
        if load.first_error:
            ctx.note(f"{clients} clients, first error: {load.first_error}")
        rows.append(row)
        loads[clients] = load
        ctx.advance(1)
    record_client_series(ctx, "raftlog", loads)
    if not fsync_seen:
        ctx.note(
            f"fsyncs/request not measured: the nodes' /metrics export no moving "
            f"{raftlog_local.FSYNC_COUNTER} or {raftlog_local.SYNCFS_COUNTER} samples"
        )
    return rows


GOALS = (
    at_most(
        "small-fsyncs",
        "fsyncs per acknowledged request, 64 clients",
        ours=(Pick("64 clients", row(clients="64 clients"), "fsyncs/request"),),
        bound=0.1,
    ),
)


@scenario(
    "small",
    "100-byte records, one per request, acks=all: requests/s, fsyncs/request",
    add_arguments=add_arguments,
    goals=GOALS,
)
def run(ctx: RunContext) -> list[Row]:
    counts = QUICK_CLIENTS if ctx.quick else FULL_CLIENTS
    seconds = seconds_per_step(ctx, QUICK_SECONDS, FULL_SECONDS, "small_seconds")
    ctx.set_total(len(counts))
    with (
        ctx.scratch_dir("small") as data_dir,
        raftlog_local.cluster_under_test(ctx, data_dir) as cluster,
    ):
        rows = asyncio.run(measure(ctx, cluster.servers, counts, seconds))
    ctx.note(
        f"3-node local cluster, 1 partition, R=3; closed loop, {seconds:g} s per client count; "
        "fsyncs/request = rise of all nodes' fsync and syncfs counters / acknowledged requests"
    )
    return rows
