"""Run by test_spark_exactly_once.py in a session of its own: a streaming query into
raftlog whose driver dies (kill -9 of its whole process group, JVM and Python workers
included) right after the coordinator answered the first micro-batch's EndTxn (the
decision and its markers durable), before Spark records the batch in its commit log.

Usage: killed_driver.py SERVERS TOPIC CHECKPOINT

The test sets RAFTLOG_FAILPOINTS=txn.after_end_txn=killsession in this process's
environment; Spark's Python workers inherit it, and the driver's commit() runs in one.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pyspark_raftlog.session import build_session
from stream_checks import rate_stream, run_until, start_sink


def main(servers: str, topic: str, checkpoint: str) -> None:
    spark = build_session("raftlog-killed-driver", master="local[2]")
    query = start_sink(rate_stream(spark), topic, servers, Path(checkpoint), partitions="2")
    run_until(query, Path(checkpoint), batches=3, timeout_s=120.0)  # killed before this ends
    print("the driver was not killed", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
