"""A pipeline ported from format("kafka") (issue 18): keyed placement, per-row topics,
subscribePattern, Kafka's raw-record schema, Kafka's option names, the CLI's records.

Batch writes and reads (df.write / spark.read) against the shared 3-node cluster:
each goes through the same sink and source code as a stream, in one Spark job.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from stream_checks import unique_topic

CLI = [str(Path(sys.executable).parent / "raftlog")]


def _write(df, servers: str, **opts: str) -> None:
    w = df.write.format("raftlog").mode("append").option("servers", servers)
    for k, v in opts.items():
        w = w.option(k, v)
    w.save()


def _read(spark, servers: str, **opts: str):
    r = spark.read.format("raftlog").option("servers", servers)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def test_partition_by_puts_each_key_on_one_partition_and_uses_all(spark, servers) -> None:
    import pyarrow as pa
    from pyspark_raftlog.routing import key_bytes, murmur2_many

    topic = unique_topic("keyed")
    df = spark.range(0, 600, numPartitions=2).selectExpr("id", "id % 37 AS user")
    _write(df, servers, topic=topic, partitions="6", replicationFactor="3", partitionBy="user")
    rows = _read(spark, servers, topic=topic).select("user", "__raftlog_partition").collect()
    assert len(rows) == 600
    where: dict[int, set[int]] = {}
    for r in rows:
        where.setdefault(r["user"], set()).add(r["__raftlog_partition"])
    assert all(len(parts) == 1 for parts in where.values()), where
    assert {p for parts in where.values() for (p,) in [tuple(parts)]} == set(range(6))
    # the documented rule: murmur2 of the value's big-endian bytes, as Kafka's partitioner
    users = sorted(where)
    hashed = murmur2_many(key_bytes([pa.array(users, pa.int64())]))
    expected = {u: (int(h) & 0x7FFFFFFF) % 6 for u, h in zip(users, hashed, strict=True)}
    assert {u: next(iter(p)) for u, p in where.items()} == expected


def test_topic_column_and_subscribe_pattern_with_raftlog_topic(spark, servers) -> None:
    prefix = unique_topic("multi")
    a, b = f"{prefix}-a", f"{prefix}-b"
    df = spark.range(0, 40, numPartitions=2).selectExpr(
        f"CASE WHEN id % 2 = 0 THEN '{a}' ELSE '{b}' END AS topic",
        "CAST(id AS STRING) AS key",
        "CAST(id AS STRING) AS value",
    )
    _write(df, servers, partitions="2", replicationFactor="3")
    got = _read(spark, servers, subscribePattern=f"{prefix}-.*")
    assert got.columns[:8] == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    rows = got.select("value", "__raftlog_topic", "topic", "key").collect()
    assert len(rows) == 40
    for r in rows:
        n = int(r["value"].decode())
        assert r["__raftlog_topic"] == r["topic"] == (a if n % 2 == 0 else b)
        assert r["key"] == r["value"]
    both = _read(spark, servers, subscribe=f"{a},{b}").count()
    assert both == 40


def test_raw_records_round_trip_with_the_cli(spark, servers, tmp_path) -> None:
    topic = unique_topic("cli")
    env = {"RAFTLOG_SERVERS": servers, "PATH": "/usr/bin:/bin"}
    subprocess.run(
        [*CLI, "topic", "create", topic, "--partitions", "2", "--replication-factor", "3"],
        check=True,
        env=env,
        timeout=60,
        capture_output=True,
    )
    subprocess.run(
        [*CLI, "produce", topic, "--key-separator", ":", "--header", "src=cli"],
        input=b"k1:hello\nk2:world\nnokey\n",
        check=True,
        env=env,
        timeout=60,
        capture_output=True,
    )
    rows = _read(spark, servers, topic=topic).collect()
    got = {bytes(r["value"]): r for r in rows}
    assert set(got) == {b"hello", b"world", b"nokey"}
    assert bytes(got[b"hello"]["key"]) == b"k1" and got[b"nokey"]["key"] is None
    assert [(h["key"], bytes(h["value"])) for h in got[b"world"]["headers"]] == [("src", b"cli")]
    # the reverse: Spark writes raw records, the CLI prints them
    from pyspark.sql.types import BinaryType, StringType, StructField, StructType

    schema = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    df = spark.createDataFrame([("sk", b"from-spark")], schema)
    _write(df, servers, topic=topic)
    out = subprocess.run(
        [*CLI, "consume", topic, "--offset", "earliest", "--print-key", "--timeout-ms", "1500"],
        check=True,
        env=env,
        timeout=60,
        capture_output=True,
    ).stdout
    assert b"sk\tfrom-spark\n" in out and b"k1\thello\n" in out


def test_kafka_options_are_refused_by_name(spark, servers) -> None:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    df = spark.range(1).selectExpr("CAST(id AS STRING) AS value")
    with pytest.raises((PySparkException, Py4JJavaError), match=r"kafka\.bootstrap\.servers"):
        _write(df, servers, topic=unique_topic("refused"), **{"kafka.bootstrap.servers": "x:1"})


def test_max_offsets_per_trigger_bounds_every_micro_batch(spark, servers, tmp_path) -> None:
    topic = unique_topic("maxoff")
    df = spark.range(0, 300, numPartitions=2).selectExpr("id", "CAST(id AS STRING) AS s")
    _write(df, servers, topic=topic, partitions="2", replicationFactor="3")
    query = (
        spark.readStream.format("raftlog")
        .option("servers", servers)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "100")  # Kafka's name for maxRecordsPerTrigger
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180), "AvailableNow query did not finish in 180 s"
    finally:
        query.stop()
    assert query.exception() is None
    sizes = [int(p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]
    # 300 records (plus transaction markers, which occupy offsets): at least 3 batches
    assert sum(sizes) == 300
    assert len(sizes) >= 3 and max(sizes) <= 100, sizes


def test_nulls_of_every_spark_arrow_type_round_trip(spark, servers) -> None:
    import datetime as dt
    from decimal import Decimal

    schema = (
        "id long, by byte, sh short, i int, l long, f float, d double, dec decimal(12,3), "
        "s string, bin binary, bo boolean, day date, ts timestamp, ntz timestamp_ntz, "
        "arr array<int>, m map<string,int>, st struct<a: int, b: string>"
    )
    full = (
        1,
        7,
        -300,
        70_000,
        2**40,
        1.5,
        -2.25,
        Decimal("123456789.125"),
        "héllo",
        b"\x00\xff",
        True,
        dt.date(2024, 2, 29),
        dt.datetime(2024, 2, 29, 23, 59, 59, 123456),
        dt.datetime(2024, 2, 29, 1, 2, 3, 456789),
        [1, None, 3],
        {"k": 1, "n": None},
        (5, None),
    )
    nulls = (2,) + (None,) * (len(full) - 1)
    # zero and empty values, which a null must not be confused with
    zeros = (0, 0, 0, 0, 0.0, 0.0, Decimal("0.000"), "", b"", False)
    empties = (3, *zeros, None, None, None, [], {}, (None, None))
    df = spark.createDataFrame([full, nulls, empties], schema)
    topic = unique_topic("nulls")
    _write(df, servers, topic=topic, partitions="1", replicationFactor="3")
    back = _read(spark, servers, topic=topic)
    assert back.schema.fieldNames()[: len(df.columns)] == df.columns
    assert [f.dataType for f in back.schema.fields[: len(df.columns)]] == [
        f.dataType for f in df.schema.fields
    ]
    got = sorted((tuple(r) for r in back.select(*df.columns).collect()), key=lambda t: t[0])
    want = sorted((tuple(r) for r in df.collect()), key=lambda t: t[0])
    assert got == want
    assert got[1] == nulls  # every column of the null row is null, not a default value


def test_starting_timestamp_returns_exactly_the_later_rows(spark, servers, tmp_path) -> None:
    import time

    topic = unique_topic("since")
    early = spark.range(0, 60, numPartitions=2).selectExpr("id", "'early' AS s")
    _write(early, servers, topic=topic, partitions="3", replicationFactor="3")
    time.sleep(0.05)
    since_ms = int(time.time() * 1000)
    time.sleep(0.05)
    late = spark.range(60, 100, numPartitions=2).selectExpr("id", "'late' AS s")
    _write(late, servers, topic=topic)

    rows = _read(spark, servers, topic=topic, startingTimestamp=str(since_ms)).collect()
    assert sorted(r["id"] for r in rows) == list(range(60, 100))
    assert all(r["__raftlog_timestamp"].timestamp() * 1000 >= since_ms for r in rows)
    # a stream starts there too (initialOffset), read with Trigger.AvailableNow
    query = (
        spark.readStream.format("raftlog")
        .option("servers", servers)
        .option("topic", topic)
        .option("startingTimestamp", str(since_ms))
        .load()
        .writeStream.format("memory")
        .queryName("since_" + topic.replace("-", "_"))
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(180), "AvailableNow query did not finish in 180 s"
    finally:
        query.stop()
    streamed = spark.table("since_" + topic.replace("-", "_")).select("id").collect()
    assert sorted(r["id"] for r in streamed) == list(range(60, 100))
    # a timestamp after everything: nothing (each partition starts at its end)
    assert _read(spark, servers, topic=topic, startingTimestamp=str(2**41)).count() == 0
    # endingTimestamp: exactly the earlier rows
    before = _read(spark, servers, topic=topic, endingTimestamp=str(since_ms)).collect()
    assert sorted(r["id"] for r in before) == list(range(60))
    # per partition: p0 from the timestamp, p1 from its beginning, p2 from its end
    by_ts = json.dumps({topic: {"0": since_ms, "1": 0, "2": 2**41}})
    mixed = _read(spark, servers, topic=topic, startingOffsetsByTimestamp=by_ts).collect()
    everything = _read(spark, servers, topic=topic).collect()
    want = sorted(
        r["id"]
        for r in everything
        if r["__raftlog_partition"] == 1 or (r["__raftlog_partition"] == 0 and r["id"] >= 60)
    )
    assert sorted(r["id"] for r in mixed) == want
