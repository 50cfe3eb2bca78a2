"""A stream whose topic is deleted and created again between two runs of the query: the
restart from the checkpoint fails naming both topic ids (failOnDataLoss, Kafka's default)
instead of waiting, silently, for the new topic to pass the old offsets; with
failOnDataLoss false it reads the new topic from its beginning, every row once."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from stream_checks import unique_topic

from raftlog.client import BlockingRaftlogClient


def _write(spark, servers: str, topic: str, first: int, last: int) -> None:
    df = spark.range(first, last, numPartitions=2).withColumnRenamed("id", "v")
    df.write.format("raftlog").option("servers", servers).option("topic", topic).option(
        "partitions", "2"
    ).mode("append").save()


def _run_once(spark, servers: str, topic: str, out: Path, **options: str):
    """One run of the stream into parquet files under ``out`` (its checkpoint beside them)
    with Trigger.AvailableNow (bounded); the query."""
    reader = spark.readStream.format("raftlog").option("servers", servers).option("topic", topic)
    for key, value in {"startingOffsets": "earliest", **options}.items():
        reader = reader.option(key, value)
    query = (
        reader.load()
        .select("v")
        .writeStream.format("parquet")
        .option("path", str(out / "rows"))
        .option("checkpointLocation", str(out / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        with contextlib.suppress(StreamingQueryException):  # read from query.exception()
            query.awaitTermination(180)
        assert not query.isActive, "the AvailableNow run did not end in 180 s"
    finally:
        query.stop()
    return query


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_restart_after_the_topic_was_recreated(spark, servers, tmp_path, fail_on_data_loss):
    topic = unique_topic("recreated")
    _write(spark, servers, topic, 0, 300)
    first = _run_once(spark, servers, topic, tmp_path, failOnDataLoss=fail_on_data_loss)
    assert first.exception() is None
    assert sorted(r.v for r in spark.read.parquet(str(tmp_path / "rows")).collect()) == list(
        range(300)
    )

    client = BlockingRaftlogClient(servers, request_timeout_s=30.0)
    try:
        client.delete_topic(topic)
    finally:
        client.close()
    _write(spark, servers, topic, 1000, 1040)  # created again, far fewer offsets

    again = _run_once(spark, servers, topic, tmp_path, failOnDataLoss=fail_on_data_loss)
    if fail_on_data_loss == "true":
        assert again.exception() is not None
        text = str(again.exception())
        assert f"topic '{topic}' was deleted and created again (topic id" in text, text[:2000]
        assert "failOnDataLoss" in text
    else:
        assert again.exception() is None
        rows = sorted(r.v for r in spark.read.parquet(str(tmp_path / "rows")).collect())
        assert rows == [*range(300), *range(1000, 1040)]  # each once: the new topic whole
