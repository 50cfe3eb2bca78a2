"""The raftlog source against real local Spark and the shared real 3-node cluster."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal
from pathlib import Path


def unique_topic(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def write_ids(spark, servers: str, topic: str, start: int, end: int, version: int) -> None:
    """Rows ``id`` in [start, end) over 3 partitions, idempotently (txnAppId/txnVersion)."""
    (
        spark.range(start, end, numPartitions=3)
        .write.format("raftlog")
        .option("topic", topic)
        .option("servers", servers)
        .option("partitions", "3")
        .option("txnAppId", "source-tests")
        .option("txnVersion", str(version))
        .mode("append")
        .save()
    )


def stream_available_now(spark, servers: str, topic: str, checkpoint: Path, **options: str):
    """Run a readStream with Trigger.AvailableNow into parquet files next to ``checkpoint``.

    Returns (every row in the output so far, the query). The file sink keeps its own
    exactly-once log, so a second run with the same checkpoint only adds new rows.
    """
    out = checkpoint.parent / f"{checkpoint.name}-out"
    reader = spark.readStream.format("raftlog").option("topic", topic).option("servers", servers)
    for key, value in options.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180), "AvailableNow query did not finish in 180 s"
    finally:
        query.stop()
    return spark.read.parquet(str(out)).collect(), query


def test_round_trip_keeps_rows_types_and_values(spark, servers, tmp_path) -> None:
    topic = unique_topic("types")
    rows = [
        (
            i,
            f"s{i}",
            i * 0.5,
            i % 2 == 0,
            Decimal(f"{i}.25"),
            dt.date(2024, 1, 1 + i),
            dt.datetime(2024, 1, 1, 12, i, tzinfo=dt.UTC),
            bytes([i]),
            [i, i + 1],
        )
        for i in range(20)
    ]
    schema = (
        "id long, s string, d double, b boolean, dec decimal(10,2), day date, "
        "ts timestamp, raw binary, arr array<int>"
    )
    # A streaming write through the sink: parquet files read as a stream, AvailableNow.
    spark.createDataFrame(rows, schema).repartition(2).write.parquet(str(tmp_path / "in"))
    write = (
        spark.readStream.schema(schema)
        .parquet(str(tmp_path / "in"))
        .writeStream.format("raftlog")
        .option("topic", topic)
        .option("servers", servers)
        .option("checkpointLocation", str(tmp_path / "write-ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert write.awaitTermination(180), "the streaming write did not finish in 180 s"
    finally:
        write.stop()

    got, _ = stream_available_now(
        spark, servers, topic, tmp_path / "ck", startingOffsets="earliest"
    )
    user_cols = ["id", "s", "d", "b", "dec", "day", "ts", "raw", "arr"]
    # timestamps come back as naive local datetimes; compare the instants
    back = sorted(
        (tuple(r[c].timestamp() if c == "ts" else r[c] for c in user_cols) for r in got),
        key=lambda t: t[0],
    )
    expected = [
        (
            i,
            f"s{i}",
            i * 0.5,
            i % 2 == 0,
            Decimal(f"{i}.25"),
            dt.date(2024, 1, 1 + i),
            dt.datetime(2024, 1, 1, 12, i, tzinfo=dt.UTC).timestamp(),
            bytes([i]),
            [i, i + 1],
        )
        for i in range(20)
    ]
    assert back == expected
    # metadata columns: (partition, offset) identifies each record exactly once
    keys = {(r["__raftlog_partition"], r["__raftlog_offset"]) for r in got}
    assert len(keys) == 20
    assert all(isinstance(r["__raftlog_timestamp"], dt.datetime) for r in got)


def test_stream_limits_batches_and_resumes_from_checkpoint(spark, servers, tmp_path) -> None:
    topic = unique_topic("resume")
    checkpoint = tmp_path / "ck"
    write_ids(spark, servers, topic, 0, 300, version=0)
    got, query = stream_available_now(
        spark, servers, topic, checkpoint, startingOffsets="earliest", maxRecordsPerTrigger="70"
    )
    sizes = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    assert sorted(r.id for r in got) == list(range(300))
    assert len(sizes) >= 5 and max(sizes) <= 70  # 300 records + markers, <= 70 offsets each

    write_ids(spark, servers, topic, 300, 450, version=1)
    got2, query2 = stream_available_now(
        spark, servers, topic, checkpoint, startingOffsets="earliest", maxRecordsPerTrigger="70"
    )
    # the restarted query read only the new records: none twice, none missing
    assert sum(p["numInputRows"] for p in query2.recentProgress) == 150
    assert sorted(r.id for r in got2) == list(range(450))


def test_batch_read_from_json_starting_offsets(spark, servers) -> None:
    topic = unique_topic("json")
    write_ids(spark, servers, topic, 0, 90, version=0)
    everything = (
        spark.read.format("raftlog").option("topic", topic).option("servers", servers).load()
    ).collect()
    by_partition: dict[int, list[int]] = {}
    for r in everything:
        by_partition.setdefault(r["__raftlog_partition"], []).append(r["__raftlog_offset"])
    # start partition 0 at its 6th record, the others at the beginning (-2) and the end (-1)
    cut = sorted(by_partition[0])[5]
    starting = json.dumps({topic: {"0": cut, "1": -2, "2": -1}})
    part = (
        spark.read.format("raftlog")
        .option("topic", topic)
        .option("servers", servers)
        .option("startingOffsets", starting)
        .load()
    ).collect()
    got = sorted((r["__raftlog_partition"], r["__raftlog_offset"]) for r in part)
    want = sorted([(0, o) for o in by_partition[0] if o >= cut] + [(1, o) for o in by_partition[1]])
    assert got == want
