"""Needs no raftlog cluster: proves Spark finds pyspark_raftlog's DefaultSource by itself
(no spark.dataSource.register) in its Python worker, and that bad options fail there with
the connector's own error text before anything is written or read."""

from __future__ import annotations

from pathlib import Path

import pytest
from spark_drivers import run_driver


def test_auto_registered_source_rejects_bad_options(spark, tmp_path: Path) -> None:
    df = spark.range(3)
    with pytest.raises(Exception, match=r"option 'acks' must be one of all, 1, 0; got 'two'"):
        df.write.format("raftlog").option("topic", "t").option("acks", "two").mode("append").save()
    with pytest.raises(Exception, match=r"unknown option 'maxrecordspertriger'; did you mean"):
        spark.readStream.format("raftlog").option("topic", "t").option(
            "maxRecordsPerTriger", "5"
        ).load()
    # A streaming writer is built when the query starts; its error ends the query.
    with pytest.raises(Exception, match=r"option 'chunkBytes' must be a size in bytes"):
        query = (
            spark.readStream.format("rate-micro-batch")
            .option("rowsPerBatch", "1")
            .load()
            .writeStream.format("raftlog")
            .option("topic", "t")
            .option("chunkBytes", "huge")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .start()
        )
        try:
            query.awaitTermination(120)  # bounded: the failure comes within seconds
        finally:
            query.stop()


def test_plain_session_finds_default_source_on_its_own(tmp_path: Path) -> None:
    """A plain ``SparkSession.builder.master("local[1]").getOrCreate()`` in its own
    interpreter (no build_session, no PYTHONPATH): the option errors are the connector's,
    so Spark listed pyspark_raftlog and registered its DefaultSource by itself."""
    done = run_driver("plain_session.py", cwd=tmp_path, timeout_s=240)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    assert lines.get("write") == (
        "pyspark_raftlog.errors.OptionError: option 'acks' must be one of all, 1, 0; got 'two'"
    ), done.stdout
    assert lines.get("read", "").startswith(
        "pyspark_raftlog.errors.OptionError: option 'acks' applies to writes, not reads"
    ), done.stdout
