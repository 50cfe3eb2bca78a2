"""The main job: a demo pipeline on the embedded local cluster.

``python -m pyspark_raftlog.demo`` streams Spark's ``rate-micro-batch`` source
(a fixed number of rows per micro-batch, numbered 0, 1, 2, ... across batches)
into a raftlog topic for a bounded time, with no ``servers`` option (so the
connector starts the embedded local cluster when it is not running). It prints
each micro-batch's rows and rows per second as the batches complete, stops the
query *between* micro-batches, then reads the topic back with a batch read and
checks exactly-once: every value the stream produced is there once, with none
missing in between.

Why between micro-batches: ``query.stop()`` interrupts a micro-batch in flight,
and Spark logs that interruption (the aborted write) as ERROR lines with stack
traces although nothing is wrong. The query runs on a processing-time trigger,
whose triggers fall on multiples of the interval on the wall clock (Spark's
``ProcessingTimeExecutor``), so once a micro-batch has finished the demo knows
when the next one will start and stops only when that is far enough away.

The demo deletes its topic at the end (``--keep-topic`` keeps it, to look at
with ``raftlog consume`` or the console): a topic of a few million rows takes
hundreds of MB with its replicas, and the default retention keeps it 7 days.
The local cluster is stopped afterwards when the demo started it
(``--keep-cluster`` leaves it running for ``raftlog consume`` and friends).

A normal run logs no WARN line: Spark's "Current batch is falling behind" on the
first micro-batch (which also starts the cluster and Spark's Python workers) is
expected there, so the demo turns that one logger (:data:`QUIET_FALLING_BEHIND`)
down to ERROR and says itself, in plain words, when a later micro-batch overran
its trigger interval.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime
from typing import Any

from pyspark_raftlog.logsetup import LEVEL_ENV
from pyspark_raftlog.session import build_session
from tenacity import retry, retry_if_result, stop_after_delay, wait_fixed

from raftlog.cluster import (
    load_cluster,
    remove_deleted_topic_files,
    running,
    stop_cluster,
    topic_disk_usage,
)

STOP_MARGIN_MS = 300
"""Stop only when the next trigger is at least this far away (a stop takes milliseconds)."""
QUIET_ON_STOP = "org.apache.spark.scheduler.DAGScheduler"
"""Logs a WARN "Failed to cancel job group ... Cannot find active jobs" on every stop of an
idle query (the stop cancels the query's jobs, and between micro-batches there are none)."""
MAX_STOP_WAIT_S = 120.0
FIRST_BATCH_WAIT_S = 600.0
"""How long the first micro-batch may take (it also starts the cluster, creates the topic
and starts Spark's Python workers: minutes on a busy 2-core machine) before the demo
stops the query in the middle of it."""
"""After ``--seconds``, how long to wait for a gap between micro-batches before stopping anyway."""
POLL_S = 0.05
QUIET_FALLING_BEHIND = "org.apache.spark.sql.execution.streaming.runtime.ProcessingTimeExecutor"
"""Logs only "Current batch is falling behind" (WARN) when a micro-batch overruns its
trigger interval, which the first one always does; :func:`_report` says it instead."""
TOPIC_DELETE_WAIT_S = 30.0
"""How long the demo waits for every node to drop its deleted topic's replicas."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pyspark_raftlog.demo",
        description="Stream Spark's rate-micro-batch source into raftlog exactly once, "
        "then read it back.",
    )
    parser.add_argument(
        "--seconds",
        type=float,
        default=20.0,
        help="how long to stream after the first micro-batch (which starts things up)",
    )
    parser.add_argument("--rows-per-batch", type=int, default=500_000, help="rows per micro-batch")
    parser.add_argument(
        "--trigger-seconds",
        type=float,
        default=3.0,
        help="processing-time trigger interval (a micro-batch starts every N s)",
    )
    parser.add_argument("--topic", default=None, help="default: demo-<unix time>")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the cluster running")
    parser.add_argument(
        "--keep-topic",
        action="store_true",
        help="keep the demo's topic (default: delete it at the end, as it takes hundreds "
        "of MB with its replicas)",
    )
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rows_per_batch <= 0 or args.trigger_seconds <= 0:
        parser.error("--seconds, --rows-per-batch and --trigger-seconds must be positive")
    return args


def _epoch_ms(progress: Any) -> int:
    """The start of a micro-batch (its progress ``timestamp``) in epoch milliseconds."""
    stamp = str(progress["timestamp"]).replace("Z", "+00:00")
    return int(datetime.fromisoformat(stamp).timestamp() * 1000)


def _report(progress: Any, interval_ms: int) -> None:
    """One line per completed micro-batch: rows, time, rows per second; and a note
    when a micro-batch after the first overran the trigger interval (Spark's WARN,
    silenced by :data:`QUIET_FALLING_BEHIND`, in plain words)."""
    rows = int(progress["numInputRows"])
    millis = int(progress["durationMs"].get("triggerExecution", 0))
    rate = rows * 1000.0 / millis if millis > 0 else 0.0
    note = ""
    if int(progress["batchId"]) == 0:
        note = "  (also started the cluster, the topic and Spark's workers)"
    elif millis > interval_ms:
        note = f"  (longer than the {interval_ms / 1000:g} s trigger: the next one starts late)"
    print(
        f"  micro-batch {progress['batchId']:>3}: {rows:>9,} rows in {millis / 1000:5.2f} s"
        f" = {rate:>9,.0f} rows/s{note}",
        flush=True,
    )


def stop_idle(spark: Any, query: Any) -> None:
    """``query.stop()``, with :data:`QUIET_ON_STOP` at ERROR from then on.

    Called only between micro-batches, where the one thing Spark logs is that it
    found no job to cancel: once from the stop, once more from the query thread's
    clean-up, which may come after ``stop()`` returns -- so the level is not put
    back (the demo only reads the topic back afterwards). Anything at ERROR still shows.
    """
    quiet_logger(spark, QUIET_ON_STOP)
    query.stop()  # returns once the query's thread has ended


def quiet_logger(spark: Any, name: str) -> None:
    """Set Spark's JVM logger ``name`` (one class) to ERROR; every other logger keeps
    ``spark_conf/log4j2.properties``'s level."""
    jvm = spark.sparkContext._jvm
    configurator = jvm.org.apache.logging.log4j.core.config.Configurator
    configurator.setLevel(name, jvm.org.apache.logging.log4j.Level.ERROR)


def stream_until(
    spark: Any, query: Any, seconds: float, interval_ms: int
) -> tuple[list[Any], bool]:
    """Report micro-batches as they complete; after ``seconds``, stop between two of them.

    ``seconds`` count from the end of the first micro-batch. Returns the progress of
    every completed micro-batch, and whether the stop came between two. The stop is issued when
    no trigger is active and the next trigger (the multiple of ``interval_ms``
    after the last batch's start; at once if that batch overran its interval) is
    at least :data:`STOP_MARGIN_MS` away. If no such gap comes within
    :data:`MAX_STOP_WAIT_S` (the sink is slower than the trigger), it stops anyway
    and says so.
    """
    seen: dict[int, Any] = {}
    between = False
    # The clock starts when the first micro-batch is done: that one also starts the
    # local cluster, creates the topic and starts Spark's Python workers.
    deadline = give_up = float("inf")
    start_limit = time.monotonic() + FIRST_BATCH_WAIT_S
    while query.isActive:
        for p in query.recentProgress:
            if p["batchId"] not in seen:
                seen[p["batchId"]] = p
                _report(p, interval_ms)
        now = time.monotonic()
        if seen and deadline == float("inf"):
            deadline = now + seconds
            give_up = deadline + MAX_STOP_WAIT_S
        if now >= deadline:
            last = query.lastProgress
            next_trigger_ms = (_epoch_ms(last) // interval_ms + 1) * interval_ms
            idle = not query.status["isTriggerActive"]
            if idle and next_trigger_ms - time.time() * 1000 >= STOP_MARGIN_MS:
                stop_idle(spark, query)
                between = True
                break
        if now >= give_up or (not seen and now >= start_limit):
            why = "no gap between micro-batches came" if seen else "no micro-batch completed"
            waited = MAX_STOP_WAIT_S if seen else FIRST_BATCH_WAIT_S
            print(f"{why} in {waited:g} s; stopping the query in the middle of one")
            print("(Spark logs the aborted write; the check below still holds).")
            query.stop()
            break
        time.sleep(POLL_S)
    for p in query.recentProgress:  # a batch that completed after the last look
        if p["batchId"] not in seen:
            seen[p["batchId"]] = p
            _report(p, interval_ms)
    return [seen[b] for b in sorted(seen)], between


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    topic = args.topic or f"demo-{int(time.time())}"
    existing = load_cluster()
    started_here = existing is None or not running(existing)
    interval_ms = max(1, int(args.trigger_seconds * 1000))

    from pyspark.sql import SparkSession

    own_session = SparkSession.getActiveSession() is None  # never stop a caller's session
    # the demo prints each micro-batch itself; the sink's INFO summary would say it twice
    # (its warnings still show). Read by Spark's workers, which inherit it from here.
    os.environ.setdefault(LEVEL_ENV, "WARNING")
    spark = build_session("raftlog-demo")
    quiet_logger(spark, QUIET_FALLING_BEHIND)
    try:
        with tempfile.TemporaryDirectory(prefix="raftlog-demo-") as checkpoint:
            stream = (
                spark.readStream.format("rate-micro-batch")
                .option("rowsPerBatch", args.rows_per_batch)
                .option("numPartitions", spark.sparkContext.defaultParallelism)
                .load()
                .selectExpr("value", "timestamp", "concat('event-', value) AS payload")
            )
            # Adaptive query execution does not apply to streaming queries, and Spark warns
            # about it at the start of each one: off for the stream, back for the read-back.
            adaptive = spark.conf.get("spark.sql.adaptive.enabled", "true")
            assert adaptive is not None  # get() with a default
            spark.conf.set("spark.sql.adaptive.enabled", "false")
            query = (
                stream.writeStream.format("raftlog")
                .option("topic", topic)
                .option("checkpointLocation", checkpoint)
                .trigger(processingTime=f"{interval_ms} milliseconds")
                .start()
            )
            spark.conf.set("spark.sql.adaptive.enabled", adaptive)
            print(
                f"streaming rate-micro-batch ({args.rows_per_batch:,} rows per micro-batch, "
                f"one every {interval_ms / 1000:g} s) -> raftlog topic {topic!r} "
                f"for {args.seconds:g} s ...",
                flush=True,
            )
            first = (
                "the first micro-batch also starts the local 3-node cluster, creates the "
                "topic and starts Spark's Python workers, so it takes a few seconds more"
                if started_here
                else "the first micro-batch also creates the topic and starts Spark's "
                "Python workers, so it takes longer than the others"
            )
            print(first, flush=True)
            progress, between = stream_until(spark, query, args.seconds, interval_ms)
            if query.exception() is not None:
                print(f"the query failed: {query.exception()}", file=sys.stderr)
                return 1
            rows_in = sum(int(p["numInputRows"]) for p in progress)
            millis = sum(int(p["durationMs"].get("triggerExecution", 0)) for p in progress)
            later = progress[1:] or progress  # the first batch also starts the cluster
            later_rows = sum(int(p["numInputRows"]) for p in later)
            later_ms = sum(int(p["durationMs"].get("triggerExecution", 0)) for p in later)
            where = "between micro-batches" if between else "in the middle of a micro-batch"
            print(
                f"query stopped {where} after {len(progress)} "
                f"micro-batches: {rows_in:,} rows written in {millis / 1000:.1f} s of micro-batches"
            )
            throughput = later_rows * 1000.0 / later_ms if later_ms > 0 else 0.0
            if later_ms > 0:
                print(f"sink throughput after the first micro-batch: {throughput:,.0f} rows/s")

        back = spark.read.format("raftlog").option("topic", topic).load()
        stats = back.selectExpr(
            "count(*) AS n",
            "count(DISTINCT value) AS distinct_values",
            "min(value) AS lo",
            "max(value) AS hi",
        ).first()
        assert stats is not None  # an aggregate without grouping has one row
        n, distinct, lo, hi = stats["n"], stats["distinct_values"], stats["lo"], stats["hi"]
        print(f"read back {n:,} rows from {topic!r}: values {lo}..{hi}, {distinct:,} distinct")
        # rate-micro-batch numbers rows 0, 1, 2, ...: the committed batches hold
        # exactly 0 .. rows_in - 1, each once.
        duplicates = n - distinct
        missing = rows_in - distinct if lo == 0 else rows_in
        exactly_once = n == distinct == rows_in > 0 and lo == 0 and hi == rows_in - 1
        print(
            f"check: {'OK' if exactly_once else 'FAILED'} "
            f"(duplicates {duplicates}, missing {missing})"
        )
        print(explain(topic, len(progress), rows_in, exactly_once, args.keep_topic))
        return 0 if exactly_once else 1
    finally:
        if own_session:
            spark.stop()
        deleted = False
        if not args.keep_topic:
            deleted, said = delete_topic(topic)
            print(said)
        if started_here and not args.keep_cluster:
            stopped = stop_cluster()
            if stopped is not None:
                from raftlog.health import format_bytes  # (the connector's row: not at the top)

                freed = remove_deleted_topic_files(stopped, topic) if deleted else 0
                print(
                    "stopped the local cluster the demo started"
                    + (f" and removed the topic's {format_bytes(freed)} of files" if freed else "")
                )
        elif load_cluster() is not None:
            print("the local cluster is still running; stop it with `raftlog local stop`")


def explain(topic: str, batches: int, rows: int, exactly_once: bool, keep_topic: bool) -> str:
    """What the run showed, and where to look next (printed at the end)."""
    check = (
        "every value the stream produced was read back exactly once: no duplicates from "
        "Spark's retried tasks, nothing missing, since each micro-batch commits as one "
        "transaction"
        if exactly_once
        else "the read-back did NOT match what the stream produced (see the counts above)"
    )
    commands = [
        (f"raftlog consume {topic} --from-beginning --max 5", "the first records"),
        (f"raftlog topic describe {topic}", "partitions, leaders, offsets"),
        ("raftlog console", "the web console, at http://127.0.0.1:9650/console"),
    ]
    width = max(len(c) for c, _ in commands)
    look = "\n".join(f"  {c:<{width}}  # {why}" for c, why in commands)
    if not keep_topic:
        look += "\n(with --keep-topic --keep-cluster, the demo leaves both for these to look at)"
    return (
        f"\nwhat happened: {batches} micro-batches wrote {rows:,} rows into topic {topic!r}, "
        f"each micro-batch one atomic commit on every partition;\n{check}.\n"
        f"look at the data:\n{look}"
    )


def delete_topic(topic: str) -> tuple[bool, str]:
    """Delete the demo's topic of the local cluster and wait (bounded) until no node
    holds a live replica of it; (deleted, one line saying so). A failure is reported
    in the line, never raised: the demo's result stands. Each node moves its replicas
    aside at once and removes them ``--file-delete-delay-ms`` later (or, when the demo
    stops the cluster it started, the demo removes them: see
    :func:`raftlog.cluster.remove_deleted_topic_files`)."""
    from pyspark_raftlog.connection import resolve_servers

    from raftlog.client import BlockingRaftlogClient, RaftlogError, UnknownTopicError

    cluster = load_cluster()
    if cluster is None or not running(cluster):
        return False, f"topic {topic!r} not deleted: the local cluster is not running"
    servers = resolve_servers(None)
    try:
        with BlockingRaftlogClient(
            list(servers),
            auth_token=servers.auth_token,
            admin_token=cluster.admin_token,
            tls_ca_file=servers.tls_ca_file,
            request_timeout_s=TOPIC_DELETE_WAIT_S,
        ) as client:
            client.call(lambda c: c.delete_topic(topic))
    except UnknownTopicError:
        return False, f"topic {topic!r} was already gone"
    except RaftlogError as exc:
        return False, (
            f"topic {topic!r} not deleted: {exc} (delete it with `raftlog topic delete {topic}`)"
        )

    @retry(
        stop=stop_after_delay(TOPIC_DELETE_WAIT_S),
        wait=wait_fixed(0.2),
        retry=retry_if_result(bool),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else [1],
    )
    def nodes_holding_it() -> list[Any]:
        return [u for u in topic_disk_usage(cluster) if u.topic == topic and u.replicas]

    if nodes_holding_it():
        return True, (
            f"deleted topic {topic!r}; some nodes still hold its replicas after "
            f"{TOPIC_DELETE_WAIT_S:g} s (they drop them once they catch up)"
        )
    return True, f"deleted topic {topic!r} (--keep-topic keeps it)"


if __name__ == "__main__":
    sys.exit(main())
