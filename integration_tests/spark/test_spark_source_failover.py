"""kill -9 of a partition leader while a streaming read runs (issue 7): the query keeps
going, or fails and is restarted from its checkpoint; every committed record comes out
exactly once, those written before the kill and those written while the node was down."""

from __future__ import annotations

import time
from collections import Counter

from stream_checks import committed_batches, partition_leader, unique_topic

TIMEOUT_S = 180.0


def write_ids(spark, servers: str, topic: str, start: int, end: int, version: int) -> None:
    """Rows ``id`` in [start, end) over 3 partitions, as one idempotent batch write: a retry
    after a failure (a leader that just died) lands the rows once (txnAppId/txnVersion)."""
    for attempt in range(3):  # bounded
        try:
            (
                spark.range(start, end, numPartitions=3)
                .write.format("raftlog")
                .option("topic", topic)
                .option("servers", servers)
                .option("partitions", "3")
                .option("txnAppId", "source-failover")
                .option("txnVersion", str(version))
                .mode("append")
                .save()
            )
            return
        except Exception:
            if attempt == 2:
                raise


def test_read_while_leader_killed_returns_every_record_once(
    spark, private_cluster, tmp_path
) -> None:
    servers = ",".join(private_cluster.servers)
    topic = unique_topic("read-failover")
    checkpoint, out = tmp_path / "ck", tmp_path / "out"
    write_ids(spark, servers, topic, 0, 300, version=0)

    def start():
        return (
            spark.readStream.format("raftlog")
            .option("topic", topic)
            .option("servers", servers)
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", "40")  # many small batches: the kill lands mid-way
            .load()
            .writeStream.format("parquet")  # the file sink's own log makes its output once
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(processingTime="0 seconds")
            .start()
        )

    def rows() -> list:
        return spark.read.parquet(str(out)).collect() if (out / "_spark_metadata").exists() else []

    query = start()
    deadline = time.monotonic() + TIMEOUT_S
    while committed_batches(checkpoint) < 1:  # bounded by the deadline
        assert query.exception() is None, query.exception()
        assert time.monotonic() < deadline, "no micro-batch committed before the kill"
        query.awaitTermination(0.2)
    leader = partition_leader(servers, topic)
    assert leader >= 0
    private_cluster.kill(leader)  # SIGKILL while the query reads
    assert not private_cluster.alive(leader)
    write_ids(spark, servers, topic, 300, 450, version=1)  # committed while the node is down
    private_cluster.restart(leader)

    restarts = 0
    try:
        while len(got := rows()) < 450:  # bounded: by the deadline and at most 3 restarts
            assert time.monotonic() < deadline, f"only {len(got)} of 450 rows in {TIMEOUT_S}s"
            if query.exception() is not None:
                restarts += 1
                assert restarts <= 3, query.exception()
                query.stop()
                query = start()  # resumes from the checkpoint
            query.awaitTermination(0.5)
    finally:
        query.stop()
    got = rows()
    ids = Counter(r.id for r in got)
    assert [i for i, n in ids.items() if n > 1] == []  # none twice
    assert sorted(ids) == list(range(450))  # none missing, nothing else
    keys = {(r["__raftlog_partition"], r["__raftlog_offset"]) for r in got}
    assert len(keys) == 450
