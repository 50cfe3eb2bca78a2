"""Scenario ``spark``: the connector's sink and source against Spark's own, side by side.

One Spark session (``pyspark_raftlog.session.build_session``, ``local[2]``) runs
the same source for the same time into each sink in turn:

* source: ``rate-micro-batch`` with a fixed number of rows per micro-batch
  (1,000,000 in the full run, the batch size users run; ``rate`` would let
  batches grow when the sink is slower, hiding the sink's cost), over 2
  partitions, plus a distinct 100-byte string column per row;
* sinks: ``noop`` (Spark's own overhead), ``bench_count`` (a Python
  ``DataSourceStreamArrowWriter`` that only counts: the ceiling of any Python
  sink, see :mod:`benchmarks.workloads.spark_count_sink`), the parquet file
  sink, and raftlog twice on a local 3-node cluster started here (3 replicas,
  acks=all): ``deliveryGuarantee`` ``at-least-once`` (plain writes) and
  ``exactly-once`` (the default: every micro-batch one two-phase commit through
  the transaction coordinator). Exactly-once ÷ at-least-once is the cost of 2PC.
  Exactly-once runs twice more with option ``compression`` ``lz4`` and ``zstd``
  (the payloads compressed in the Spark tasks): rows/s beside the uncompressed
  run, and for every raftlog sink the bytes stored on disk per row (one
  replica's segment bytes over its records, from the nodes' ``/metrics``).
  Last, the same rows as Kafka's columns (``key``: the row number as a string,
  ``value``: the payload), as a Kafka user's DataFrame has them, into the Python
  ceiling and into raftlog exactly-once (written as raw records, Kafka's record
  model, rather than Arrow IPC): the ratio a Kafka user porting a pipeline sees.
  Beside every sink, the nodes' CPU per million rows it committed (from
  ``/proc``): the sinks are CPU-bound on 2 cores, so that is what raftlog takes
  from Spark (beside a non-raftlog sink, the idle cluster's).

With ``--spark-rounds R`` (full run: 2) every sink runs R times, in the order
above each round, so that the two raftlog sinks run next to each other in time
however the machine's load drifts; each sink's figures pool its rounds. Every
round writes its own topics and parquet directory (a new query restarts the
source's values and batch ids).

Rows/s come from the query progress: the rows of the completed micro-batches
over the sum of their ``triggerExecution`` durations, leaving out each query's
first batch (Python worker start-up, topic creation, planning) when there are
more. Each exactly-once topic is then checked by a batch read (count, min, max
and sum of ``value``): every committed micro-batch's rows once, none lost, none
twice; a run that fails the check fails the scenario. Last, the round-1
exactly-once topic, ``bench_replay`` (a Python source that replays one Arrow
batch from memory, with the raftlog read's schema, rows and stored batch size:
the ceiling of any Python source, see
:mod:`benchmarks.workloads.spark_replay_source`) and the parquet output are each
read as a stream with ``Trigger.AvailableNow`` into ``noop``: rows/s the same
way, every batch. Then the tail: the exactly-once sink writes a new topic while
the raftlog source reads it as a stream (Spark's default trigger) into ``noop``;
the reader's rows/s (over its busy time) beside the writer's shows whether it
keeps up (see :func:`tail_read`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import tenacity

from benchmarks.context import RunContext
from benchmarks.goals import Goal, Pick, row
from benchmarks.registry import Row, Skip, require, scenario
from benchmarks.scenarios.small import seconds_per_step
from benchmarks.workloads import raftlog_local, spark_count_sink, spark_replay_source
from benchmarks.workloads.process_cpu import tree_cpu_seconds

FULL_SECONDS, QUICK_SECONDS = 30.0, 2.0
"""Seconds per sink and round, counted from the end of the query's first micro-batch."""
FULL_ROWS_PER_BATCH, QUICK_ROWS_PER_BATCH = 1_000_000, 10_000
FULL_ROUNDS, QUICK_ROUNDS = 2, 1
SPARK_PARTITIONS = 2
"""Partitions of the source (= tasks per micro-batch, = local[2]'s cores) and of the topic."""
PAYLOAD_BYTES = 100
TOPIC = "bench-spark"
"""Prefix of the raftlog topics: ``bench-spark-alo-<round>``, ``bench-spark-eo-<round>``."""
FIRST_BATCH_TIMEOUT_S = 120.0
"""Bound of a write query's start-up: until its first micro-batch completes."""
READ_TIMEOUT_S = 300.0
"""Bound of one AvailableNow read (it stops by itself once it has read what was there)."""
STOP_QUERY_TIMEOUT_S = 15.0
"""Bound of the wait for a stopped query's killed tasks to end."""
STOP_JVM_TIMEOUT_S = 30.0
DELETE_TIMEOUT_S = 60.0
"""Bound of the wait for a deleted topic's replicas to be moved aside (then purged)."""
MAX_PROGRESS = 100_000
"""spark.sql.streaming.numRecentProgressUpdates: keep every micro-batch's progress."""
AT_LEAST_ONCE, EXACTLY_ONCE = "raftlog at-least-once", "raftlog exactly-once"
EXACTLY_ONCE_LZ4, EXACTLY_ONCE_ZSTD = "raftlog exactly-once lz4", "raftlog exactly-once zstd"
CEILING_KV, EXACTLY_ONCE_KV = "python ceiling key/value", "raftlog exactly-once key/value"
SINKS = (
    "noop",
    "python ceiling",
    "parquet",
    AT_LEAST_ONCE,
    EXACTLY_ONCE,
    EXACTLY_ONCE_LZ4,
    EXACTLY_ONCE_ZSTD,
    CEILING_KV,
    EXACTLY_ONCE_KV,
)
GUARANTEES = {
    AT_LEAST_ONCE: "at-least-once",
    EXACTLY_ONCE: "exactly-once",
    EXACTLY_ONCE_LZ4: "exactly-once",
    EXACTLY_ONCE_ZSTD: "exactly-once",
    EXACTLY_ONCE_KV: "exactly-once",
}
"""The raftlog sinks' ``deliveryGuarantee``."""
COMPRESSION = {EXACTLY_ONCE_LZ4: "lz4", EXACTLY_ONCE_ZSTD: "zstd"}
"""The raftlog sinks' option ``compression`` (the others: none, the topic's default)."""
KEY_VALUE = frozenset({CEILING_KV, EXACTLY_ONCE_KV})
"""Sinks fed Kafka's columns, as a Kafka user's DataFrame is: raftlog writes them as raw
records (``pyspark_raftlog.raw_records``), not as Arrow IPC."""
KEY_VALUE_COLUMNS = ("CAST(value AS STRING) AS key", "payload AS value")
"""The source's rows as (key, value): the row number as a string, and the payload."""
NODE_CPU_KEY = "node CPU-s per 1M rows"
CASES = ("all", "write", "read")
"""``--spark-cases``: what runs (see :func:`add_arguments`)."""
READ_SINKS = ("parquet", EXACTLY_ONCE)
"""The sinks whose output the reads read (``--spark-cases read`` runs only these)."""

Configure = Callable[[Any], Any]


def positive_number(kind: type[float] | type[int]) -> Callable[[str], float | int]:
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
        "--spark-seconds", type=positive_number(float), default=None, help="seconds per sink"
    )
    group.add_argument(
        "--spark-rows-per-batch",
        type=positive_number(int),
        default=None,
        help="rows per source micro-batch",
    )
    group.add_argument(
        "--spark-rounds",
        type=positive_number(int),
        default=None,
        help="times each sink runs, interleaved (figures pool the rounds)",
    )
    group.add_argument(
        "--spark-cases",
        choices=CASES,
        default="all",
        help="all (default): every sink, then the reads; write: the sinks only; read: only "
        "the sinks the reads need (parquet, raftlog exactly-once), then the reads",
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


def batch_time(progress: Sequence[Any], skip_first: bool) -> tuple[int, int, int]:
    """(rows, micro-batches, milliseconds) of the completed micro-batches in ``progress``.

    Milliseconds are the sum of the batches' ``triggerExecution`` time; with
    ``skip_first`` the first batch is left out when there are more (warm-up).
    """
    batches = sorted(progress, key=lambda p: p.batchId)
    if skip_first and len(batches) > 1:
        batches = batches[1:]
    rows = sum(int(p.numInputRows) for p in batches)
    millis = sum(int(p.durationMs.get("triggerExecution", 0)) for p in batches)
    return rows, len(batches), millis


def batch_figures(progress: Sequence[Any], skip_first: bool) -> tuple[int, int, float]:
    """(rows, micro-batches, rows/s) of the completed micro-batches in ``progress``.

    rows/s = rows / the sum of the batches' ``triggerExecution`` time; with
    ``skip_first`` the first batch is left out when there are more (warm-up).
    """
    rows, batches, millis = batch_time(progress, skip_first)
    return rows, batches, (rows * 1000.0 / millis if millis > 0 else 0.0)


def pooled_figures(runs: Sequence[Sequence[Any]]) -> tuple[int, int, float, float]:
    """(rows, micro-batches, rows/s, ms per micro-batch) over several queries' progress,
    each query's first batch left out (when it has more): total rows / total time."""
    rows = batches = millis = 0
    for progress in runs:
        r, b, m = batch_time(progress, skip_first=True)
        rows, batches, millis = rows + r, batches + b, millis + m
    rate = rows * 1000.0 / millis if millis > 0 else 0.0
    return rows, batches, rate, (millis / batches if batches else 0.0)


def committed_rows(progress: Sequence[Any]) -> int:
    """Rows of every micro-batch the query reported complete (the first one included)."""
    return sum(int(p.numInputRows) for p in progress)


def check_once(
    count: int, low: int | None, high: int | None, total: int | None, reported: int, per_batch: int
) -> str | None:
    """Why (count, min, max, sum) of a topic's ``value`` column is not every committed
    row exactly once, or None when it is.

    ``rate-micro-batch`` numbers its rows 0, 1, 2, ... across micro-batches, so the
    rows of n committed rows, each once, are exactly 0..n-1. ``reported`` is the rows
    of the micro-batches the query reported complete; the batch in flight when the
    query was stopped may have committed without being reported, so ``count`` may be
    one batch more.
    """
    if count not in (reported, reported + per_batch):
        return (
            f"read back {count} rows; the query reported {reported} committed "
            f"(one micro-batch of {per_batch} more is allowed: the one stopped in flight)"
        )
    if count == 0:
        return None
    if (low, high, total) != (0, count - 1, count * (count - 1) // 2):
        return (
            f"values are not 0..{count - 1} each once: min {low}, max {high}, "
            f"sum {total} (expected {count * (count - 1) // 2})"
        )
    return None


def timed_write(
    spark: Any,
    configure: Configure,
    checkpoint: Path,
    rows: int,
    seconds: float,
    columns: Sequence[str] = (),
):
    """Stream the source (as ``columns``, SQL expressions, when given) into the sink
    ``configure`` sets up for ``seconds``; its progress."""
    frame = source(spark, rows)
    if columns:
        frame = frame.selectExpr(*columns)
    writer = frame.writeStream.option("checkpointLocation", str(checkpoint))
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
        quiet_stop(spark, query)
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    return list(query.recentProgress)


def quiet_stop(spark: Any, query: Any) -> None:
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
        spark.dataSource.register(spark_replay_source.ReplayDataSource)
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


def check_java() -> None:
    java_home = os.environ.get("JAVA_HOME")
    if not (java_home and Path(java_home, "bin", "java").exists()) and not shutil.which("java"):
        raise Skip("Spark needs Java 17+: apt-get install openjdk-17-jre-headless")


def read_back(
    spark: Any, servers: list[str], topic: str, key_value: bool = False
) -> tuple[int, Any, Any, Any]:
    """(count, min, max, sum) of the source's row numbers in ``topic``, by a batch read
    (committed rows): column ``value``, or with ``key_value`` the key (Kafka's binary)."""
    from pyspark.sql import functions as F

    frame = (
        spark.read.format("raftlog")
        .option("topic", topic)
        .option("servers", ",".join(servers))
        .load()
    )
    number = F.expr("CAST(CAST(key AS STRING) AS BIGINT)") if key_value else F.col("value")
    row = frame.agg(F.count(F.lit(1)), F.min(number), F.max(number), F.sum(number)).collect()[0]
    return int(row[0]), row[1], row[2], row[3]


def stored_batch_rows(servers: list[str], topic: str) -> int:
    """Rows per stored record batch of ``topic`` (the median over its partition 0's first
    fetch; a transaction marker's one record left out): the rows of each Arrow batch
    the raftlog source hands Spark, which the Python ceiling read replays."""
    client = raftlog_local.blocking_client_class()(servers)
    try:
        start = client.list_offsets(topic, 0)[0]
        counts = [b.record_count for b in client.fetch(topic, 0, start, 4 << 20).batches]
    finally:
        client.close()
    data = sorted(c for c in counts if c > 1)
    if not data:
        raise RuntimeError(f"topic {topic!r} partition 0 holds no data batch to size from")
    return data[len(data) // 2]


def raftlog_options(
    servers: list[str], topic: str, guarantee: str, compression: str | None = None
) -> dict[str, str]:
    opts = {
        "topic": topic,
        "servers": ",".join(servers),
        "acks": "all",
        "deliveryGuarantee": guarantee,
        "replicationFactor": "3",
        "partitions": str(SPARK_PARTITIONS),
    }
    if compression is not None:
        opts["compression"] = compression
    return opts


def slug(name: str) -> str:
    """``name`` (a sink's or a source's) as one path component: ``key/value`` would nest."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-")


def topic_of(sink: str, round_no: int) -> str:
    """The topic a raftlog sink writes in round ``round_no`` (1-based)."""
    suffix = "eo" if GUARANTEES[sink] == "exactly-once" else "alo"
    if sink in COMPRESSION:
        suffix += "-" + COMPRESSION[sink]
    if sink in KEY_VALUE:
        suffix += "-kv"
    return f"{TOPIC}-{suffix}-{round_no}"


def stored_bytes(servers: list[str], topics: Sequence[str]) -> tuple[float, float]:
    """(bytes, records) on disk of ``topics``: every replica's segment bytes and every
    replica's records (log end - log start; control batches count as records), from the
    nodes' ``/metrics`` (``raftlog_partition_size_bytes`` and the offsets beside it)."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = set(topics)
    sums = {"size_bytes": 0.0, "log_end_offset": 0.0, "log_start_offset": 0.0}
    for address in servers:
        for family in text_string_to_metric_families(raftlog_local.scrape(address)):
            key = family.name.removeprefix("raftlog_partition_")
            if key not in sums:
                continue
            sums[key] += sum(s.value for s in family.samples if s.labels.get("topic") in wanted)
    return sums["size_bytes"], sums["log_end_offset"] - sums["log_start_offset"]


def delete_topic(servers: list[str], topic: str, cluster_dir: Path) -> None:
    """Delete ``topic`` and purge its replicas' data: a sink's topic holds about 8 GB
    (3 replicas) per 30-s run, more than a run's ten of them leave room for on a 64 GB
    disk. A node moves a deleted group's directory aside (only an explicit purge
    removes data); this waits, bounded, for all of the topic's to be moved, then
    removes them, as ``raftlog node purge-moved-aside`` would."""
    from raftlog.storage import identity

    client = raftlog_local.blocking_client_class()(servers)
    try:
        client.delete_topic(topic)
    finally:
        client.close()
    replicas = SPARK_PARTITIONS * len(servers)

    @tenacity.retry(
        stop=tenacity.stop_after_delay(DELETE_TIMEOUT_S),
        wait=tenacity.wait_fixed(0.2),
        retry=tenacity.retry_if_result(lambda found: len(found) < replicas),
        retry_error_callback=lambda state: state.outcome.result(),  # purge what is there
    )
    def moved() -> list[Path]:
        return [p for node in nodes for p in identity.moved_aside(node) if p.parent.name == topic]

    nodes = [node for node in cluster_dir.iterdir() if node.is_dir()]
    moved()
    for node in nodes:
        identity.purge_moved_aside(node)


def measure(
    ctx: RunContext,
    spark: Any,
    servers: list[str],
    scratch: Path,
    node_pids: Sequence[int],
) -> list[Row]:
    """Every sink in turn, then the reads; each sink's row also gets the CPU of the local
    cluster's nodes (``node_pids``) per million rows it committed."""
    seconds = seconds_per_step(ctx, QUICK_SECONDS, FULL_SECONDS, "spark_seconds")
    per_batch = ctx.option("spark_rows_per_batch", QUICK_ROWS_PER_BATCH, FULL_ROWS_PER_BATCH)
    rounds = ctx.option("spark_rounds", QUICK_ROUNDS, FULL_ROUNDS)
    cases = getattr(ctx.args, "spark_cases", None) or "all"
    sinks = READ_SINKS if cases == "read" else SINKS
    reads = cases != "write"
    once = [name for name in sinks if GUARANTEES.get(name) == "exactly-once"]
    ctx.set_total(len(sinks) * rounds + len(once) * rounds + (4 if reads else 0))

    def configure(name: str, round_no: int) -> Configure:
        if name == "noop":
            return lambda w: w.format("noop")
        if name in ("python ceiling", CEILING_KV):
            return lambda w: w.format(spark_count_sink.NAME)
        if name == "parquet":
            path = str(scratch / f"parquet-{round_no}")
            return lambda w: w.format("parquet").option("path", path)
        opts = raftlog_options(
            servers, topic_of(name, round_no), GUARANTEES[name], COMPRESSION.get(name)
        )
        return lambda w: w.format("raftlog").options(**opts)

    progress: dict[str, list[list[Any]]] = {name: [] for name in sinks}
    node_cpu = dict.fromkeys(sinks, 0.0)
    verified = dict.fromkeys(once, 0)
    stored = {name: [0.0, 0.0] for name in GUARANTEES if name in sinks}  # bytes, records
    for round_no in range(1, rounds + 1):
        for name in sinks:
            checkpoint = scratch / f"cp-{slug(name)}-{round_no}"
            cpu_before = tree_cpu_seconds(node_pids)
            columns = KEY_VALUE_COLUMNS if name in KEY_VALUE else ()
            runs = timed_write(
                spark, configure(name, round_no), checkpoint, per_batch, seconds, columns
            )
            node_cpu[name] += tree_cpu_seconds(node_pids) - cpu_before
            if batch_time(runs, skip_first=True)[0] == 0:
                raise RuntimeError(f"sink {name}: no micro-batch completed in {seconds:g} s")
            progress[name].append(runs)
            ctx.advance(1)
            if name not in GUARANTEES:
                continue
            topic = topic_of(name, round_no)
            for i, value in enumerate(stored_bytes(servers, [topic])):
                stored[name][i] += value
            if name in once:
                # Exactly-once must mean it: every committed micro-batch's rows, each once.
                count, low, high, total = read_back(spark, servers, topic, name in KEY_VALUE)
                problem = check_once(count, low, high, total, committed_rows(runs), per_batch)
                if problem is not None:
                    raise RuntimeError(f"{name} sink, topic {topic!r}: {problem}")
                verified[name] += count
                ctx.advance(1)
            if (name, round_no) != (EXACTLY_ONCE, 1) or not reads:  # that one is read below
                delete_topic(servers, topic, scratch / "cluster")

    rate: dict[str, float] = {}
    rows: list[Row] = []
    for name in sinks:
        _, batches, rate[name], batch_ms = pooled_figures(progress[name])
        rows.append(
            {
                "case": f"write: rate-micro-batch -> {name}",
                "rows/s": rate[name],
                "micro-batches": batches,
                "ms per micro-batch": batch_ms,
            }
        )
    by_case = {name: row for name, row in zip(sinks, rows, strict=True)}
    for name in sinks:
        committed = sum(committed_rows(runs) for runs in progress[name])
        by_case[name][NODE_CPU_KEY] = node_cpu[name] / committed * 1e6
    ratios = [
        (AT_LEAST_ONCE, "raftlog / python ceiling", "python ceiling"),
        (AT_LEAST_ONCE, "raftlog / parquet", "parquet"),
        (EXACTLY_ONCE, "raftlog / python ceiling", "python ceiling"),
        (EXACTLY_ONCE, "raftlog / parquet", "parquet"),
        (EXACTLY_ONCE, "exactly-once / at-least-once", AT_LEAST_ONCE),
        (EXACTLY_ONCE_KV, "raftlog / python ceiling", CEILING_KV),
    ]
    for name, key, peer in ratios:
        if name in rate and peer in rate:  # both ran (see --spark-cases)
            by_case[name][key] = rate[name] / rate[peer]
    for name in once:
        by_case[name]["rows read back once"] = verified[name]
    for name, (nbytes, records) in stored.items():
        by_case[name]["stored bytes per row"] = nbytes / records if records > 0 else 0.0

    if reads:
        rows += read_figures(ctx, spark, servers, scratch)
        rows.append(tail_read(ctx, spark, servers, scratch, per_batch, seconds))
        ctx.advance(1)
    if rounds > 1:
        per_round = "; ".join(
            f"{name.removeprefix('raftlog ')} "
            + ", ".join(f"{pooled_figures([r])[2]:,.0f}" for r in progress[name])
            for name in GUARANTEES
            if name in sinks
        )
        ctx.note(f"rows/s per round (the spread is the noise): {per_round}")
    ctx.note(
        f"local[{SPARK_PARTITIONS}]; rate-micro-batch, {per_batch} rows per micro-batch over "
        f"{SPARK_PARTITIONS} partitions, {PAYLOAD_BYTES}-byte distinct string per row; "
        f"{seconds:g} s per sink and round, {rounds} round(s), the sinks in turn in one "
        "session; rows/s = rows / triggerExecution time of the completed micro-batches "
        "(each query's first left out), pooled over the rounds; each read is measured "
        "after one untimed warm-up read of the same source"
    )
    ctx.note(
        f"raftlog: 3-node local cluster on one disk, acks=all, 3 replicas, {SPARK_PARTITIONS} "
        "partitions; at-least-once = deliveryGuarantee at-least-once (plain writes); "
        "exactly-once = the default (one two-phase commit per micro-batch through the "
        "transaction coordinator), checked by a batch read: count, min, max, sum of value "
        "= every committed row once; reads: Trigger.AvailableNow into noop of the round-1 "
        "exactly-once topic, of bench_replay (the Python read ceiling: one Arrow batch of the "
        "topic's stored batch size replayed from memory, the same schema and rows) and of the "
        "parquet output"
    )
    ctx.note(
        f"{NODE_CPU_KEY}: user + system CPU of the 3 nodes' processes (from /proc) while "
        "the sink's queries ran, over every row they committed (first micro-batches "
        "included); beside a sink that is not raftlog it is the idle cluster's. The "
        "sinks are CPU-bound on a 2-core machine, so every node CPU-second is taken "
        "from Spark"
    )
    ctx.note(
        "key/value: the same rows as Kafka's columns (key = the row number as a string, "
        "value = the payload), as a Kafka user's DataFrame has them, into the Python "
        "ceiling and into raftlog exactly-once, which writes them as raw records (Kafka's "
        "record model) instead of Arrow IPC; its ratio is to the key/value ceiling"
    )
    ctx.note(
        "compression: exactly-once again with option compression lz4 and zstd (level 3), "
        "compressed in the Spark tasks, decompressed by the reader; stored bytes per row = "
        "segment bytes on disk over records (log end - log start), summed over every "
        "replica of the sink's topics (batch headers and transaction markers included)"
    )
    return rows


def raftlog_stream(spark: Any, servers: list[str], topic: str) -> Any:
    """The raftlog source's stream of ``topic``, from its earliest offset."""
    return (
        spark.readStream.format("raftlog")
        .option("topic", topic)
        .option("servers", ",".join(servers))
        .option("startingOffsets", "earliest")
        .load()
    )


def read_figures(ctx: RunContext, spark: Any, servers: list[str], scratch: Path) -> list[Row]:
    """The AvailableNow reads of the round-1 exactly-once topic, of the Python read ceiling
    and of the round-1 parquet output, each after an untimed warm-up read; their rows."""
    eo_topic = topic_of(EXACTLY_ONCE, 1)
    raftlog_reader = raftlog_stream(spark, servers, eo_topic)
    read_rate: dict[str, float] = {}
    read_rows: list[Row] = []

    def replay_reader() -> Any:
        # The same rows, columns and Arrow batch size as the raftlog read, from memory;
        # made after that read (readers run in order), whose row count it replays.
        return (
            spark.readStream.format(spark_replay_source.NAME)
            .schema(raftlog_reader.schema)
            .option("rows", str(read_rows[0]["rows"]))
            .option("batchRows", str(stored_batch_rows(servers, eo_topic)))
            .option("partitions", str(SPARK_PARTITIONS))
            .option("payloadBytes", str(PAYLOAD_BYTES))
            .option("topic", eo_topic)
            .load()
        )

    readers: dict[str, Callable[[], Any]] = {
        "raftlog": lambda: raftlog_reader,
        "python ceiling": replay_reader,
        "parquet": lambda: spark.readStream.schema(
            spark.read.parquet(str(scratch / "parquet-1")).schema
        ).parquet(str(scratch / "parquet-1")),
    }
    for name, make_reader in readers.items():
        reader = make_reader()
        # One untimed read first, for each source alike: the first query of a kind
        # pays Spark's cold start (a planning daemon, fresh Python workers, imports),
        # which would otherwise dominate a read of a few seconds' data.
        available_now_read(reader, scratch / f"cp-warmup-{slug(name)}")
        read_progress = available_now_read(reader, scratch / f"cp-read-{slug(name)}")
        count, batches, read_rate[name] = batch_figures(read_progress, skip_first=False)
        if count == 0:
            raise RuntimeError(f"the AvailableNow read of {name} read no rows")
        read_rows.append(
            {
                "case": f"read (AvailableNow): {name} -> noop",
                "rows/s": read_rate[name],
                "rows": count,
                "micro-batches": batches,
            }
        )
        ctx.advance(1)
    read_rows[0]["raftlog / python ceiling"] = read_rate["raftlog"] / read_rate["python ceiling"]
    read_rows[0]["raftlog / parquet"] = read_rate["raftlog"] / read_rate["parquet"]
    return read_rows


TAIL_TOPIC = "bench-spark-tail"
TAIL_CASE = "tail: raftlog exactly-once -> raftlog source -> noop"
POLL_S = 0.5
"""How often the tail's queries' progress is collected (Spark keeps only the last 100)."""
CATCH_UP_TIMEOUT_S = 120.0
"""Bound of the wait, once the tail's writer stopped, for its reader to read every row."""


class _Batches:
    """Every completed micro-batch of one query, ``batchId -> progress``, collected by
    :meth:`poll` (``recentProgress`` keeps only the last 100)."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.seen: dict[int, Any] = {}

    def poll(self) -> None:
        for p in self.query.recentProgress:
            self.seen.setdefault(int(p.batchId), p)

    def rows(self) -> int:
        return sum(int(p.numInputRows) for p in self.seen.values())

    def busy(self) -> list[Any]:
        """The batches that had rows (an idle streaming query reports empty ones)."""
        return [p for p in self.seen.values() if int(p.numInputRows) > 0]


def tail_read(
    ctx: RunContext, spark: Any, servers: list[str], scratch: Path, per_batch: int, seconds: float
) -> Row:
    """The exactly-once sink writing ``per_batch`` rows per micro-batch into a new topic
    while the raftlog source tails it (Spark's default trigger: the next micro-batch as
    soon as the last is done) into ``noop``, both for ``seconds`` once each has completed
    its first micro-batch; then the writer stops and the reader reads the rest.

    The row: the rows each query completed in the window over the window's wall time
    (``rows/s``: the reader's, ``writer rows/s``), their ratio, how many committed rows
    the reader was behind when the writer stopped, and how long it then took to read
    them (bounded by CATCH_UP_TIMEOUT_S). A reader that keeps up reads in the window
    what the writer wrote in it, give or take a micro-batch at each end (it reads
    committed rows only, so it trails the writer by at least one); one that does not
    falls further behind with every micro-batch. Its capacity (rows over the summed
    ``triggerExecution`` of its batches) is shown too: a reader that keeps up waits for
    rows, so that figure is not the one to judge it by."""
    opts = raftlog_options(servers, TAIL_TOPIC, "exactly-once")
    writer = (
        source(spark, per_batch)
        .writeStream.option("checkpointLocation", str(scratch / "cp-tail-writer"))
        .format("raftlog")
        .options(**opts)
        .start()
    )
    reader_query = None
    try:
        written = _Batches(writer)
        _await_first_batch(writer, written)
        reader_query = (
            raftlog_stream(spark, servers, TAIL_TOPIC)
            .writeStream.format("noop")
            .option("checkpointLocation", str(scratch / "cp-tail-reader"))
            .start()
        )
        read = _Batches(reader_query)
        _await_first_batch(reader_query, read)
        written.poll()
        start, written_before, read_before = time.monotonic(), written.rows(), read.rows()
        reader_from = max(read.seen)
        for _ in range(int(seconds / POLL_S) + 1):
            if time.monotonic() - start >= seconds:
                break
            for q in (writer, reader_query):
                if q.exception() is not None:
                    raise RuntimeError(f"a tail query failed: {q.exception()}")
            time.sleep(POLL_S)
            written.poll()
            read.poll()
        window = time.monotonic() - start
        written.poll()
        read.poll()
        in_window_written = written.rows() - written_before
        in_window_read = read.rows() - read_before
        quiet_stop(spark, writer)
        written.poll()
        committed = written.rows()
        behind = max(committed - read.rows(), 0)
        stopped = time.monotonic()
        for _ in range(int(CATCH_UP_TIMEOUT_S / POLL_S)):
            read.poll()
            if read.rows() >= committed or reader_query.exception() is not None:
                break
            time.sleep(POLL_S)
        caught_up = read.rows() >= committed
        catch_up_s = time.monotonic() - stopped
    finally:
        for q in (writer, reader_query):
            if q is not None and q.isActive:
                quiet_stop(spark, q)
    if reader_query.exception() is not None:
        raise RuntimeError(f"the tail's reader failed: {reader_query.exception()}")
    busy = [p for p in read.busy() if int(p.batchId) > reader_from]
    busy_rows = sum(int(p.numInputRows) for p in busy)
    busy_ms = sum(int(p.durationMs.get("triggerExecution", 0)) for p in busy)
    writer_rate = in_window_written / window if window > 0 else 0.0
    reader_rate = in_window_read / window if window > 0 else 0.0
    if not caught_up:
        ctx.note(
            f"tail: the reader had not read every committed row {CATCH_UP_TIMEOUT_S:g} s "
            f"after the writer stopped ({read.rows():,} of {committed:,})"
        )
    ctx.note(
        f"tail: the exactly-once sink ({per_batch:,} rows per micro-batch) into a new topic "
        f"while a raftlog streaming read (default trigger) of it runs into noop, {seconds:g} s; "
        "rows/s = rows of each query's micro-batches completed in the window / the window; "
        "reader capacity = rows / triggerExecution time of its micro-batches that had rows"
    )
    tail: Row = {
        "case": TAIL_CASE,
        "rows/s": reader_rate,
        "writer rows/s": writer_rate,
        "reader / writer": reader_rate / writer_rate if writer_rate > 0 else 0.0,
        "rows read in the window": in_window_read,
        "rows written in the window": in_window_written,
        "micro-batches": len(busy),
        "reader capacity rows/s": busy_rows * 1000.0 / busy_ms if busy_ms > 0 else 0.0,
        "rows behind when the writer stopped": behind,
    }
    if caught_up:
        tail["s to catch up"] = catch_up_s
    return tail


def _await_first_batch(query: Any, batches: _Batches) -> None:
    """Until ``query`` completed a micro-batch with rows (bounded by FIRST_BATCH_TIMEOUT_S)."""
    for _ in range(int(FIRST_BATCH_TIMEOUT_S / POLL_S)):
        batches.poll()
        if batches.busy() or query.exception() is not None:
            break
        time.sleep(POLL_S)
    if query.exception() is not None:
        raise RuntimeError(f"the streaming query failed: {query.exception()}")
    if not batches.busy():
        raise TimeoutError(f"no micro-batch with rows in {FIRST_BATCH_TIMEOUT_S:g} s")


_WRITE = "write: rate-micro-batch -> "
_READ = "read (AvailableNow): "
GOALS = (
    Goal(
        "spark-sink",
        "Spark sink, exactly-once, acks=all, 1,000,000 rows per micro-batch",
        ours=(Pick("raftlog exactly-once", row(case=_WRITE + "raftlog exactly-once"), "rows/s"),),
        peers=(Pick("empty Python writer", row(case=_WRITE + "python ceiling"), "rows/s"),),
        target=0.8,
    ),
    Goal(
        "spark-2pc",
        "Spark sink: the cost of exactly-once (one 2PC per micro-batch)",
        ours=(Pick("exactly-once", row(case=_WRITE + "raftlog exactly-once"), "rows/s"),),
        peers=(Pick("at-least-once", row(case=_WRITE + "raftlog at-least-once"), "rows/s"),),
        target=0.9,
    ),
    Goal(
        "spark-source",
        "Spark source (AvailableNow) against the Python read ceiling",
        ours=(Pick("raftlog source", row(case=_READ + "raftlog -> noop"), "rows/s"),),
        peers=(
            Pick("Python source ceiling", row(case=_READ + "python ceiling -> noop"), "rows/s"),
        ),
        target=0.9,
    ),
    Goal(
        "spark-source-parquet",
        "Spark source (AvailableNow) against the parquet source",
        ours=(Pick("raftlog source", row(case=_READ + "raftlog -> noop"), "rows/s"),),
        peers=(Pick("parquet source", row(case=_READ + "parquet -> noop"), "rows/s"),),
        target=1.0,
    ),
    Goal(
        "spark-tail",
        "Spark source, Trigger default, tailing the exactly-once sink at 1,000,000 rows "
        "per micro-batch: keeps up (reads in the window what was written in it, a "
        "micro-batch of slack)",
        ours=(Pick("raftlog source", row(case=TAIL_CASE), "rows/s"),),
        peers=(Pick("the sink writing it", row(case=TAIL_CASE), "writer rows/s"),),
        target=0.95,
    ),
)


@scenario(
    "spark",
    "rate-micro-batch into noop/Python ceiling/parquet/raftlog at-least-once and "
    "exactly-once (uncompressed, lz4, zstd; and as Kafka's key/value columns), and "
    "AvailableNow reads: rows/s, bytes per row",
    add_arguments=add_arguments,
    goals=GOALS,
)
def run(ctx: RunContext) -> list[Row]:
    require("pyspark.sql.datasource", "DataSourceStreamArrowWriter")
    require("pyspark_raftlog.datasource", "DefaultSource")
    check_java()
    with (
        ctx.scratch_dir("spark") as scratch,
        raftlog_local.local_cluster(scratch / "cluster", ctx=ctx) as cluster,
        spark_session() as spark,
    ):
        try:
            return measure(ctx, spark, cluster.servers, scratch, [n.pid for n in cluster.nodes])
        except Exception as exc:
            # A pyspark exception turns into text through the JVM: do it while the JVM
            # is up, or the harness's own report of the failure raises instead.
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
