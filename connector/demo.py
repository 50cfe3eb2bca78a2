"""The main job: a demo pipeline on the embedded local cluster.

``python -m pyspark_raftlog.demo`` streams Spark's ``rate`` source into a raftlog
topic for a bounded time, with no ``servers`` option (so the connector starts
the embedded local cluster when it is not running), stops the query, then
reads the topic back with a batch read and checks exactly-once: every value
the stream produced is there once, with none missing in between.

The local cluster is stopped afterwards when the demo started it
(``--keep-cluster`` leaves it running for ``raftlog consume`` and friends).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from pyspark_raftlog.session import build_session

from raftlog.cluster import load_cluster, running, stop_cluster


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m pyspark_raftlog.demo",
        description="Stream Spark's rate source into raftlog exactly once, then read it back.",
    )
    parser.add_argument("--seconds", type=float, default=20.0, help="how long to stream")
    parser.add_argument("--rows-per-second", type=int, default=2000)
    parser.add_argument("--topic", default=None, help="default: demo-<unix time>")
    parser.add_argument("--keep-cluster", action="store_true", help="leave the cluster running")
    args = parser.parse_args(argv)
    if args.seconds <= 0 or args.rows_per_second <= 0:
        parser.error("--seconds and --rows-per-second must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    topic = args.topic or f"demo-{int(time.time())}"
    existing = load_cluster()
    started_here = existing is None or not running(existing)

    spark = build_session("raftlog-demo")
    try:
        with tempfile.TemporaryDirectory(prefix="raftlog-demo-") as checkpoint:
            stream = (
                spark.readStream.format("rate")
                .option("rowsPerSecond", args.rows_per_second)
                .load()
                .selectExpr("value", "timestamp", "concat('event-', value) AS payload")
            )
            query = (
                stream.writeStream.format("raftlog")
                .option("topic", topic)
                .option("checkpointLocation", checkpoint)
                .trigger(processingTime="2 seconds")
                .start()
            )
            print(f"streaming rate -> raftlog topic {topic!r} for {args.seconds:g} s ...")
            query.awaitTermination(args.seconds)
            query.stop()
            if query.exception() is not None:
                print(f"the query failed: {query.exception()}", file=sys.stderr)
                return 1
            progress = query.recentProgress
            rows_in = sum(p["numInputRows"] for p in progress)
            print(f"query stopped after {len(progress)} micro-batches, {rows_in} rows written")

        back = spark.read.format("raftlog").option("topic", topic).load()
        stats = back.selectExpr(
            "count(*) AS n",
            "count(DISTINCT value) AS distinct_values",
            "min(value) AS lo",
            "max(value) AS hi",
        ).first()
        n, distinct, lo, hi = stats["n"], stats["distinct_values"], stats["lo"], stats["hi"]
        print(f"read back {n} rows from {topic!r}: values {lo}..{hi}, {distinct} distinct")
        exactly_once = n > 0 and n == distinct and lo == 0 and hi - lo + 1 == n
        duplicates, missing = n - distinct, (0 if n == 0 else (hi - lo + 1) - distinct)
        print(
            f"check: {'OK' if exactly_once else 'FAILED'} "
            f"(duplicates {duplicates}, missing {missing})"
        )
        return 0 if exactly_once else 1
    finally:
        spark.stop()
        if started_here and not args.keep_cluster:
            if stop_cluster() is not None:
                print("stopped the local cluster the demo started")
        elif load_cluster() is not None:
            print("the local cluster is still running; stop it with `raftlog local stop`")


if __name__ == "__main__":
    sys.exit(main())
