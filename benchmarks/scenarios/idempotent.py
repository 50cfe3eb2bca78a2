"""Scenario ``idempotent``: plain vs idempotent vs transactional producers, 5 in flight each.

The same producers, batches and duration in every mode:

- ``plain``: no producer id (at-least-once), one closed-loop worker per
  in-flight slot;
- ``idempotent``: the same workers as idempotent producers (``init_producer``,
  then sequence numbers, rm_stm deduplicating);
- ``idempotent (client)``: the client's own :class:`~raftlog.client.IdempotentProducer`
  (one ordered pipeline per producer, at most 5 batches unacknowledged);
- ``transactional``: the client's producer with ``transactional=True``,
  committing every ``TXN_BATCHES`` batches (a commit waits for the batches in
  flight, then writes the marker); latency is per batch, the commit's own
  latency is reported apart.

The ratios to ``plain`` are the price of idempotence (goal: >= 0.9x plain)
and of transactions.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import time

from benchmarks.context import RunContext
from benchmarks.goals import Goal, Pick, row
from benchmarks.registry import Row, scenario
from benchmarks.scenarios.small import seconds_per_step
from benchmarks.workloads import raftlog_local
from benchmarks.workloads.closed_loop import LoadResult
from benchmarks.workloads.latency import quantile
from benchmarks.workloads.raftlog_load import producers_load

IN_FLIGHT = 5
"""Kafka's limit, and the size of rm_stm's duplicate cache."""
FULL_PRODUCERS, QUICK_PRODUCERS = 4, 2
RECORD_SIZE, RECORDS_PER_BATCH = 100, 100
FULL_SECONDS, QUICK_SECONDS = 10.0, 2.0
MAX_REQUESTS = 1_000_000
TOPIC = "bench-idempotent"
FIRST_PRODUCER_ID = 7000
TXN_BATCHES = 10
"""Batches per transaction in the transactional mode."""
CLOSE_TIMEOUT_S = 10.0


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--idempotent-seconds", type=float, default=None, help="seconds per mode")


async def client_producers_load(
    servers: list[str],
    producers: int,
    batch: tuple[bytes, int],
    transactional: bool,
    seconds: float,
    first_producer_id: int,
) -> tuple[LoadResult, list[float]]:
    """``producers`` client producers on partition 0, each with at most ``IN_FLIGHT``
    batches unacknowledged; transactional ones commit every ``TXN_BATCHES`` batches.
    The time excludes closing the producers. Returns the per-batch load and the
    commit latencies (seconds)."""
    result = LoadResult(producers * IN_FLIGHT, 0.0)
    commits: list[float] = []
    ends: list[float] = []  # when each producer had every batch acknowledged (before close)
    clock = time.perf_counter
    clients = [raftlog_local.client_class()(servers) for _ in range(producers)]
    payload, count = batch

    async def one(i: int) -> None:
        prod = await clients[i].idempotent_producer(
            TOPIC,
            0,
            producer_id=first_producer_id + i,
            max_in_flight=IN_FLIGHT,
            transactional=transactional,
        )
        slots = asyncio.Semaphore(IN_FLIGHT)

        def done(fut: asyncio.Future, t0: float) -> None:
            slots.release()
            if fut.cancelled() or fut.exception() is not None:
                result.errors += 1
                if not result.first_error and not fut.cancelled():
                    exc = fut.exception()
                    result.first_error = f"{type(exc).__name__}: {exc}"
            else:
                result.latencies_s.append(clock() - t0)

        try:
            for _ in range(MAX_REQUESTS):
                if clock() >= deadline or result.requests >= MAX_REQUESTS:
                    break
                futures = []
                for _ in range(TXN_BATCHES):
                    await slots.acquire()
                    t0 = clock()
                    fut = prod.send_batch(payload, count)
                    fut.add_done_callback(lambda f, t0=t0: done(f, t0))
                    futures.append(fut)
                if transactional:
                    await asyncio.gather(*futures, return_exceptions=True)
                    t0 = clock()
                    await prod.commit()
                    commits.append(clock() - t0)
            with contextlib.suppress(Exception):
                await prod.flush()
            ends.append(clock())
        finally:
            with contextlib.suppress(Exception):
                # bounded: close() can hang with requests in flight (a client bug)
                await asyncio.wait_for(prod.close(), CLOSE_TIMEOUT_S)

    start = clock()
    deadline = start + seconds
    try:
        await asyncio.gather(*(one(i) for i in range(producers)))
    finally:
        for c in clients:
            await c.close()
    result.seconds = (max(ends) if len(ends) == producers else clock()) - start
    return result, commits


async def measure(ctx: RunContext, servers: list[str], producers: int, seconds: float) -> list[Row]:
    client = raftlog_local.client_class()(servers)
    try:
        await raftlog_local.create_topic(client, TOPIC, 1)
    finally:
        await client.close()
    batch = (os.urandom(RECORD_SIZE * RECORDS_PER_BATCH), RECORDS_PER_BATCH)
    rows: list[Row] = []
    modes = ("plain", "idempotent", "idempotent (client)", "transactional")
    for n, mode in enumerate(modes):
        first_id = FIRST_PRODUCER_ID + 100 * n
        commits: list[float] = []
        if mode in ("plain", "idempotent"):
            load = await producers_load(
                servers,
                TOPIC,
                producers,
                IN_FLIGHT,
                batch,
                mode == "idempotent",
                seconds,
                MAX_REQUESTS,
                first_id,
            )
        else:
            load, commits = await client_producers_load(
                servers, producers, batch, mode == "transactional", seconds, first_id
            )
        row: Row = {
            "producer": mode,
            "records/s": load.requests * RECORDS_PER_BATCH / load.seconds,
            "requests/s": load.requests_per_s,
            **load.latency(),
            "errors": load.errors,
        }
        if mode == "idempotent":
            row["out-of-order resends"] = load.resends
        if commits:
            row["commits/s"] = len(commits) / load.seconds
            row["commit p50 ms"] = quantile(commits, 50.0) * 1e3
        rows.append(row)
        if load.first_error:
            ctx.note(f"{mode}: first error: {load.first_error}")
        ctx.advance(1)
    plain = rows[0]
    for other in rows[1:]:
        ratio: Row = {"producer": f"{other['producer']} / plain"}
        for key in ("records/s", "p50 ms", "p99 ms"):
            if float(plain[key]) > 0:
                ratio[key] = float(other[key]) / float(plain[key])
        if len(ratio) > 1:
            rows.append(ratio)
    return rows


GOALS = (
    Goal(
        "idempotent",
        "idempotent writes against plain ones, 5 in flight",
        ours=(Pick("idempotent", row(producer="idempotent"), "records/s"),),
        peers=(Pick("plain", row(producer="plain"), "records/s"),),
        target=0.9,
    ),
)


@scenario(
    "idempotent",
    "plain vs idempotent vs transactional producers at 5 in flight: throughput, latency, ratios",
    add_arguments=add_arguments,
    goals=GOALS,
)
def run(ctx: RunContext) -> list[Row]:
    producers = QUICK_PRODUCERS if ctx.quick else FULL_PRODUCERS
    seconds = seconds_per_step(ctx, QUICK_SECONDS, FULL_SECONDS, "idempotent_seconds")
    ctx.set_total(4)
    with (
        ctx.scratch_dir("idempotent") as data_dir,
        raftlog_local.cluster_under_test(ctx, data_dir) as cluster,
    ):
        rows = asyncio.run(measure(ctx, cluster.servers, producers, seconds))
    ctx.note(
        f"{producers} producers x {IN_FLIGHT} in flight on 1 partition (R=3, acks=all), "
        f"batches of {RECORDS_PER_BATCH} x {RECORD_SIZE} B, {seconds:g} s per mode; "
        f"transactional: a commit every {TXN_BATCHES} batches per producer"
    )
    return rows
