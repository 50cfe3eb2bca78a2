"""The Spark sink's task write against a real cluster, without Spark: how rows that wait
for a full ``chunkBytes`` payload are sent (option ``lingerMs``, Kafka's ``linger.ms``).

A task's input is pulled from Spark in Arrow batches (10,000 rows each, some 50-100 ms
apart per task when the JVM is busy). Rows are joined across those batches into payloads of
``chunkBytes``, and waiting rows go once the first of them has waited ``lingerMs``. These
tests drive the writer's ``write()`` with a Python iterator standing in for Spark's input
(outside a Spark task it writes at-least-once with attempt and partition of its own), and
read back the record batches the log stored.
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType
from pyspark_raftlog.datasource import DefaultSource
from pyspark_raftlog.sink import RaftlogCommitMessage

from raftlog.client import RaftlogClient

SCHEMA = StructType([StructField("value", LongType()), StructField("payload", StringType())])
# Kafka's columns: written as raw records (Kafka's framing), not as Arrow IPC
KAFKA_SCHEMA = StructType([StructField("key", BinaryType()), StructField("value", BinaryType())])
ROW_BYTES = 100
WAIT_S = 30.0  # bound on every wait below


def arrow_batch(start: int, rows: int, kafka: bool = False) -> pa.RecordBatch:
    values = list(range(start, start + rows))
    if kafka:
        return pa.record_batch(
            [
                pa.array([b"k%d" % v for v in values], pa.binary()),
                pa.array([b"%0*d" % (ROW_BYTES, v) for v in values], pa.binary()),
            ],
            names=["key", "value"],
        )
    return pa.record_batch(
        [pa.array(values, pa.int64()), pa.array([f"{v:0{ROW_BYTES}d}" for v in values])],
        names=["value", "payload"],
    )


def stream_writer(servers: str, topic: str, schema: StructType = SCHEMA, **options: str):
    opts = {
        "topic": topic,
        "servers": servers,
        "deliveryGuarantee": "at-least-once",
        "partitions": "1",
        "replicationFactor": "3",
        **options,
    }
    return DefaultSource(opts).streamWriter(schema, False)


def stored_batches(servers: list[str], topic: str) -> list[tuple[int, int]]:
    """(base offset, record count) of every data batch of ``topic``'s partition 0."""

    async def read() -> list[tuple[int, int]]:
        client = RaftlogClient(servers)
        try:
            out, offset = [], 0
            for _ in range(10_000):
                r = await client.fetch(topic, 0, offset, max_bytes=64 << 20)
                out += [(b.base_offset, b.record_count) for b in r.batches]
                if r.next_offset >= r.high_watermark:
                    return out
                # a fetch that makes no progress short of the end is a failure, not the end
                assert r.next_offset > offset, f"fetch at {offset} of {topic} made no progress"
                offset = r.next_offset
            raise AssertionError(f"reading {topic} did not reach its end")
        finally:
            await client.close()

    return asyncio.run(read())


@pytest.mark.parametrize("kafka", [False, True], ids=["arrow", "kafka-records"])
def test_rows_of_slow_spark_batches_are_joined_into_full_payloads(
    raftlog_cluster, kafka: bool
) -> None:
    """Spark batches 80 ms apart (the old 20 ms stall rule sent each one alone) are
    joined into payloads of ``chunkBytes``: 24 batches of 2,500 rows (~0.3 MB each) into
    1 MiB payloads, so 7-9 stored batches, not 24. The same for Kafka's columns, written
    as raw records (which went one payload per Spark batch, whatever the linger)."""
    topic = f"linger-join-{uuid.uuid4().hex[:8]}"
    schema = KAFKA_SCHEMA if kafka else SCHEMA
    writer = stream_writer(raftlog_cluster.bootstrap, topic, schema, chunkBytes="1m")
    rows, count = 2_500, 24

    def spark_input() -> Iterator[pa.RecordBatch]:
        for i in range(count):
            time.sleep(0.08)
            yield arrow_batch(i * rows, rows, kafka)

    message = writer.write(spark_input())
    assert isinstance(message, RaftlogCommitMessage)
    assert message.write.records == rows * count
    batches = stored_batches(raftlog_cluster.servers, topic)
    assert sum(n for _, n in batches) == rows * count
    # ~0.3 MB per Spark batch: 3 of them fit a 1 MiB payload (the last payload is the rest)
    assert len(batches) <= 9, f"payloads were not joined: {len(batches)} stored batches"
    assert all(n >= 3 * rows for _, n in batches[:-1]), batches


def test_rows_of_a_stalled_upstream_go_after_linger(raftlog_cluster) -> None:
    """An upstream that passes on a few rows, then blocks: the rows reach the log about
    ``lingerMs`` after they came, while the task's input is still blocked (they do not
    wait for a full payload, nor for the task's end), and not sooner."""
    topic = f"linger-stall-{uuid.uuid4().hex[:8]}"
    linger_ms = 700
    writer = stream_writer(raftlog_cluster.bootstrap, topic, lingerMs=str(linger_ms))
    release = threading.Event()
    passed_on = threading.Event()

    def spark_input() -> Iterator[pa.RecordBatch]:
        yield arrow_batch(0, 10)
        yield arrow_batch(10, 10)
        passed_on.set()
        assert release.wait(WAIT_S), "the test never released the input"
        yield arrow_batch(20, 10)

    result: list[object] = []
    task = threading.Thread(target=lambda: result.append(writer.write(spark_input())))
    task.start()
    try:
        assert passed_on.wait(WAIT_S)
        since = time.monotonic()
        seen = 0
        while seen < 20 and time.monotonic() - since < WAIT_S:
            seen = sum(n for _, n in stored_batches(raftlog_cluster.servers, topic))
            time.sleep(0.02)
        waited = time.monotonic() - since
        assert seen == 20, f"the waiting rows never reached the log: {seen} records there"
        # they went after the linger (less the time the topic's creation took), not at once
        assert waited >= linger_ms / 1000 * 0.5, f"rows went after {waited:.3f} s"
        assert task.is_alive(), "the task ended before its input did"
    finally:
        release.set()
        task.join(WAIT_S)
    assert not task.is_alive()
    assert isinstance(result[0], RaftlogCommitMessage)
    assert result[0].write.records == 30
    assert sum(n for _, n in stored_batches(raftlog_cluster.servers, topic)) == 30
