"""The raftlog sink against real local Spark and the shared real 3-node cluster.

Exactly-once is checked the same way everywhere: the ``value`` column read back
holds no duplicate, and it holds every value of every micro-batch that Spark
recorded as committed in the checkpoint (values of a batch that was cut short
may also be there: its replay skips what was already committed).
"""

from __future__ import annotations

from collections import Counter

import pytest
from stream_checks import (
    assert_exactly_once,
    committed_batches,
    rate_stream,
    read_values,
    run_until,
    start_sink,
    unique_topic,
)


def test_stream_stopped_and_restarted_lands_exactly_once(spark, servers, tmp_path) -> None:
    topic = unique_topic("restart")
    checkpoint = tmp_path / "ck"
    for round_ in range(3):
        query = start_sink(rate_stream(spark), topic, servers, checkpoint, partitions="3")
        # stop while later batches are in flight: a replay must not duplicate them
        run_until(query, checkpoint, batches=2 * (round_ + 1))
    committed = committed_batches(checkpoint)
    values = read_values(spark, servers, topic)
    assert committed >= 6
    assert_exactly_once(values, committed)


_SEEN: Counter = Counter()


def test_retried_tasks_on_a_shuffled_stream_land_exactly_once(spark, servers, tmp_path) -> None:
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("long")
    def fail_first_attempt(value: int) -> int:
        # Runs in a Python worker: the first attempt of every task of the first two
        # micro-batches dies after 60 rows, when some of its chunks are already sent.
        ctx = TaskContext.get()
        key = (ctx.stageId(), ctx.partitionId(), ctx.attemptNumber())
        _SEEN[key] += 1
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or 0)
        if ctx.attemptNumber() == 0 and batch < 2 and _SEEN[key] > 60:
            (failures / f"b{batch}-s{key[0]}-p{key[1]}").touch()  # proof the failure happened
            raise RuntimeError("injected failure of a first task attempt")
        return value

    topic = unique_topic("retry")
    checkpoint = tmp_path / "ck"
    failures = tmp_path / "failures"
    failures.mkdir()
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "16")  # many small chunks
    try:
        shuffled = (
            rate_stream(spark, partitions=2)
            .repartition(3)  # a shuffle: a retried task may fetch its rows in another order
            .select(fail_first_attempt("value").alias("value"))
        )
        query = start_sink(shuffled, topic, servers, checkpoint, chunkBytes="1k")
        run_until(query, checkpoint, batches=3)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert len(list(failures.iterdir())) >= 2  # first attempts really failed, and were retried
    assert_exactly_once(read_values(spark, servers, topic), committed_batches(checkpoint))


def test_foreach_batch_style_txn_write_lands_once(spark, servers) -> None:
    topic = unique_topic("txn")

    def write(start: int, version: int) -> None:
        df = spark.range(start, start + 100, numPartitions=2).withColumnRenamed("id", "value")
        (
            df.write.format("raftlog")
            .option("topic", topic)
            .option("servers", servers)
            .option("txnAppId", "app-1")
            .option("txnVersion", str(version))
            .mode("append")
            .save()
        )

    write(0, version=0)
    write(0, version=0)  # the same (txnAppId, txnVersion) again: skipped
    write(100, version=1)
    write(500, version=0)  # older than the last written version: skipped
    assert sorted(read_values(spark, servers, topic)) == list(range(200))


def test_schema_mismatch_shows_both_schemas(spark, servers) -> None:
    topic = unique_topic("schema")
    base = spark.range(3).withColumnRenamed("id", "value")
    base.write.format("raftlog").option("topic", topic).option("servers", servers).mode(
        "append"
    ).save()
    other = spark.range(3).selectExpr("cast(id as int) as value")
    with pytest.raises(
        Exception, match=r"topic schema:\n  value: int64\nDataFrame schema:\n  value: int32"
    ):
        other.write.format("raftlog").option("topic", topic).option("servers", servers).mode(
            "append"
        ).save()
    assert sorted(read_values(spark, servers, topic)) == [0, 1, 2]  # nothing else written
