"""Run by test_spark_speculation.py: a streaming write into the raftlog sink on a
standalone cluster whose two executors are on distinct loopback hosts, with
``spark.speculation`` on and one slow task attempt, so that Spark launches a
speculative copy of it and the copy wins.

Usage: speculative_sink.py MASTER_URL SERVERS TOPIC CHECKPOINT MARKER_DIR OUT_JSON

The stream is ``rate-micro-batch`` (batch b holds values [b * 200, (b + 1) * 200) in two
partitions), tagged in a ``mapInArrow`` with the micro-batch, Spark partition and task
attempt that carried each row. In micro-batch ``SLOW_BATCH``, attempt 0 of partition
``SLOW_PARTITION`` passes on its rows slowly, in small Arrow batches (so that the writer
downstream registers with the coordinator and writes rows into an open transaction),
then, if it is still alive, waits until the speculative attempt 1 has passed all its
rows on, and a while longer, before it ends. Every attempt of every task leaves a marker file
``b{batch}-p{partition}-a{attempt}`` in MARKER_DIR holding its executor's host.

The query runs until ``BATCHES`` micro-batches are committed; then the topic is read
back with ``spark.read.format("raftlog")``. OUT_JSON gets the executors' hosts, the
committed batch count and the rows read as [value, batch, spark_partition, attempt].
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql import SparkSession

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stream_checks import committed_batches, rate_stream, run_until, start_sink

TIMEOUT_S = 90.0
BATCHES = 2
SLOW_BATCH = 1  # not 0: executors and their Python workers are warm by then
SLOW_PARTITION = 0
# The loser waits this long at most for the speculative attempt (bounded), and then this
# much more, so that attempt 1 finishes first and Spark kills attempt 0.
LOSER_WAIT_S = 60.0
LOSER_GRACE_S = 4.0
# rate-micro-batch partitions hold 100 rows: 50 Arrow batches. The loser passes them on
# DRIP_S apart (5 s in all, longer than Spark takes to launch the copy), then stalls: the
# sink's event loop only moves (registers, writes) while it awaits a queue put, never
# while Spark's input iterator blocks, so rows must keep coming for the loser to write.
ROWS_PER_ARROW_BATCH = 2
DRIP_S = 0.1


def tag_rows(marker_dir: str):
    """The ``mapInArrow`` function: adds batch/partition/attempt columns, leaves markers,
    and stalls the slow attempt (see the module docstring)."""

    def tag(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        assert ctx is not None
        batch_id = int(ctx.getLocalProperty("streaming.sql.batchId"))
        part, attempt = ctx.partitionId(), ctx.attemptNumber()
        markers = Path(marker_dir)
        name = f"b{batch_id}-p{part}-a{attempt}"
        # the executor inherits its worker's SPARK_LOCAL_IP: the host Spark sees
        (markers / name).write_text(os.environ.get("SPARK_LOCAL_IP", "?"))
        slow = (batch_id, part, attempt) == (SLOW_BATCH, SLOW_PARTITION, 0)
        winner_done = markers / f"b{batch_id}-p{part}-a1.done"
        for batch in batches:
            n = batch.num_rows
            yield pa.RecordBatch.from_arrays(
                [
                    batch.column("value"),
                    pa.array([batch_id] * n, pa.int64()),
                    pa.array([part] * n, pa.int64()),
                    pa.array([attempt] * n, pa.int64()),
                ],
                names=["value", "batch", "spark_partition", "attempt"],
            )
            if slow:
                time.sleep(DRIP_S)
        if slow:  # never finish first: wait for the copy to be done, and a while longer
            deadline = time.monotonic() + LOSER_WAIT_S
            while not winner_done.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(LOSER_GRACE_S)
        (markers / f"{name}.done").write_text("")

    return tag


def executor_hosts(spark: SparkSession) -> list[str]:
    """The host of every registered executor (the driver is not one)."""
    sc = spark.sparkContext
    summaries = sc._jsc.sc().statusStore().executorList(True)
    hosts = []
    for i in range(summaries.size()):
        e = summaries.apply(i)
        if e.id() != "driver":
            hosts.append(str(e.hostPort()).rsplit(":", 1)[0])
    return sorted(hosts)


def wait_for_executors(spark: SparkSession, count: int) -> list[str]:
    deadline = time.monotonic() + TIMEOUT_S
    while len(found := executor_hosts(spark)) < count:  # bounded by the deadline
        if time.monotonic() > deadline:
            raise TimeoutError(f"only executors on {found} registered in {TIMEOUT_S}s")
        time.sleep(0.5)
    return found


def main(master: str, servers: str, topic: str, checkpoint: str, marker_dir: str, out: str) -> None:
    spark = (
        SparkSession.builder.master(master)
        .appName("raftlog-speculative-sink")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.python.worker.reuse", "true")
        # speculate once one of the two tasks is done and the other runs twice as long;
        # the efficiency check would otherwise judge a sleeping task by its input rate
        .config("spark.speculation", "true")
        .config("spark.speculation.interval", "200ms")
        .config("spark.speculation.quantile", "0.5")
        .config("spark.speculation.multiplier", "2.0")
        .config("spark.speculation.minTaskRuntime", "3s")
        .config("spark.speculation.efficiency.enabled", "false")
        # small Arrow batches and stream buffers (JVM and Python worker; 64 KiB by default
        # and flushed at the end): the writer gets the slow attempt's rows as they come
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", str(ROWS_PER_ARROW_BATCH))
        .config("spark.buffer.size", "256")
        .getOrCreate()
    )
    try:
        hosts = wait_for_executors(spark, 2)
        tagged = rate_stream(spark).mapInArrow(
            tag_rows(marker_dir), "value long, batch long, spark_partition long, attempt long"
        )
        ck = Path(checkpoint)
        run_until(start_sink(tagged, topic, servers, ck), ck, BATCHES, timeout_s=TIMEOUT_S)
        df = spark.read.format("raftlog").option("topic", topic).option("servers", servers).load()
        rows = [
            list(r) for r in df.select("value", "batch", "spark_partition", "attempt").collect()
        ]
        Path(out).write_text(
            json.dumps({"hosts": hosts, "committed": committed_batches(ck), "rows": rows})
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
