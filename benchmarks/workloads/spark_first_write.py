"""The first ``df.write`` of a Spark session, timed in a process of its own.

``python -m benchmarks.workloads.spark_first_write SINK ROWS [SERVERS TOPIC]``
builds a session (``build_session``, ``local[2]``), then times one ``df.write`` of
``ROWS`` rows (``value``: the row number, ``payload``: 100 bytes) into ``SINK``:
``bench_count`` (Spark's empty Python writer) or ``raftlog`` (exactly-once, a new
``TOPIC`` on the cluster at ``SERVERS``, 2 partitions, 3 replicas). It prints one
JSON line, ``{"session s": .., "first write s": .., "second write s": ..}``: the
first write pays what a session does once (the Python workers' start and
imports, the data source's lookup, the client's first connections); the second,
into another new topic, is the same write warm. The ``latency`` scenario runs it
as a child so that every measurement starts from a fresh JVM; the JVM ends with
this process (py4j's gateway exits on EOF of its stdin).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from pyspark_raftlog.session import build_session

from benchmarks.workloads import spark_count_sink

PAYLOAD_SQL = "repeat('x', 100) AS payload"


def small_frame(spark: Any, rows: int) -> Any:
    """``rows`` rows: ``value`` (0..rows-1) and a 100-byte ``payload``."""
    return spark.range(rows).selectExpr("id AS value", PAYLOAD_SQL)


def write_once(frame: Any, sink: str, servers: str, topic: str) -> float:
    """Seconds one ``frame.write`` into ``sink`` takes (a new ``topic`` for raftlog)."""
    writer = frame.write.format(sink).mode("append")
    if sink == "raftlog":
        writer = writer.options(topic=topic, servers=servers, partitions="2", replicationFactor="3")
    started = time.perf_counter()
    writer.save()
    return time.perf_counter() - started


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 4) or argv[0] not in ("bench_count", "raftlog"):
        print(__doc__, file=sys.stderr)
        return 2
    sink, rows = argv[0], int(argv[1])
    servers, topic = (argv[2], argv[3]) if len(argv) == 4 else ("", "")
    started = time.perf_counter()
    spark = build_session("raftlog-bench-first-write", master="local[2]")
    spark.dataSource.register(spark_count_sink.CountingDataSource)
    session_s = time.perf_counter() - started
    try:
        frame = small_frame(spark, rows)
        first = write_once(frame, sink, servers, topic)
        second = write_once(frame, sink, servers, topic + "-again")
    finally:
        spark.stop()
    print(json.dumps({"session s": session_s, "first write s": first, "second write s": second}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
