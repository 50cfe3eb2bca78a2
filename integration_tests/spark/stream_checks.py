"""Helpers shared by the Spark sink tests (and their driver scripts in ``spark_drivers/``):
starting a sink query, running it for N committed micro-batches, and the exactly-once
check on what a topic holds afterwards."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from pathlib import Path

from raftlog.client import BlockingRaftlogClient

ROWS_PER_BATCH = 200


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def rate_stream(spark, partitions: int = 2):
    """A deterministic stream: micro-batch b holds values [b * 200, (b + 1) * 200)."""
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", str(ROWS_PER_BATCH))
        .option("numPartitions", str(partitions))
        .load()
        .select("value")
    )


def start_sink(df, topic: str, servers: str, checkpoint: Path, **options: str):
    """Start ``df`` streaming into ``topic`` through the raftlog sink, micro-batches back to
    back, with its checkpoint at ``checkpoint`` and any further sink ``options``."""
    writer = df.writeStream.format("raftlog").option("topic", topic).option("servers", servers)
    for key, value in options.items():
        writer = writer.option(key, value)
    return (
        writer.option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )


def partition_leader(servers: str, topic: str, partition: int = 0) -> int:
    """The node id that leads ``partition`` of ``topic`` (-1 when it has none)."""
    client = BlockingRaftlogClient(servers, request_timeout_s=30.0)
    try:
        return client.describe_topic(topic).partitions[partition].leader
    finally:
        client.close()


def read_values(spark, servers: str, topic: str) -> list[int]:
    df = spark.read.format("raftlog").option("topic", topic).option("servers", servers).load()
    return [row.value for row in df.select("value").collect()]


def committed_batches(checkpoint: Path) -> int:
    """Micro-batches Spark recorded as committed (files 0, 1, ... in commits/)."""
    commits = checkpoint / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.exists() else 0


def run_until(query, checkpoint: Path, batches: int, timeout_s: float = 120.0) -> None:
    """Let ``query`` run until ``batches`` micro-batches are committed (bounded), then stop it.

    Raises the query's own exception when it fails first.
    """
    deadline = time.monotonic() + timeout_s
    try:
        while committed_batches(checkpoint) < batches:
            if query.exception() is not None:
                raise query.exception()
            if time.monotonic() > deadline:
                raise TimeoutError(f"fewer than {batches} batches committed in {timeout_s}s")
            query.awaitTermination(0.2)
    finally:
        query.stop()


def assert_exactly_once(values: list[int], committed: int) -> None:
    """No value twice, and every value of every committed micro-batch present."""
    dupes = [v for v, n in Counter(values).items() if n > 1]
    assert dupes == [], f"values written more than once: {sorted(dupes)[:20]}"
    missing = set(range(committed * ROWS_PER_BATCH)) - set(values)
    assert missing == set(), f"committed values missing: {sorted(missing)[:20]}"
