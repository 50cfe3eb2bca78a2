"""Issue 18's last options through real Spark and the shared 3-node cluster: the sink's
``compression`` (and the topic config ``compression.type`` as its default), read back
transparently; the source's ``minOffsetsPerTrigger`` with ``maxTriggerDelay``."""

from __future__ import annotations

import time

import pytest
from stream_checks import unique_topic
from tenacity import Retrying, retry_if_exception_type, stop_after_delay, wait_fixed

from raftlog.client import BlockingRaftlogClient, UnknownTopicError, frame_records


def _write(df, servers: str, **opts: str) -> None:
    w = df.write.format("raftlog").mode("append").option("servers", servers)
    for k, v in opts.items():
        w = w.option(k, v)
    w.save()


def _stored_and_payload_bytes(servers: str, topic: str) -> tuple[int, int]:
    """(bytes stored, bytes of the payloads readers get) over every batch of ``topic``."""
    stored = payload = 0
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        for part in client.describe_topic(topic).partitions:
            offset = part.start_offset
            while offset < part.last_stable_offset:
                got = client.fetch(topic, part.partition, offset)
                stored += sum(got.stored_bytes)
                payload += sum(len(b.payload) for b in got.batches)
                offset = got.next_offset
    return stored, payload


def _rows(spark):
    # repetitive strings: any codec shrinks them several times over
    return spark.range(0, 4000, numPartitions=2).selectExpr(
        "id", "concat('customer-', CAST(id % 7 AS STRING), '-', repeat('abc', 20)) AS s"
    )


@pytest.mark.parametrize("codec", ["lz4", "zstd"])
def test_compressed_writes_read_back_and_are_stored_smaller(spark, servers, codec) -> None:
    topic = unique_topic(f"codec-{codec}")
    df = _rows(spark)
    _write(df, servers, topic=topic, partitions="2", replicationFactor="3", compression=codec)
    back = spark.read.format("raftlog").option("servers", servers).option("topic", topic).load()
    got = sorted((r["id"], r["s"]) for r in back.select("id", "s").collect())
    assert got == sorted((r["id"], r["s"]) for r in df.collect())
    stored, payload = _stored_and_payload_bytes(servers, topic)
    assert stored * 3 < payload, (stored, payload)


def test_topic_compression_type_is_the_default_and_the_option_wins(spark, servers) -> None:
    topic = unique_topic("codec-config")
    before = (0, 0)

    def added() -> tuple[int, int]:
        """(stored, payload) bytes written since the last call."""
        nonlocal before
        now = _stored_and_payload_bytes(servers, topic)
        out = (now[0] - before[0], now[1] - before[1])
        before = now
        return out

    _write(_rows(spark), servers, topic=topic, partitions="1")  # compression.type: none
    stored, payload = added()
    assert stored > payload  # as they are: each payload plus its batch header
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.call(lambda c: c.alter_config(topic, {"compression.type": "zstd"}, []))
    _write(_rows(spark), servers, topic=topic)  # no option: the topic's zstd
    stored, payload = added()
    assert stored * 3 < payload, (stored, payload)
    _write(_rows(spark), servers, topic=topic, compression="none")  # the option wins
    stored, payload = added()
    assert stored > payload
    # Kafka's "producer" (the writer's choice): the sink, told nothing, writes as they are
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.call(lambda c: c.alter_config(topic, {"compression.type": "producer"}, []))
    _write(_rows(spark), servers, topic=topic)
    stored, payload = added()
    assert stored > payload
    back = spark.read.format("raftlog").option("servers", servers).option("topic", topic).load()
    assert back.count() == 16000 and back.select("id").distinct().count() == 4000


def test_bad_compression_is_refused_naming_the_allowed_values(spark, servers) -> None:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    with pytest.raises(
        (PySparkException, Py4JJavaError),
        match=r"option 'compression' must be one of none, lz4, zstd, got 'gzip'",
    ):
        _write(_rows(spark), servers, topic=unique_topic("codec-bad"), compression="gzip")


def _produce(servers: str, topic: str, first: int, count: int) -> None:
    """``count`` raw records ``first``, ``first + 1``, ... in one batch on partition 0.

    A topic just created may not be known to its leader yet: retried, bounded."""
    values = [str(v).encode() for v in range(first, first + count)]
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        for attempt in Retrying(
            retry=retry_if_exception_type(UnknownTopicError),
            stop=stop_after_delay(30),
            wait=wait_fixed(0.2),
            reraise=True,
        ):
            with attempt:
                client.produce(topic, 0, [(frame_records(values), count)])


def _table_values(spark, name: str) -> list[int]:
    return sorted(int(r["value"]) for r in spark.table(name).select("value").collect())


def _wait_for(spark, name: str, want: int, query, timeout_s: float = 90.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while True:
        values = _table_values(spark, name)
        if len(values) >= want:
            return values
        if query.exception() is not None:
            raise query.exception()
        assert time.monotonic() < deadline, f"{len(values)} of {want} rows in {timeout_s}s"
        time.sleep(0.5)


def _batch_sizes(query) -> list[int]:
    """Rows read by each micro-batch of ``query`` that read any, in order."""
    return [int(p["numInputRows"]) for p in query.recentProgress if p["numInputRows"]]


def _start(spark, servers: str, topic: str, name: str, checkpoint, **opts: str):
    reader = (
        spark.readStream.format("raftlog")
        .option("servers", servers)
        .option("topic", topic)
        .option("startingOffsets", "earliest")
    )
    for k, v in opts.items():
        reader = reader.option(k, v)
    return (
        reader.load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def test_min_offsets_per_trigger_holds_small_batches_back_until_max_trigger_delay(
    spark, servers, tmp_path
) -> None:
    topic = unique_topic("minoff")
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.create_topic(topic, partitions=1, replication_factor=3)
    _produce(servers, topic, 0, 10)
    held = "minoff_held_" + topic.replace("-", "_")
    released = "minoff_released_" + topic.replace("-", "_")
    # held: the delay (10 min) never passes during the test; released: 2 s
    q_held = _start(
        spark,
        servers,
        topic,
        held,
        tmp_path / "held",
        minOffsetsPerTrigger="100",
        maxTriggerDelay="10m",
    )
    q_released = _start(
        spark,
        servers,
        topic,
        released,
        tmp_path / "released",
        minOffsetsPerTrigger="100",
        maxTriggerDelay="2s",
    )
    try:
        # the first batch of a run is never held back
        assert _wait_for(spark, held, 10, q_held) == list(range(10))
        assert _wait_for(spark, released, 10, q_released) == list(range(10))
        _produce(servers, topic, 10, 30)  # 30 new offsets: fewer than 100
        # the released query reads them once 2 s have passed since its last batch
        assert _wait_for(spark, released, 40, q_released) == list(range(40))
        # by then the held query has had many 200 ms triggers: each skipped
        assert _table_values(spark, held) == list(range(10))
        _produce(servers, topic, 40, 80)  # 110 new offsets in all: enough
        assert _wait_for(spark, held, 120, q_held) == list(range(120))
        # a batch's progress is posted after its rows reach the table: wait for it, bounded
        deadline = time.monotonic() + 60
        while sum(sizes := _batch_sizes(q_held)) < 120 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert sizes == [10, 110], sizes  # the 30 were never read on their own
    finally:
        q_held.stop()
        q_released.stop()
    assert q_held.exception() is None and q_released.exception() is None
