"""Run by test_spark_standalone.py: the raftlog sink driven from a Spark standalone
cluster, so that the tasks run in executor JVMs (and their Python workers) apart from
the driver, and reach the raftlog cluster through the ``servers`` option.

Usage: standalone_sink.py MASTER_URL SERVERS TOPIC CHECKPOINT OUT_JSON

A ``rate-micro-batch`` stream (batch b holds values [b * 200, (b + 1) * 200)) is written
in two runs: stopped after 2 committed micro-batches, then restarted from the checkpoint
until 4. The topic is then read back with ``spark.read.format("raftlog")`` (again on the
executors); OUT_JSON gets the values, the committed batch count and the executors seen.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from pyspark.sql import SparkSession

# the sink tests' helpers (one copy): spark_drivers/ is run as a script, not a package
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from stream_checks import (
    committed_batches,
    rate_stream,
    read_values,
    run_until,
    start_sink,
)

TIMEOUT_S = 120.0


def executors(spark: SparkSession) -> list[str]:
    """The ids of the registered executors (the driver is not one)."""
    ids = spark.sparkContext._jsc.sc().getExecutorIds()
    return sorted(str(ids.apply(i)) for i in range(ids.size()))


def wait_for_executors(spark: SparkSession, count: int) -> list[str]:
    deadline = time.monotonic() + TIMEOUT_S
    while len(found := executors(spark)) < count:  # bounded by the deadline
        if time.monotonic() > deadline:
            raise TimeoutError(f"only executors {found} registered in {TIMEOUT_S}s")
        time.sleep(0.5)
    return found


def stream_until(spark, servers: str, topic: str, checkpoint: Path, batches: int) -> None:
    query = start_sink(rate_stream(spark), topic, servers, checkpoint, partitions="2")
    run_until(query, checkpoint, batches, timeout_s=TIMEOUT_S)


def main(master: str, servers: str, topic: str, checkpoint: str, out: str) -> None:
    spark = (
        SparkSession.builder.master(master)
        .appName("raftlog-standalone-sink")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.cores.max", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    try:
        seen = wait_for_executors(spark, 2)
        ck = Path(checkpoint)
        stream_until(spark, servers, topic, ck, batches=2)
        stream_until(spark, servers, topic, ck, batches=4)  # restarted from the checkpoint
        values = read_values(spark, servers, topic)
        Path(out).write_text(
            json.dumps({"executors": seen, "committed": committed_batches(ck), "values": values})
        )
    finally:
        spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:])
