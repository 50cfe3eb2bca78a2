"""Scenario ``kafka``: the Kafka protocol door against the native client, same run.

On one local 3-node cluster, 100-byte records to one partition (R=3, acks=all):

- ``native client``: the raftlog client's batched produce (batches of 1,000 records,
  4 in flight: the ``peers`` scenario's batched load; latency per batch request),
  then a read of everything written by 1 MiB fetches, one at a time, counting each
  batch's records;
- ``Kafka (confluent-kafka)``: librdkafka's idempotent producer with its defaults
  (latency per record, from ``produce()`` to its delivery report; see
  :func:`benchmarks.workloads.kafka_load.kafka_produce` for why one request is in
  flight), then a consumer assigned the partition reading everything from its
  beginning; then the same producer with at most 1,000 records queued, whose latency
  is a round trip's rather than librdkafka's queue's (100,000 records by default);
- ``Kafka (confluent-kafka), fetch.queue.backoff.ms 0``: a second consumer that does not
  put its next fetch off once its queue has been full (librdkafka's default waits up to
  1 s): what the listener serves when the client asks without pause;
- ``Kafka / native``: the ratios (goals: produce >= 0.5x, consume >= 0.7x);
- ``native client, 1 batch of 9,000 in flight``: the native client in librdkafka's
  shape (one ~1 MB batch at a time), and ``confluent-kafka consume(), all prefetched``:
  the consumer's own ceiling with no fetch in the timing: what bounds each Kafka path;
- ``nodes CPU us/record`` (the three nodes' processes, less their idle rate sampled
  for 2 s before the loads) and ``client CPU us/record``
  (this process: the producer's Python loop and librdkafka's threads) over each
  producing run: where a record's CPU goes on a machine the client shares;
- ``conversion``: the listener's CPU per record, measured in this process: a
  produced RecordBatch v2 into raftlog's keyed payload, a stored batch into a
  RecordBatch v2 for a fetch.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

from benchmarks.context import RunContext
from benchmarks.goals import Goal, Pick, row
from benchmarks.registry import Row, Skip, scenario
from benchmarks.scenarios.small import seconds_per_step
from benchmarks.workloads import raftlog_local
from benchmarks.workloads.kafka_load import (
    RECORD_SIZE,
    confluent,
    conversion_cost,
    kafka_consume,
    kafka_consume_prefetched,
    kafka_produce,
    latency,
    native_consume,
)
from benchmarks.workloads.process_cpu import tree_cpu_seconds
from benchmarks.workloads.raftlog_load import batched_load

FULL_SECONDS, QUICK_SECONDS = 10.0, 2.0
RECORDS_PER_BATCH = 1000
IN_FLIGHT = 4
MAX_REQUESTS = 1_000_000
NATIVE_TOPIC, KAFKA_TOPIC = "bench-native", "bench-kafka"
SHORT_QUEUE = 1000
NO_BACKOFF = {"fetch.queue.backoff.ms": 0}
"""The second consumer's setting: it fetches again as soon as its queue is below
queued.min.messages, where librdkafka's default puts the fetch off (up to 1 s) once the
queue has been full. What is left is the client's own ceiling against the listener."""
"""The second Kafka producer's queue bound (records): one batch of them at a time."""
IDLE_SECONDS = 2.0
"""How long the idle nodes' CPU is sampled before the loads."""
SHAPE_TOPIC = "bench-native-shape"
SHAPE_RECORDS = 9000
"""Records of librdkafka's batches of 100-byte records (batch.size 1,000,000 bytes)."""


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--kafka-seconds", type=float, default=None, help="seconds of producing per path"
    )


def idle_cpu_rate(pids: list[int], seconds: float = IDLE_SECONDS) -> float:
    """CPU seconds per second the idle nodes ``pids`` use (heartbeats, timers), which
    the CPU per record columns leave out."""
    cpu, start = tree_cpu_seconds(pids), time.monotonic()
    time.sleep(seconds)
    return (tree_cpu_seconds(pids) - cpu) / (time.monotonic() - start)


async def native(
    servers: list[str], seconds: float, pids: list[int], idle: float
) -> tuple[Row, Row, Row]:
    client = raftlog_local.client_class()(servers)
    try:
        for topic in (NATIVE_TOPIC, KAFKA_TOPIC, SHAPE_TOPIC):
            await raftlog_local.create_topic(client, topic, 1)
        batch = (os.urandom(RECORD_SIZE * RECORDS_PER_BATCH), RECORDS_PER_BATCH)
        load = await batched_load(
            servers, NATIVE_TOPIC, 1, batch, "all", IN_FLIGHT, seconds, MAX_REQUESTS
        )
        records = load.requests * RECORDS_PER_BATCH
        read, read_s = await native_consume(client, NATIVE_TOPIC, records)
        # librdkafka's shape: one request of a ~1 MB batch at a time
        big = (os.urandom(RECORD_SIZE * SHAPE_RECORDS), SHAPE_RECORDS)
        nodes_cpu, start = tree_cpu_seconds(pids), time.monotonic()
        shaped = await batched_load(servers, SHAPE_TOPIC, 1, big, "all", 1, seconds, MAX_REQUESTS)
        nodes_cpu = tree_cpu_seconds(pids) - nodes_cpu - idle * (time.monotonic() - start)
    finally:
        await client.close()
    cols = load.latency()
    row: Row = {
        "path": "native client",
        "produce records/s": records / load.seconds,
        "p50 ms": cols.get("p50 ms", 0.0),
        "p99 ms": cols.get("p99 ms", 0.0),
        "consume records/s": read / read_s if read_s > 0 else 0.0,
        "errors": load.errors,
    }
    shape_cols = shaped.latency()
    shape: Row = {
        "path": f"native client, 1 batch of {SHAPE_RECORDS:,} in flight",
        "produce records/s": shaped.requests * SHAPE_RECORDS / shaped.seconds,
        "p50 ms": shape_cols.get("p50 ms", 0.0),
        "p99 ms": shape_cols.get("p99 ms", 0.0),
        "errors": shaped.errors,
        **_per_record("nodes CPU us/record", nodes_cpu, shaped.requests * SHAPE_RECORDS),
    }
    return row, shape, {"records": records, "read": read}


def _per_record(column: str, cpu_s: float, records: int) -> Row:
    """``{column: microseconds of cpu_s per record}``, or nothing without records."""
    return {column: cpu_s * 1e6 / records} if records > 0 else {}


GOALS = (
    Goal(
        "kafka-produce",
        "Kafka clients: produce (confluent-kafka, idempotent, acks=all, 100 B)",
        ours=(Pick("Kafka listener", row(path="Kafka (confluent-kafka)"), "produce records/s"),),
        peers=(Pick("native client", row(path="native client"), "produce records/s"),),
        target=0.5,
    ),
    Goal(
        "kafka-consume",
        "Kafka clients: consume (confluent-kafka)",
        ours=(Pick("Kafka listener", row(path="Kafka (confluent-kafka)"), "consume records/s"),),
        peers=(Pick("native client", row(path="native client"), "consume records/s"),),
        target=0.7,
    ),
)


@scenario(
    "kafka",
    "confluent-kafka produce/consume through the Kafka listener vs the native client: "
    "records/s, p50/p99, ratios, conversion CPU per record",
    add_arguments=add_arguments,
    goals=GOALS,
)
def run(ctx: RunContext) -> list[Row]:
    confluent()  # skip before starting a cluster when it is missing
    seconds = seconds_per_step(ctx, QUICK_SECONDS, FULL_SECONDS, "kafka_seconds")
    if getattr(ctx.args, "servers", None):
        raise Skip("needs the local cluster it starts (--servers gives no Kafka bootstrap)")
    ctx.set_total(3)
    with (
        ctx.scratch_dir("kafka") as data_dir,
        raftlog_local.local_cluster(data_dir, ctx=ctx) as cluster,
    ):
        bootstrap = cluster.kafka_bootstrap
        pids = [n.pid for n in cluster.nodes]
        idle = idle_cpu_rate(pids)
        mine, shape, counts = asyncio.run(native(cluster.servers, seconds, pids, idle))
        ctx.advance(1)
        nodes_cpu, start = tree_cpu_seconds(pids), time.monotonic()
        produced = kafka_produce(bootstrap, KAFKA_TOPIC, seconds, MAX_REQUESTS)
        nodes_cpu = tree_cpu_seconds(pids) - nodes_cpu - idle * (time.monotonic() - start)
        read, read_s = kafka_consume(bootstrap, KAFKA_TOPIC, produced.records)
        eager, eager_s = kafka_consume(bootstrap, KAFKA_TOPIC, produced.records, NO_BACKOFF)
        ceiling = kafka_consume_prefetched(bootstrap, KAFKA_TOPIC, produced.records)
        # the same producer with a short queue: latency without librdkafka's queueing
        short = kafka_produce(bootstrap, KAFKA_TOPIC, seconds, MAX_REQUESTS, SHORT_QUEUE)
        ctx.advance(1)
    theirs: Row = {
        "path": "Kafka (confluent-kafka)",
        "produce records/s": produced.records_per_s,
        **latency(produced.latencies_s),
        "consume records/s": read / read_s if read_s > 0 else 0.0,
        "errors": produced.errors,
        **_per_record("nodes CPU us/record", nodes_cpu, produced.records),
        **_per_record("client CPU us/record", produced.client_cpu_s, produced.records),
    }
    queued: Row = {
        "path": f"Kafka (confluent-kafka), {SHORT_QUEUE:,} queued",
        "produce records/s": short.records_per_s,
        **latency(short.latencies_s),
        "errors": short.errors,
    }
    for p in (produced, short):
        if p.first_error:
            ctx.note(f"Kafka produce: first error: {p.first_error}")
    if min(read, eager) < produced.records or counts["read"] < counts["records"]:
        ctx.note(
            f"read back {read} and {eager} (fetch.queue.backoff.ms 0) of "
            f"{produced.records} (Kafka) and {counts['read']} of {counts['records']} "
            "(native) before the read timeout"
        )
    no_backoff: Row = {
        "path": "Kafka (confluent-kafka), fetch.queue.backoff.ms 0",
        "consume records/s": eager / eager_s if eager_s > 0 else 0.0,
    }
    prefetched: Row = {
        "path": "confluent-kafka consume(), all prefetched (the client's ceiling)",
        "consume records/s": ceiling,
    }
    ratio: Row = {"path": "Kafka / native"}
    for key in ("produce records/s", "consume records/s"):
        if float(mine[key]) > 0:
            ratio[key] = float(theirs[key]) / float(mine[key])
    cost = conversion_cost()
    ctx.advance(1)
    ctx.note(
        f"1 partition (R=3, acks=all), {RECORD_SIZE}-byte records, {seconds:g} s of "
        f"producing per path; native: batches of {RECORDS_PER_BATCH} records, "
        f"{IN_FLIGHT} in flight, latency per batch; Kafka: acks=all, "
        "enable.idempotence=true and librdkafka's defaults otherwise (linger.ms 5, "
        "batch.size 1 MB, max.in.flight 5 under idempotence; one produce request in "
        "flight per partition: an idempotent librdkafka producer counts records, not "
        "requests, against that window), consumer defaults (max.partition.fetch.bytes "
        "1 MiB, fetch.wait.max.ms 500, fetch.queue.backoff.ms 1,000; a second "
        "consumer sets fetch.queue.backoff.ms 0), "
        f"latency per record (with the default queue of 100,000 records, mostly the wait "
        f"in it; a second run queues at most {SHORT_QUEUE:,}); each path "
        "then reads what it wrote from offset 0. Goals: Kafka produce >= 0.5x and "
        "consume >= 0.7x of native"
    )
    bound: Row = {"path": f"Kafka / native, 1 batch of {SHAPE_RECORDS:,} in flight"}
    if float(shape["produce records/s"]) > 0:
        bound["produce records/s"] = float(theirs["produce records/s"]) / float(
            shape["produce records/s"]
        )
    if float(mine["consume records/s"]) > 0:
        prefetched["Kafka / native"] = ceiling / float(mine["consume records/s"])
    conversion = {"path": "conversion (CPU per record)", **cost}
    return [mine, shape, theirs, queued, no_backoff, prefetched, ratio, bound, conversion]
