"""Exactly-once under the failures of issue 14, against real local Spark and a real
3-node cluster: first task attempts that fail upstream of the writer after a shuffle,
a replay whose partitioning differs from the first run, a driver killed -9 between the
commit decision and the markers, and the options that exactly-once refuses.

Every check reads the topic back and asks for whole micro-batches: no duplicate, no
committed value missing, and no part of a batch without the rest (a fractured batch).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from stream_checks import (
    ROWS_PER_BATCH,
    committed_batches,
    rate_stream,
    read_values,
    run_until,
    start_sink,
    unique_topic,
)

DRIVERS = Path(__file__).parent / "spark_drivers"
_SEEN: Counter = Counter()


def assert_whole_batches(values: list[int], committed: int) -> None:
    """No duplicate; batches 0..k-1 complete for some k >= ``committed``; nothing else."""
    dupes = sorted(v for v, n in Counter(values).items() if n > 1)
    assert dupes == [], f"values written more than once: {dupes[:20]}"
    batches = Counter(v // ROWS_PER_BATCH for v in values)
    partial = {b: n for b, n in batches.items() if n != ROWS_PER_BATCH}
    assert partial == {}, f"fractured or lost batches (batch: rows seen): {partial}"
    assert sorted(batches) == list(range(len(batches))), f"batches seen: {sorted(batches)}"
    assert len(batches) >= committed, f"{len(batches)} batches readable, {committed} committed"


def failing_stream(spark, failures: Path, partitions: int):
    """The rate stream, shuffled into ``partitions``, through a map whose first attempt of
    every other task dies after 30 rows (upstream of the writer, in the same task)."""
    from pyspark import TaskContext
    from pyspark.sql.functions import udf

    @udf("long")
    def fail_first_attempt(value: int) -> int:
        ctx = TaskContext.get()
        key = (ctx.stageId(), ctx.partitionId(), ctx.attemptNumber())
        _SEEN[key] += 1
        batch = int(ctx.getLocalProperty("streaming.sql.batchId") or 0)
        if ctx.attemptNumber() == 0 and (batch + ctx.partitionId()) % 2 == 0 and _SEEN[key] > 30:
            (failures / f"b{batch}-s{key[0]}-p{key[1]}").touch()
            raise RuntimeError("injected failure of a first task attempt")
        return value

    return (
        rate_stream(spark, partitions=2)
        .repartition(partitions)
        .select(fail_first_attempt("value").alias("value"))
    )


def test_failing_first_attempts_over_20_batches_land_exactly_once(spark, servers, tmp_path):
    """First attempts die upstream of the writer, in the writer's own task (its input just
    ends), in each of 20 micro-batches of one query: at least 20 dead attempts whose
    retries must land their rows once, and the dead ones none."""
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "16")  # many small chunks
    try:
        topic = unique_topic("eo-fail")
        checkpoint = tmp_path / "ck"
        failures = tmp_path / "failures"
        failures.mkdir()
        query = start_sink(
            failing_stream(spark, failures, partitions=3),
            topic,
            servers,
            checkpoint,
            partitions="3",
            chunkBytes="1k",
        )
        run_until(query, checkpoint, batches=20, timeout_s=240.0)
        assert len(list(failures.iterdir())) >= 20  # first attempts really failed
        assert_whole_batches(read_values(spark, servers, topic), committed_batches(checkpoint))
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")


def test_replay_with_other_partitioning_writes_nothing_again(spark, servers, tmp_path):
    topic = unique_topic("eo-replay")
    checkpoint = tmp_path / "ck"
    df = rate_stream(spark, partitions=2).repartition(2)
    run_until(start_sink(df, topic, servers, checkpoint, partitions="4"), checkpoint, batches=4)
    committed = committed_batches(checkpoint)
    before = read_values(spark, servers, topic)
    assert_whole_batches(before, committed)
    # Forget that Spark committed the last two batches: the restart replays them, now cut
    # into 5 Spark partitions instead of 2, so no task of the replay matches one of the first.
    # Hadoop's checksum file goes too: a left-over ".b.crc" makes the replay's commit of
    # batch b fail ("Rename destination .../.b.crc already exists").
    for b in (committed - 1, committed - 2):
        (checkpoint / "commits" / str(b)).unlink()
        (checkpoint / "commits" / f".{b}.crc").unlink(missing_ok=True)
    replay = rate_stream(spark, partitions=2).repartition(5)
    query = start_sink(replay, topic, servers, checkpoint, partitions="4")
    run_until(query, checkpoint, committed + 2)
    after = read_values(spark, servers, topic)
    assert_whole_batches(after, committed_batches(checkpoint))
    assert Counter(after)[ROWS_PER_BATCH * (committed - 1)] == 1


def test_driver_killed_after_the_decision_is_completed_by_the_restart(spark, servers, tmp_path):
    topic = unique_topic("eo-killed")
    checkpoint = tmp_path / "ck"
    env = dict(os.environ, RAFTLOG_FAILPOINTS="txn.after_end_txn=killsession")
    proc = subprocess.Popen(
        [sys.executable, str(DRIVERS / "killed_driver.py"), servers, topic, str(checkpoint)],
        env=env,
        start_new_session=True,  # its own process group: killsession takes only the driver
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(timeout=30)
    assert proc.returncode == -9, f"not killed (rc {proc.returncode}):\n{out[-3000:]}"
    assert committed_batches(checkpoint) == 0
    # the coordinator finished batch 0 before answering; Spark never recorded it: the
    # restart replays it, writing nothing (its EndTxn returns the recorded commit)
    early = sorted(read_values(spark, servers, topic))
    assert early in ([], list(range(ROWS_PER_BATCH))), f"a part of batch 0: {early[:20]}"
    query = start_sink(rate_stream(spark), topic, servers, checkpoint, partitions="2")
    run_until(query, checkpoint, batches=3)
    values = read_values(spark, servers, topic)
    assert_whole_batches(values, committed_batches(checkpoint))
    assert set(range(ROWS_PER_BATCH)) <= set(values)  # batch 0, rolled forward


@pytest.mark.parametrize("acks", ["1", "0"])
def test_exactly_once_refuses_acks_other_than_all(spark, servers, tmp_path, acks):
    df = spark.range(3).withColumnRenamed("id", "value")
    with pytest.raises(Exception, match="option 'acks' must be 'all' for exactly-once writes"):
        df.write.format("raftlog").option("topic", unique_topic("acks")).option(
            "servers", servers
        ).option("acks", acks).mode("append").save()
    # at-least-once takes them
    topic = unique_topic("acks-alo")
    df.write.format("raftlog").option("topic", topic).option("servers", servers).option(
        "acks", acks
    ).option("deliveryGuarantee", "at-least-once").mode("append").save()
    if acks == "1":
        # acks=1 answers once the leader has the rows, before they are committed: a read
        # sees them when the commit (a follower's flush, a heartbeat later) has caught up,
        # or after a new leader's first commit if leadership moved meanwhile.
        seen: list[int] = []
        deadline = time.monotonic() + 30.0
        for _ in range(60):
            seen = sorted(read_values(spark, servers, topic))
            if seen == [0, 1, 2] or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert seen == [0, 1, 2]
