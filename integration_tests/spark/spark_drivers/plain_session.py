"""Run by test_spark_registration.py in its own interpreter: a plain SparkSession (no
build_session, no spark_conf/, no PYTHONPATH), then raftlog options that are bad.

Prints one line per check, ``<check>: <first line of the error>``, so the test can see
that the error came from pyspark_raftlog's DefaultSource (found by Spark on its own).
"""

from __future__ import annotations

from pyspark.sql import SparkSession


def first_error_line(action) -> str:
    try:
        action()
    except Exception as exc:  # the connector's error, wrapped by Spark
        ours = "pyspark_raftlog.errors."
        lines = [line for line in str(exc).splitlines() if line.startswith(ours)]
        return lines[0].strip() if lines else str(exc).splitlines()[0]
    return "no error"


def main() -> None:
    spark = SparkSession.builder.master("local[1]").appName("plain-session").getOrCreate()
    try:
        df = spark.range(3)
        write = first_error_line(
            lambda: (
                df.write.format("raftlog")
                .option("topic", "t")
                .option("acks", "two")
                .mode("append")
                .save()
            )
        )
        read = first_error_line(
            lambda: (
                spark.read.format("raftlog")
                .option("topic", "t")
                .option("acks", "two")
                .load()
                .collect()
            )
        )
        print(f"write: {write}", flush=True)
        print(f"read: {read}", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
