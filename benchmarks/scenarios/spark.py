"""Scenario ``spark``: the connector's sink and source against Spark's own, side by side.

One Spark session (``pyspark_raftlog.session.build_session``, ``local[2]``) runs
the same source for the same time into each sink in turn:

* source: ``rate-micro-batch`` with a fixed number of rows per micro-batch (``rate``
  would let batches grow when the sink is slower, hiding the sink's cost), over
  2 partitions, plus a distinct 100-byte string column per row;
* sinks: ``noop`` (Spark's own overhead), the parquet file sink, ``bench_count``
  (a Python ``DataSourceStreamArrowWriter`` that only counts: the ceiling of any
  Python sink, see :mod:`benchmarks.workloads.spark_count_sink`) and raftlog at
  acks=all with 3 replicas on a local 3-node cluster started here (``servers``).

Rows/s come from the query progress: the rows of the completed micro-batches
over the sum of their ``triggerExecution`` durations, leaving out the first
batch (Python worker start-up, topic creation, planning) when there are more.
Then the raftlog topic and the parquet output are each read back as a stream
with ``Trigger.AvailableNow`` into ``noop``: rows/s the same way, every batch.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.context import RunContext
from benchmarks.registry import Row, Skip, require, scenario
from benchmarks.scenarios.small import seconds_per_step
from benchmarks.workloads import raftlog_local, spark_count_sink

FULL_SECONDS, QUICK_SECONDS = 20.0, 2.0
FULL_ROWS_PER_BATCH, QUICK_ROWS_PER_BATCH = 100_000, 10_000
SPARK_PARTITIONS = 2
"""Partitions of the source (= tasks per micro-batch, = local[2]'s cores) and of the topic."""
PAYLOAD_BYTES = 100
TOPIC = "bench-spark"
FIRST_BATCH_TIMEOUT_S = 120.0
"""Bound of a write query's start-up: until its first micro-batch completes."""
READ_TIMEOUT_S = 300.0
"""Bound of one AvailableNow read (it stops by itself once it has read what was there)."""
STOP_QUERY_TIMEOUT_S = 15.0
"""Bound of the wait for a stopped query's killed tasks to end."""
STOP_JVM_TIMEOUT_S = 30.0
MAX_PROGRESS = 100_000
"""spark.sql.streaming.numRecentProgressUpdates: keep every micro-batch's progress."""
SINKS = ("noop", "parquet", "python ceiling", "raftlog")

Configure = Callable[[Any], Any]


def _positive(kind: type[float] | type[int]) -> Callable[[str], float | int]:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
        if not value > 0 or value == float("inf"):
            raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
        return value

    return parse


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--spark-seconds", type=_positive(float), default=None, help="seconds per sink"
    )
    group.add_argument(
        "--spark-rows-per-batch",
        type=_positive(int),
        default=None,
        help="rows per source micro-batch",
    )


def source(spark: Any, rows_per_batch: int) -> Any:
    """``rate-micro-batch`` (timestamp, value) plus ``payload``: 100 distinct bytes per row."""
    return (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_batch)
        .option("numPartitions", SPARK_PARTITIONS)
        .load()
        .selectExpr(
            "value",
            "timestamp",
            # The value (unique) then hex of its SHA-512: distinct, and not all one letter,
            # so the parquet sink cannot compress it to nothing.
            f"substr(concat(cast(value AS string), ':', sha2(cast(value AS string), 512)), "
            f"1, {PAYLOAD_BYTES}) AS payload",
        )
    )


def batch_figures(progress: Sequence[Any], skip_first: bool) -> tuple[int, int, float]:
    """(rows, micro-batches, rows/s) of the completed micro-batches in ``progress``.

    rows/s = rows / the sum of the batches' ``triggerExecution`` time; with
    ``skip_first`` the first batch is left out when there are more (warm-up).
    """
    batches = sorted(progress, key=lambda p: p.batchId)
    if skip_first and len(batches) > 1:
        batches = batches[1:]
    rows = sum(int(p.numInputRows) for p in batches)
    millis = sum(int(p.durationMs.get("triggerExecution", 0)) for p in batches)
    return rows, len(batches), (rows * 1000.0 / millis if millis > 0 else 0.0)


def timed_write(spark: Any, configure: Configure, checkpoint: Path, rows: int, seconds: float):
    """Stream the source into the sink ``configure`` sets up for ``seconds``; its progress."""
    writer = source(spark, rows).writeStream.option("checkpointLocation", str(checkpoint))
    query = configure(writer).start()
    try:
        # The clock starts once the first micro-batch is done (query start-up, planning,
        # the first Python workers and topic creation are not the sink's throughput).
        deadline = time.monotonic() + FIRST_BATCH_TIMEOUT_S
        while query.lastProgress is None and query.isActive and time.monotonic() < deadline:
            time.sleep(0.05)
        if query.lastProgress is None and query.isActive:
            raise TimeoutError(f"no micro-batch completed in {FIRST_BATCH_TIMEOUT_S:g} s")
        query.awaitTermination(seconds)  # returns early only when the query fails
    finally:
        _quiet_stop(spark, query)
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    return list(query.recentProgress)


def _quiet_stop(spark: Any, query: Any) -> None:
    """Stop ``query``; stopping interrupts the micro-batch in flight, and the stack traces
    Spark logs for that are not errors, so its log is off meanwhile (a real failure is
    still raised from ``query.exception()``)."""
    spark.sparkContext.setLogLevel("OFF")
    try:
        query.stop()
        # stop() returns before the killed tasks are gone: wait for them (bounded), so they
        # neither log after the level is back nor take CPU from the next measurement.
        tracker = spark.sparkContext.statusTracker()
        deadline = time.monotonic() + STOP_QUERY_TIMEOUT_S
        while (tracker.getActiveJobsIds() or tracker.getActiveStageIds()) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.05)
    finally:
        spark.sparkContext.setLogLevel("WARN")


def available_now_read(reader: Any, checkpoint: Path) -> list[Any]:
    """Read everything there is with Trigger.AvailableNow into ``noop``; the progress."""
    query = (
        reader.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(READ_TIMEOUT_S)
    finally:
        query.stop()
    if query.exception() is not None:
        raise RuntimeError(f"the AvailableNow read failed: {query.exception()}")
    if not finished:
        raise TimeoutError(f"the AvailableNow read did not finish in {READ_TIMEOUT_S:g} s")
    return list(query.recentProgress)


@contextlib.contextmanager
def spark_session() -> Iterator[Any]:
    """A session from ``build_session`` whose Python workers can import ``benchmarks``.

    The repository root goes on ``PYTHONPATH`` before the JVM starts (the JVM passes
    it to every Python worker, where ``bench_count`` is unpickled). The JVM this
    starts is stopped by its PID afterwards, and ``PYTHONPATH`` restored.
    """
    build_session = require("pyspark_raftlog.session", "build_session")
    from pyspark import SparkContext

    started_jvm = SparkContext._gateway is None
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = spark_count_sink.worker_pythonpath()
    spark = None
    try:
        spark = build_session("raftlog-bench-spark", master=f"local[{SPARK_PARTITIONS}]")
        spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", str(MAX_PROGRESS))
        spark.dataSource.register(spark_count_sink.CountingDataSource)
        yield spark
    finally:
        if spark is not None:
            spark.stop()
        if started_jvm:
            _stop_jvm(SparkContext)
        if saved is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = saved


def _stop_jvm(spark_context: Any) -> None:
    """Stop the JVM py4j launched: EOF on its stdin ends it; SIGKILL by PID if it lingers."""
    gateway = spark_context._gateway
    if gateway is None:
        return
    proc = getattr(gateway, "proc", None)
    with contextlib.suppress(Exception):
        gateway.shutdown()
    spark_context._gateway = None
    spark_context._jvm = None
    if proc is None:
        return
    with contextlib.suppress(OSError):
        if proc.stdin is not None:
            proc.stdin.close()
    try:
        proc.wait(timeout=STOP_JVM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=STOP_JVM_TIMEOUT_S)


def _check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        raise Skip("Spark needs Java 17+: apt-get install openjdk-17-jre-headless")


def measure(ctx: RunContext, spark: Any, servers: list[str], scratch: Path) -> list[Row]:
    seconds = seconds_per_step(ctx, QUICK_SECONDS, FULL_SECONDS, "spark_seconds")
    per_batch = ctx.option("spark_rows_per_batch", QUICK_ROWS_PER_BATCH, FULL_ROWS_PER_BATCH)
    parquet_dir = scratch / "parquet"
    raftlog_opts = {
        "topic": TOPIC,
        "servers": ",".join(servers),
        "acks": "all",
        "replicationFactor": "3",
        "partitions": str(SPARK_PARTITIONS),
    }
    sinks: dict[str, Configure] = {
        "noop": lambda w: w.format("noop"),
        "parquet": lambda w: w.format("parquet").option("path", str(parquet_dir)),
        "python ceiling": lambda w: w.format(spark_count_sink.NAME),
        "raftlog": lambda w: w.format("raftlog").options(**raftlog_opts),
    }
    write_rate: dict[str, float] = {}
    rows: list[Row] = []
    for name, configure in sinks.items():
        progress = timed_write(spark, configure, scratch / f"cp-{name}", per_batch, seconds)
        count, batches, rate = batch_figures(progress, skip_first=True)
        if count == 0:
            raise RuntimeError(f"sink {name}: no micro-batch completed in {seconds:g} s")
        write_rate[name] = rate
        rows.append(
            {"case": f"write: rate-micro-batch -> {name}", "rows/s": rate, "micro-batches": batches}
        )
        ctx.advance(1)
    rows[-1]["raftlog / python ceiling"] = write_rate["raftlog"] / write_rate["python ceiling"]
    rows[-1]["raftlog / parquet"] = write_rate["raftlog"] / write_rate["parquet"]

    readers = {
        "raftlog": spark.readStream.format("raftlog")
        .option("topic", TOPIC)
        .option("servers", ",".join(servers))
        .option("startingOffsets", "earliest")
        .load(),
        "parquet": spark.readStream.schema(spark.read.parquet(str(parquet_dir)).schema).parquet(
            str(parquet_dir)
        ),
    }
    read_rate: dict[str, float] = {}
    read_rows: list[Row] = []
    for name, reader in readers.items():
        # One untimed read first, for each source alike: the first query of a kind
        # pays Spark's cold start (a planning daemon, fresh Python workers, imports),
        # which would otherwise dominate a read of a few seconds' data.
        available_now_read(reader, scratch / f"cp-warmup-{name}")
        progress = available_now_read(reader, scratch / f"cp-read-{name}")
        count, batches, rate = batch_figures(progress, skip_first=False)
        if count == 0:
            raise RuntimeError(f"the AvailableNow read of {name} read no rows")
        read_rate[name] = rate
        read_rows.append(
            {
                "case": f"read (AvailableNow): {name} -> noop",
                "rows/s": rate,
                "rows": count,
                "micro-batches": batches,
            }
        )
        ctx.advance(1)
    read_rows[0]["raftlog / parquet"] = read_rate["raftlog"] / read_rate["parquet"]
    ctx.note(
        f"local[{SPARK_PARTITIONS}]; rate-micro-batch, {per_batch} rows per micro-batch over "
        f"{SPARK_PARTITIONS} partitions, {PAYLOAD_BYTES}-byte distinct string per row; "
        f"{seconds:g} s per sink in one session; rows/s = rows / triggerExecution time of the "
        "completed micro-batches (the first left out of the writes); each read is measured "
        "after one untimed warm-up read of the same source"
    )
    ctx.note(
        f"raftlog: 3-node local cluster on one disk, acks=all, 3 replicas, {SPARK_PARTITIONS} "
        "partitions, exactly-once (one transaction per task); reads: Trigger.AvailableNow "
        "into noop, everything the writes left"
    )
    return rows + read_rows


@scenario(
    "spark",
    "rate-micro-batch into noop/parquet/Python ceiling/raftlog, and AvailableNow reads: rows/s",
    add_arguments=add_arguments,
)
def run(ctx: RunContext) -> list[Row]:
    require("pyspark.sql.datasource", "DataSourceStreamArrowWriter")
    require("pyspark_raftlog.datasource", "DefaultSource")
    _check_java()
    ctx.set_total(len(SINKS) + 2)
    with (
        ctx.scratch_dir("spark") as scratch,
        raftlog_local.local_cluster(scratch / "cluster") as cluster,
        spark_session() as spark,
    ):
        return measure(ctx, spark, cluster.servers, scratch)
