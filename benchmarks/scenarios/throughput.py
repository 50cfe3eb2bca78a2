"""Scenario ``throughput``: large batches into a 3-node local cluster.

One and six partitions, 100-byte and 1 KiB records packed into ~256 KiB
batches (one batch per request, a few requests in flight per partition), at
acks all, 1 and 0; then 100-byte records in 4 MiB batches at acks all, the
size of the Spark sink's chunks (``chunkBytes``): MB/s, records/s and request
latency. When ``disk`` ran
earlier in the same invocation, MB/s is also shown as a fraction of the
R=3 ceiling (the disk's MB/s with an fsync every 16 MiB, divided by 3).
"""

from __future__ import annotations

import argparse
import asyncio
import os

from pyspark_raftlog.options import DEFAULT_CHUNK_BYTES

from benchmarks.context import RunContext
from benchmarks.goals import Goal, Pick, row
from benchmarks.registry import Row, scenario
from benchmarks.scenarios.small import seconds_per_step
from benchmarks.workloads import raftlog_local
from benchmarks.workloads.raftlog_load import batched_load

PARTITIONS = (1, 6)
RECORD_SIZES = (100, 1024)
ACKS = ("all", "1", "0")
BATCH_BYTES = 256 * 1024
SINK_BATCH_BYTES = DEFAULT_CHUNK_BYTES
"""What the Spark sink sends per request (its default chunkBytes)."""
RETENTION_BYTES = 512 * 1024 * 1024
"""Per partition: retention (checked every 10 s) bounds what the cases leave on disk. Without
it the 14 cases of 8 s wrote 15 GB per node, 45 GB in all, and filled the disk."""
IN_FLIGHT = 4
"""Requests outstanding per partition: enough to keep the leader's pipeline full."""
FULL_SECONDS, QUICK_SECONDS = 8.0, 1.0
MAX_REQUESTS = 1_000_000
CEILING_KEY = "R=3 ceiling MB/s"


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--throughput-seconds", type=float, default=None, help="seconds per case")


def cases() -> list[tuple[int, int, str, int]]:
    """(partitions, record bytes, acks, batch bytes) of every case, in order."""
    grid = [
        (partitions, size, acks, BATCH_BYTES)
        for partitions in PARTITIONS
        for size in RECORD_SIZES
        for acks in ACKS
    ]
    return grid + [(partitions, 100, "all", SINK_BATCH_BYTES) for partitions in PARTITIONS]


def disk_ceiling(ctx: RunContext) -> float | None:
    """The best R=3 ceiling the ``disk`` scenario measured in this run, if it ran."""
    ceilings = [
        row[CEILING_KEY]
        for row in ctx.earlier_rows("disk")
        if isinstance(row.get(CEILING_KEY), int | float)
    ]
    return float(max(ceilings)) if ceilings else None  # type: ignore[arg-type]


async def measure(ctx: RunContext, servers: list[str], seconds: float) -> list[Row]:
    ceiling = disk_ceiling(ctx)
    client = raftlog_local.client_class()(servers)
    try:
        for partitions in PARTITIONS:
            await raftlog_local.create_topic(
                client,
                f"bench-tp{partitions}",
                partitions,
                {"retention.bytes": str(RETENTION_BYTES)},
            )
    finally:
        await client.close()
    rows: list[Row] = []
    for partitions, size, acks, batch_bytes in cases():
        count = batch_bytes // size
        batch = (os.urandom(size * count), count)
        settled = await raftlog_local.wait_replicas_caught_up(servers)
        if settled is None:
            ctx.note(
                f"{partitions} partition(s), {size} B, acks={acks}: replicas had not "
                f"caught up after {raftlog_local.SETTLE_TIMEOUT_S:g} s; measured anyway"
            )
        load = await batched_load(
            servers,
            f"bench-tp{partitions}",
            partitions,
            batch,
            acks,
            IN_FLIGHT,
            seconds,
            MAX_REQUESTS,
        )
        mb_s = load.requests * len(batch[0]) / 1e6 / load.seconds
        label = f"{partitions} partition(s), {size} B records"
        if batch_bytes != BATCH_BYTES:
            label += f" in {batch_bytes // (1024 * 1024)} MiB batches"
        row: Row = {
            "case": f"{label}, acks={acks}",
            "MB/s": mb_s,
            "records/s": load.requests * count / load.seconds,
            **load.latency(),
            "errors": load.errors,
        }
        if ceiling:
            row["of R=3 disk ceiling"] = mb_s / ceiling
        if load.first_error:
            ctx.note(f"{row['case']}: first error: {load.first_error}")
        rows.append(row)
        ctx.advance(1)
    if ceiling is None:
        ctx.note("run `disk` in the same invocation to see MB/s as a fraction of the ceiling")
    else:
        ctx.note(f"R=3 disk ceiling from `disk` in this run: {ceiling:.1f} MB/s")
    return rows


_CEILING = (
    Pick(
        "R=3 disk ceiling",
        row(case="sequential write, fsync every *"),
        CEILING_KEY,
        "disk",
        detail="case",
    ),
)


def _of_ceiling(key: str, what: str, partitions: int, records: str) -> Goal:
    """``≥ 0.5`` of the R=3 disk ceiling measured by ``disk`` in the same run."""
    name = f"{partitions} partition{'s' * (partitions > 1)}"
    case = f"{partitions} partition(s), {records}, acks=all"
    return Goal(key, what, (Pick(name, row(case=case), "MB/s"),), 0.5, peers=_CEILING)


GOALS = (
    _of_ceiling(
        "throughput-4mib-1",
        "replicated MB/s, the sink's 4 MiB batches, 1 partition",
        1,
        "100 B records in 4 MiB batches",
    ),
    _of_ceiling(
        "throughput-4mib-6",
        "replicated MB/s, the sink's 4 MiB batches, 6 partitions",
        6,
        "100 B records in 4 MiB batches",
    ),
    _of_ceiling(
        "throughput-small-6",
        "replicated MB/s, ~256 KiB batches of 100 B records, 6 partitions",
        6,
        "100 B records",
    ),
)


@scenario(
    "throughput",
    "large batches, 1 and 6 partitions, 100 B / 1 KiB records, acks all/1/0, and the sink's "
    "4 MiB batches: MB/s",
    add_arguments=add_arguments,
    goals=GOALS,
)
def run(ctx: RunContext) -> list[Row]:
    seconds = seconds_per_step(ctx, QUICK_SECONDS, FULL_SECONDS, "throughput_seconds")
    ctx.set_total(len(cases()))
    with (
        ctx.scratch_dir("throughput") as data_dir,
        raftlog_local.cluster_under_test(ctx, data_dir) as cluster,
    ):
        rows = asyncio.run(measure(ctx, cluster.servers, seconds))
    ctx.note(
        f"3-node local cluster on one disk, R=3; ~{BATCH_BYTES // 1024} KiB batches (4 MiB where "
        f"the case says so), one per request, {IN_FLIGHT} in flight per partition, "
        f"{seconds:g} s per case, retention.bytes {RETENTION_BYTES >> 20} MiB per partition; "
        "each case "
        "starts once every replica holds the same log end (an acks=0 burst leaves a backlog)"
    )
    return rows
