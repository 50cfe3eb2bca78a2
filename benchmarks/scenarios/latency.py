"""Scenario ``latency``: a row written by one streaming query until another reads it.

One Spark session (``local[2]``) and a local 3-node cluster. Per rate (10,000,
100,000 and 1,000,000 rows/s; quick: 10,000) and per sink guarantee
(``exactly-once``, the default, and ``at-least-once``):

* the writer query streams ``bench_clock`` (rows due at the fixed rate, each
  stamped with the time it was due, :mod:`benchmarks.workloads.spark_clock_source`)
  into a new raftlog topic (acks=all, 3 replicas, 2 partitions), Spark's default
  trigger (the next micro-batch as soon as the last is done);
* once it committed its first micro-batch, the reader query streams the topic
  (the raftlog source, which reads committed data only: ``read_committed``)
  into ``bench_latency`` (:mod:`benchmarks.workloads.spark_latency_sink`), which
  takes, per row, the time its Python worker got the row minus the time the row
  was due;
* after ``--latency-warmup`` seconds the rows due over the next
  ``--latency-seconds`` are the sample; the queries run on until the reader has
  seen them all (bounded), then stop.

Per (guarantee, rate) row: the rows seen per second, p50 .. max of the latency,
the p50 and p99 until the row was stored (its batch's append time on the leader
minus when it was due: what a ``read_uncommitted`` reader could at best see; the
raftlog source offers no such reader), and each query's median micro-batch. A
writer that cannot keep up with the rate leaves rows unseen by the end of the
drain: their count is the row's ``rows not seen``, and the latency is then a floor;
when none of the sample was seen the row has no latency columns (the machine does not
go that far).

Then the fixed cost of a small write, each beside Spark's empty Python writer
(``bench_count``) in the same run; the goal (issue 48) is <= 1.5x it:

* ``df.write`` of 1,000 rows into a new topic on the running cluster (exactly-once
  and at-least-once), interleaved with the empty writer, the median of
  ``--latency-writes`` each;
* the first ``df.write`` of a session, each in a fresh process and JVM
  (:mod:`benchmarks.workloads.spark_first_write`), ``--latency-first-writes``
  times each (default 1; quick: not measured);
* a streaming micro-batch of 1,000 rows (``rate-micro-batch``), the median
  ``triggerExecution`` over ``--latency-seconds``, the first batch left out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import tenacity

from benchmarks.context import RunContext
from benchmarks.goals import Goal, Pick, row
from benchmarks.registry import Row, require, scenario
from benchmarks.results import ScenarioResult
from benchmarks.scenarios import spark as spark_scenario
from benchmarks.workloads import (
    raftlog_local,
    spark_clock_source,
    spark_count_sink,
    spark_first_write,
    spark_latency_sink,
)
from benchmarks.workloads.latency import latency_columns

FULL_RATES, QUICK_RATES = (10_000, 100_000, 1_000_000), (10_000,)
FULL_SECONDS, QUICK_SECONDS = 30.0, 2.0
"""Seconds of rows (by the time they were due) per rate and guarantee."""
FULL_WARMUP, QUICK_WARMUP = 5.0, 1.0
"""Seconds after the reader's first micro-batch before the sample's first row is due."""
FULL_WRITES, QUICK_WRITES = 5, 1
FULL_FIRST_WRITES, QUICK_FIRST_WRITES = 1, 0
SMALL_ROWS = 1_000
"""Rows of the small df.write and of the small micro-batch."""
GOAL_RATIO = 1.5
"""Issue 48: a small write's and a micro-batch's fixed cost <= 1.5x the empty Python writer's."""
DRAIN_TIMEOUT_S = 60.0
"""Bound of the wait, after the sample's last row was due, for the reader to see them all."""
FIRST_WRITE_TIMEOUT_S = 300.0
"""Bound of one fresh process's session start and two small writes."""
POLL_S = 0.5
RUN_ATTEMPTS = 5
"""Tries of one (guarantee, rate) run whose query lost a Python worker at start-up."""
CLUSTER_DIR = "cluster"
"""The local cluster's directory in the scenario's scratch directory."""
WORKER_START_FAILURE = "Python worker failed to connect back"
"""Spark's error when a new Python worker takes over 10 s to start (its fixed timeout):
seen on this 2-core machine at load average 26, before any row was measured."""
GUARANTEES = ("exactly-once", "at-least-once")
EMPTY = "empty Python writer"
TOPIC = "bench-latency"


def _fixed_cost_goal(key: str, kind: str, what: str, column: str) -> Goal:
    """Ours (exactly-once) against the empty Python writer's ``kind`` of write,
    ``<= GOAL_RATIO`` times it (issue 48)."""
    return Goal(
        key,
        what,
        ours=(Pick("raftlog exactly-once", row(case=f"{kind}: raftlog exactly-once"), column),),
        peers=(Pick(EMPTY, row(case=f"{kind}: {EMPTY}"), column),),
        target=GOAL_RATIO,
        higher_is_better=False,
    )


GOALS = (
    _fixed_cost_goal(
        "latency-small-write",
        f"df.write {SMALL_ROWS:,} rows",
        f"a small df.write ({SMALL_ROWS:,} rows into a new topic, exactly-once), "
        "on a running session",
        "median s",
    ),
    _fixed_cost_goal(
        "latency-first-write",
        f"first df.write {SMALL_ROWS:,} rows in a session",
        f"the first df.write of a session ({SMALL_ROWS:,} rows, exactly-once), JVM start included",
        "median s",
    ),
    _fixed_cost_goal(
        "latency-micro-batch",
        f"micro-batch of {SMALL_ROWS:,} rows",
        f"a streaming micro-batch of {SMALL_ROWS:,} rows (exactly-once)",
        "median ms",
    ),
)


def add_arguments(group: argparse._ArgumentGroup) -> None:
    positive = spark_scenario.positive_number
    group.add_argument(
        "--latency-rates",
        type=rates_arg,
        default=None,
        help="comma-separated rows/s the writer offers (default 10000,100000,1000000)",
    )
    group.add_argument(
        "--latency-seconds",
        type=positive(float),
        default=None,
        help="seconds of rows sampled per rate and guarantee (default 30, quick 2)",
    )
    group.add_argument(
        "--latency-warmup",
        type=positive(float),
        default=None,
        help="seconds after the reader starts before the sample (default 5, quick 1)",
    )
    group.add_argument(
        "--latency-writes",
        type=positive(int),
        default=None,
        help="small df.writes per sink in the running session (default 5, quick 1)",
    )
    group.add_argument(
        "--latency-first-writes",
        type=int,
        default=None,
        help="fresh sessions per sink for the first df.write (default 1, quick 0)",
    )


def rates_arg(text: str) -> tuple[int, ...]:
    """``10000,100000`` -> (10000, 100000); every rate a positive integer."""
    try:
        rates = tuple(int(part) for part in text.split(","))
    except ValueError:
        rates = ()
    if not rates or min(rates) < 1:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers (rows/s), got {text!r}"
        )
    return rates


def _figure(ctx: RunContext, name: str, quick: float, full: float) -> float:
    value = getattr(ctx.args, name, None)
    return float(value) if value is not None else (quick if ctx.quick else full)


def rows_due(t0_us: int, rate: float, start_s: float, end_s: float) -> int:
    """Rows of ``bench_clock`` (row i due at t0 + i / rate) due in ``[start_s, end_s)``."""

    def first_at(t_s: float) -> int:
        return max(0, math.ceil((t_s * 1e6 - t0_us) * rate / 1e6))

    return first_at(end_s) - first_at(start_s)


def median_batch_ms(progress: Sequence[Any]) -> float:
    """The median ``triggerExecution`` of the micro-batches in ``progress`` that read rows,
    the first left out when there are more (start-up)."""
    batches = sorted(progress, key=lambda p: p.batchId)
    if len(batches) > 1:
        batches = batches[1:]
    times = [float(p.durationMs.get("triggerExecution", 0)) for p in batches if p.numInputRows > 0]
    return statistics.median(times) if times else 0.0


def wait_first_batch(query: Any, what: str) -> None:
    """Until ``query`` completed a micro-batch (bounded); its failure raised."""
    deadline = time.monotonic() + spark_scenario.FIRST_BATCH_TIMEOUT_S
    while query.lastProgress is None and query.isActive and time.monotonic() < deadline:
        time.sleep(0.05)
    if query.exception() is not None:
        raise RuntimeError(f"the {what} query failed: {query.exception()}")
    if query.lastProgress is None:
        raise TimeoutError(
            f"the {what} query completed no micro-batch in "
            f"{spark_scenario.FIRST_BATCH_TIMEOUT_S:g} s"
        )


def clock_t0(writer: Any) -> int:
    """The ``bench_clock`` start (µs) from the writer's latest progress."""
    offset = writer.lastProgress.sources[0].endOffset
    return int((json.loads(offset) if isinstance(offset, str) else offset)["t0"])


def latency_run(
    ctx: RunContext,
    spark: Any,
    servers: list[str],
    scratch: Path,
    guarantee: str,
    rate: int,
    cluster_dir: Path,
    suffix: str = "",
) -> Row:
    """One writer and one reader query at ``rate`` (topic name ending in ``suffix``);
    the row of figures. The topic is deleted and its data purged afterwards, also when
    a query failed (``cluster_dir``: the local cluster's directory)."""
    seconds = _figure(ctx, "latency_seconds", QUICK_SECONDS, FULL_SECONDS)
    warmup = _figure(ctx, "latency_warmup", QUICK_WARMUP, FULL_WARMUP)
    name = f"{guarantee}-{rate}{suffix}"
    topic = f"{TOPIC}-{name}"
    tallies = scratch / f"tally-{name}"
    tallies.mkdir()
    options = spark_scenario.raftlog_options(servers, topic, guarantee)
    writer = (
        spark.readStream.format(spark_clock_source.NAME)
        .option("rowsPerSecond", str(rate))
        .option("partitions", str(spark_scenario.SPARK_PARTITIONS))
        .option("payloadBytes", str(spark_scenario.PAYLOAD_BYTES))
        .load()
        .writeStream.format("raftlog")
        .options(**options)
        .option("checkpointLocation", str(scratch / f"cp-writer-{name}"))
        .start()
    )
    reader = None
    try:
        wait_first_batch(writer, "writer")
        reader = (
            spark.readStream.format("raftlog")
            .option("topic", topic)
            .option("servers", ",".join(servers))
            .load()
            .writeStream.format(spark_latency_sink.NAME)
            .option("path", str(tallies))
            .option("checkpointLocation", str(scratch / f"cp-reader-{name}"))
            .start()
        )
        wait_first_batch(reader, "reader")
        first_s = math.ceil(time.time() + warmup)
        end_s = first_s + math.ceil(seconds)
        expected = rows_due(clock_t0(writer), rate, first_s, end_s)
        # The sample's rows are due until end_s; then the reader has DRAIN_TIMEOUT_S more.
        deadline = end_s + DRAIN_TIMEOUT_S
        seen = 0
        while time.time() < deadline:
            for query, what in ((writer, "writer"), (reader, "reader")):
                if query.exception() is not None:
                    raise RuntimeError(f"the {what} query failed: {query.exception()}")
            time.sleep(POLL_S)
            if time.time() < end_s + POLL_S:
                continue
            tally = spark_latency_sink.collect(tallies, first_s, end_s)
            seen = int(tally[spark_latency_sink.SEEN][1].sum()) if tally else 0
            if seen >= expected:
                break
    finally:
        for query in (reader, writer):
            if query is not None:
                spark_scenario.quiet_stop(spark, query)
        # At 1,000,000 rows/s a run's topic grew to about 28 GB (3 replicas); the runs'
        # topics left in place filled a disk with 47 GB free (the full run of 2026-12-04
        # 22:38). A failed delete is noted, not raised: it must not hide the query's error.
        try:
            spark_scenario.delete_topic(servers, topic, cluster_dir)
        except Exception as exc:
            ctx.note(f"{guarantee} at {rate:,} rows/s: topic {topic} not deleted: {exc}")
    tally = spark_latency_sink.collect(tallies, first_s, end_s)
    row: Row = {
        "case": f"{guarantee}, {rate:,} rows/s",
        "sink": guarantee,
        "offered rows/s": float(rate),
    }
    seen = 0
    if spark_latency_sink.SEEN in tally:
        values, counts = tally[spark_latency_sink.SEEN]
        seen = int(counts.sum())
        row.update(latency_columns(values, counts=counts))
    else:
        # The machine does not go this far: no row of the sample reached the reader
        # within the drain. The row says so (rows not seen) rather than failing the run.
        ctx.note(
            f"{guarantee} at {rate:,} rows/s: the writer fell behind; no row due in the "
            f"sample reached the reader within {DRAIN_TIMEOUT_S:g} s of the last"
        )
    row["rows seen/s"] = seen / (end_s - first_s)
    if spark_latency_sink.STORED in tally:
        stored_values, stored_counts = tally[spark_latency_sink.STORED]
        stored = latency_columns(stored_values, counts=stored_counts)
        row["stored p50 ms"] = stored["p50 ms"]
        row["stored p99 ms"] = stored["p99 ms"]
    row["writer ms per micro-batch"] = median_batch_ms(writer.recentProgress)
    row["reader ms per micro-batch"] = median_batch_ms(reader.recentProgress)
    row["rows not seen"] = max(0, expected - seen)
    return row


def latency_run_retried(
    ctx: RunContext,
    spark: Any,
    servers: list[str],
    scratch: Path,
    guarantee: str,
    rate: int,
    cluster_dir: Path,
) -> Row:
    """:func:`latency_run`, run again (in a fresh directory and topic) when a query failed
    because a Python worker did not start in time; each retry is noted."""
    attempt = 0

    @tenacity.retry(
        stop=tenacity.stop_after_attempt(RUN_ATTEMPTS),
        wait=tenacity.wait_fixed(5.0),
        retry=tenacity.retry_if_exception(lambda e: WORKER_START_FAILURE in str(e)),
        reraise=True,
    )
    def once() -> Row:
        nonlocal attempt
        attempt += 1
        if attempt > 1:
            ctx.note(f"{guarantee} at {rate:,} rows/s: run again ({WORKER_START_FAILURE})")
        where = scratch / f"try-{attempt}"
        where.mkdir()
        return latency_run(
            ctx, spark, servers, where, guarantee, rate, cluster_dir, suffix=f"-{attempt}"
        )

    return once()


def in_session_writes(spark: Any, servers: list[str], writes: int) -> dict[str, list[float]]:
    """Seconds of ``writes`` small ``df.write``s per sink, interleaved, each into a new topic;
    one untimed write per sink first (the session's first of each is measured apart)."""
    sinks = {EMPTY: "bench_count", **{f"raftlog {g}": g for g in GUARANTEES}}
    frame = spark_first_write.small_frame(spark, SMALL_ROWS)
    seconds: dict[str, list[float]] = {name: [] for name in sinks}
    for i in range(writes + 1):
        for name, kind in sinks.items():
            topic = f"{TOPIC}-write-{kind}-{i}"
            if kind == "bench_count":
                took = spark_first_write.write_once(frame, "bench_count", "", "")
            else:
                took = write_small(frame, servers, topic, kind)
            if i > 0:
                seconds[name].append(took)
    return seconds


def write_small(frame: Any, servers: list[str], topic: str, guarantee: str) -> float:
    """Seconds of one ``df.write`` of ``frame`` into a new raftlog ``topic``."""
    options = spark_scenario.raftlog_options(servers, topic, guarantee)
    started = time.perf_counter()
    frame.write.format("raftlog").mode("append").options(**options).save()
    return time.perf_counter() - started


def first_writes(servers: list[str], times: int) -> dict[str, list[dict[str, float]]]:
    """Per sink, ``times`` fresh processes' figures from :mod:`spark_first_write`, interleaved."""
    out: dict[str, list[dict[str, float]]] = {EMPTY: [], "raftlog exactly-once": []}
    env = dict(os.environ, PYTHONPATH=spark_count_sink.worker_pythonpath())
    for i in range(times):
        for name, sink in ((EMPTY, "bench_count"), ("raftlog exactly-once", "raftlog")):
            argv = [sys.executable, "-m", spark_first_write.__name__, sink, str(SMALL_ROWS)]
            if sink == "raftlog":
                argv += [",".join(servers), f"{TOPIC}-first-{i}"]
            done = subprocess.run(
                argv,
                env=env,
                cwd=spark_count_sink.REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=FIRST_WRITE_TIMEOUT_S,
                check=False,
            )
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            if done.returncode != 0 or not lines:
                raise RuntimeError(
                    f"first df.write into {sink} failed (exit {done.returncode}): "
                    f"{done.stderr[-2000:]}"
                )
            out[name].append(json.loads(lines[-1]))
    return out


def micro_batches(
    ctx: RunContext, spark: Any, servers: list[str], scratch: Path
) -> dict[str, float]:
    """Median ms per micro-batch of ``SMALL_ROWS`` rows into each sink, one after the other."""
    seconds = _figure(ctx, "latency_seconds", QUICK_SECONDS, FULL_SECONDS)
    sinks: dict[str, Callable[[Any], Any]] = {EMPTY: lambda w: w.format(spark_count_sink.NAME)}
    for guarantee in GUARANTEES:
        opts = spark_scenario.raftlog_options(servers, f"{TOPIC}-batches-{guarantee}", guarantee)
        sinks[f"raftlog {guarantee}"] = lambda w, o=opts: w.format("raftlog").options(**o)
    out: dict[str, float] = {}
    for name, configure in sinks.items():
        progress = spark_scenario.timed_write(
            spark,
            configure,
            scratch / f"cp-batches-{spark_scenario.slug(name)}",
            SMALL_ROWS,
            seconds,
        )
        out[name] = median_batch_ms(progress)
    return out


def fixed_cost_rows(
    writes: dict[str, list[float]],
    first: dict[str, list[dict[str, float]]],
    batches: dict[str, float],
) -> list[Row]:
    """The fixed-cost rows: per sink and kind of write, the median and the ratio to empty."""
    rows: list[Row] = []

    def add(kind: str, per_sink: dict[str, float], unit: str) -> None:
        empty = per_sink[EMPTY]
        for name, value in per_sink.items():
            row: Row = {"case": f"{kind}: {name}", "sink": name, unit: value}
            if name != EMPTY:
                row["/ empty writer"] = value / empty if empty > 0 else 0.0
                row["goal ratio"] = GOAL_RATIO
            rows.append(row)

    add(
        f"df.write {SMALL_ROWS:,} rows",
        {name: statistics.median(s) for name, s in writes.items()},
        "median s",
    )
    if all(first.values()):
        add(
            f"first df.write {SMALL_ROWS:,} rows in a session",
            {
                name: statistics.median(f["first write s"] for f in runs)
                for name, runs in first.items()
            },
            "median s",
        )
    if batches:
        add(f"micro-batch of {SMALL_ROWS:,} rows", batches, "median ms")
    return rows


def measure(ctx: RunContext, spark: Any, servers: list[str], scratch: Path) -> list[Row]:
    rates = getattr(ctx.args, "latency_rates", None) or (QUICK_RATES if ctx.quick else FULL_RATES)
    writes = ctx.option("latency_writes", QUICK_WRITES, FULL_WRITES)
    first_times = ctx.option("latency_first_writes", QUICK_FIRST_WRITES, FULL_FIRST_WRITES)
    ctx.set_total(len(rates) * len(GUARANTEES) + 3)
    rows: list[Row] = []
    for rate in rates:
        for guarantee in GUARANTEES:
            where = scratch / f"run-{guarantee}-{rate}"
            where.mkdir()
            rows.append(
                latency_run_retried(
                    ctx, spark, servers, where, guarantee, rate, scratch / CLUSTER_DIR
                )
            )
            ctx.advance(1)
    # Three more queries' start-up: too long for the quick run (its whole run stays
    # under 4 minutes on 2 cores).
    batches = {} if ctx.quick else micro_batches(ctx, spark, servers, scratch)
    ctx.advance(1)
    writes_s = in_session_writes(spark, servers, writes)
    ctx.advance(1)
    first = first_writes(servers, first_times)
    ctx.advance(1)
    rows += fixed_cost_rows(writes_s, first, batches)
    for name, runs in first.items():
        if runs:
            ctx.note(
                f"first df.write, {name}: "
                + "; ".join(
                    f"session {r['session s']:.1f} s, first {r['first write s']:.2f} s, "
                    f"second {r['second write s']:.2f} s"
                    for r in runs
                )
            )
    if not first_times:
        ctx.note("the first df.write of a session is not measured in this mode")
    if not batches:
        ctx.note("the micro-batch of 1,000 rows is not measured in this mode")
    ctx.note(
        f"local[{spark_scenario.SPARK_PARTITIONS}]; writer: bench_clock (rows due at the "
        "offered rate, stamped with when they were due) -> raftlog (acks=all, 3 replicas, "
        f"{spark_scenario.SPARK_PARTITIONS} partitions, default trigger); reader: raftlog "
        "source (read_committed) -> bench_latency (latency = when its Python worker got the "
        "row - when the row was due); stored = the leader's append time - when due; "
        f"sample: the rows due in {_figure(ctx, 'latency_seconds', QUICK_SECONDS, FULL_SECONDS):g}"
        " s after a warm-up, each seen once; rows not seen: still unseen "
        f"{DRAIN_TIMEOUT_S:g} s after the last was due (the writer fell behind: the latency is "
        "then a floor)"
    )
    ctx.note(
        f"fixed cost: df.write of {SMALL_ROWS:,} rows into a new topic on the running cluster "
        f"(median of {writes}, interleaved with the empty writer, after one untimed each); "
        "first df.write: each in a fresh process and JVM; micro-batch: rate-micro-batch of "
        f"{SMALL_ROWS:,} rows per batch, median triggerExecution (first batch left out). "
        f"Goal: <= {GOAL_RATIO}x the empty Python writer (bench_count)"
    )
    return rows


def plot(result: ScenarioResult, fig: Any) -> None:
    """Left: latency (p50, p99) against the offered rate per guarantee, log-log. Right:
    the fixed costs as ratios to the empty Python writer, the goal as a line."""
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 2]})
    runs = [r for r in result.rows if "offered rows/s" in r]
    for guarantee, color in zip(GUARANTEES, ("tab:blue", "tab:orange"), strict=True):
        mine = sorted(
            (r for r in runs if r["sink"] == guarantee and "p50 ms" in r),
            key=lambda r: r["offered rows/s"],
        )
        if not mine:
            continue
        rates = [float(r["offered rows/s"]) for r in mine]
        for q, style in (("p50", "-"), ("p99", "--")):
            left.plot(
                rates,
                [float(r[f"{q} ms"]) for r in mine],
                style,
                marker="o",
                color=color,
                label=f"{guarantee} {q}",
            )
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("offered rows/s")
    left.set_ylabel("due -> seen by the reader, ms")
    left.set_title("end-to-end latency by rate", fontsize=9)
    left.grid(alpha=0.3, which="both")
    left.legend(fontsize=8)
    ratios = [r for r in result.rows if "/ empty writer" in r]
    labels = [str(r["case"]).replace(": raftlog ", "\n") for r in ratios]
    right.barh(labels, [float(r["/ empty writer"]) for r in ratios], color="tab:blue")
    right.axvline(GOAL_RATIO, color="tab:green", linestyle="--", label=f"goal {GOAL_RATIO}x")
    right.axvline(1.0, color="gray", linewidth=0.8)
    right.invert_yaxis()
    right.tick_params(axis="y", labelsize=7)
    right.set_xlabel("times the empty Python writer")
    right.set_title("fixed cost of a small write", fontsize=9)
    right.legend(fontsize=8)
    fig.set_size_inches(11, 4.5)


@scenario(
    "latency",
    "streaming write -> read latency by rate; a small write's fixed cost",
    add_arguments=add_arguments,
    plot=plot,
    goals=GOALS,
)
def run(ctx: RunContext) -> list[Row]:
    require("pyspark.sql.datasource", "DataSourceStreamArrowWriter")
    require("pyspark_raftlog.datasource", "DefaultSource")
    spark_scenario.check_java()
    with (
        ctx.scratch_dir("latency") as scratch,
        raftlog_local.local_cluster(scratch / CLUSTER_DIR, ctx=ctx) as cluster,
        spark_scenario.spark_session() as spark,
    ):
        spark.dataSource.register(spark_clock_source.ClockDataSource)
        spark.dataSource.register(spark_latency_sink.LatencyDataSource)
        try:
            return measure(ctx, spark, cluster.servers, scratch)
        except Exception as exc:
            # A pyspark exception turns into text through the JVM: do it while it is up.
            raise RuntimeError(f"{type(exc).__name__}: {exc}") from None
