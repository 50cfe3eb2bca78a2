"""Scenario ``idempotent``: plain vs idempotent producers, 5 requests in flight each.

The same producers, batches and duration twice: once without a producer id
(plain, at-least-once) and once as idempotent producers (``init_producer``,
then sequence numbers, rm_stm deduplicating). The ratio of their throughput
and latency is the price of idempotence (goal: >= 0.9x plain).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from benchmarks.context import RunContext
from benchmarks.registry import Row, scenario
from benchmarks.scenarios.small import seconds_per_step
from benchmarks.workloads import raftlog_local
from benchmarks.workloads.raftlog_load import producers_load

IN_FLIGHT = 5
"""Kafka's limit, and the size of rm_stm's duplicate cache."""
FULL_PRODUCERS, QUICK_PRODUCERS = 4, 2
RECORD_SIZE, RECORDS_PER_BATCH = 100, 100
FULL_SECONDS, QUICK_SECONDS = 10.0, 2.0
MAX_REQUESTS = 1_000_000
TOPIC = "bench-idempotent"
FIRST_PRODUCER_ID = 7000


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--idempotent-seconds", type=float, default=None, help="seconds per mode")


async def measure(ctx: RunContext, servers: list[str], producers: int, seconds: float) -> list[Row]:
    client = raftlog_local.client_class()(servers)
    try:
        await raftlog_local.create_topic(client, TOPIC, 1)
    finally:
        await client.close()
    batch = (os.urandom(RECORD_SIZE * RECORDS_PER_BATCH), RECORDS_PER_BATCH)
    rows: list[Row] = []
    for idempotent in (False, True):
        load = await producers_load(
            servers,
            TOPIC,
            producers,
            IN_FLIGHT,
            batch,
            idempotent,
            seconds,
            MAX_REQUESTS,
            FIRST_PRODUCER_ID,
        )
        rows.append(
            {
                "producer": "idempotent" if idempotent else "plain",
                "records/s": load.requests * RECORDS_PER_BATCH / load.seconds,
                "requests/s": load.requests_per_s,
                "p50 ms": load.p50_ms,
                "p99 ms": load.p99_ms,
                "errors": load.errors,
            }
        )
        if idempotent:
            rows[-1]["out-of-order resends"] = load.resends
        if load.first_error:
            ctx.note(f"{rows[-1]['producer']}: first error: {load.first_error}")
        ctx.advance(1)
    plain, idem = rows
    ratio: Row = {"producer": "idempotent / plain"}
    for key in ("records/s", "p50 ms", "p99 ms"):
        if float(plain[key]) > 0:
            ratio[key] = float(idem[key]) / float(plain[key])
    if len(ratio) > 1:
        rows.append(ratio)
    return rows


@scenario(
    "idempotent",
    "plain vs idempotent producers at 5 in flight: throughput and latency ratio",
    add_arguments=add_arguments,
)
def run(ctx: RunContext) -> list[Row]:
    producers = QUICK_PRODUCERS if ctx.quick else FULL_PRODUCERS
    seconds = seconds_per_step(ctx, QUICK_SECONDS, FULL_SECONDS, "idempotent_seconds")
    ctx.set_total(2)
    with (
        ctx.scratch_dir("idempotent") as data_dir,
        raftlog_local.local_cluster(data_dir) as cluster,
    ):
        rows = asyncio.run(measure(ctx, cluster.servers, producers, seconds))
    ctx.note(
        f"{producers} producers x {IN_FLIGHT} in flight on 1 partition (R=3, acks=all), "
        f"batches of {RECORDS_PER_BATCH} x {RECORD_SIZE} B, {seconds:g} s per mode"
    )
    return rows
