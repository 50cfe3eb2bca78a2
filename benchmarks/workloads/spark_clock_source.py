"""``bench_clock``: a streaming Python source that emits rows at a fixed rate, each
stamped with the time it was due.

The ``latency`` scenario's writer reads it. Row ``i`` is due at ``t0 + i / rate``
(``t0``: when the query asked for its first offset), and that time is its
``generated`` column (microseconds, as Spark's timestamps are). Each trigger takes
every row due by then, so a writer that falls behind gets larger micro-batches
whose rows carry the times they were due, not the time the writer got to them: a
latency measured from ``generated`` includes the wait (no coordinated omission).
Spark's own ``rate`` source could not serve: it offers rows in whole seconds (a row
is readable up to a second after its timestamp), and ``rate-micro-batch`` stamps
rows with a synthetic clock.

Columns: ``value`` (the row number, 0, 1, 2, ...), ``generated`` (timestamp) and
``payload`` (``payloadBytes`` bytes; the same for every row: the latency of a
100-byte row does not depend on its bytes, and building distinct strings in Python
would cost more CPU than the rows' transport). Options (strings, as Spark passes
them): ``rowsPerSecond`` (required), ``partitions`` (tasks per micro-batch; default
2), ``payloadBytes`` (default 100). Like ``bench_count`` this module must be
importable in Spark's Python workers (see
:func:`benchmarks.workloads.spark_count_sink.worker_pythonpath`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark_raftlog.splits import split_ranges

NAME = "bench_clock"
SCHEMA = "value long, generated timestamp, payload string"
ARROW_BATCH_ROWS = 65_536
"""Rows per Arrow batch a task yields (a micro-batch's task yields several)."""


class ClockPartition(InputPartition):
    """Rows ``[start, end)``; row ``i`` is due at ``t0_us + i * 1e6 / rate`` µs."""

    def __init__(self, start: int, end: int, t0_us: int, rate: float) -> None:
        self.start, self.end, self.t0_us, self.rate = start, end, t0_us, rate


def clock_batch(start: int, end: int, t0_us: int, rate: float, payload: bytes) -> pa.RecordBatch:
    """Rows ``[start, end)`` as one Arrow batch of :data:`SCHEMA`'s columns."""
    rows = end - start
    numbers = np.arange(start, end, dtype=np.int64)
    due = t0_us + (numbers * (1e6 / rate)).astype(np.int64)
    width = len(payload)
    offsets = pa.py_buffer((np.arange(rows + 1, dtype=np.int32) * width).tobytes())
    data = pa.py_buffer(payload * rows)
    return pa.RecordBatch.from_arrays(
        [
            pa.array(numbers),
            pa.array(due, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
            pa.StringArray.from_buffers(rows, offsets, data),
        ],
        names=["value", "generated", "payload"],
    )


class ClockStreamReader(DataSourceStreamReader):
    """Offsets ``{"row": n, "t0": µs}``: ``n`` rows are due ``n / rate`` s after ``t0``."""

    def __init__(self, options: dict[str, str]) -> None:
        try:
            self.rate = float(options["rowspersecond"])
            self.parts = int(options.get("partitions", "2"))
            payload_bytes = int(options.get("payloadbytes", "100"))
        except (KeyError, ValueError) as exc:
            raise ValueError(
                "bench_clock: options rowsPerSecond (a number > 0), partitions and "
                f"payloadBytes (integers >= 1) expected: {exc}"
            ) from None
        if not self.rate > 0 or self.parts < 1 or payload_bytes < 1:
            raise ValueError("bench_clock: rowsPerSecond > 0, partitions >= 1, payloadBytes >= 1")
        self.payload = (b"0123456789abcdef" * (payload_bytes // 16 + 1))[:payload_bytes]

    def initialOffset(self) -> dict:
        # The clock starts when the query asks for its first offset: rows are due from then.
        return {"row": 0, "t0": time.time_ns() // 1000}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # Every row due by now (no read limit: the clock does not wait for the writer).
        due = int((time.time_ns() // 1000 - start["t0"]) * self.rate / 1e6)
        return {"row": max(start["row"], due), "t0": start["t0"]}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = {0: (start["row"], end["row"])}
        return [
            ClockPartition(lo, hi, start["t0"], self.rate)
            for _, lo, hi in split_ranges(ranges, self.parts)
        ]

    def read(self, partition: ClockPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        for at in range(partition.start, partition.end, ARROW_BATCH_ROWS):
            yield clock_batch(
                at,
                min(at + ARROW_BATCH_ROWS, partition.end),
                partition.t0_us,
                partition.rate,
                self.payload,
            )

    def commit(self, end: dict) -> None:
        return None


class ClockDataSource(DataSource):
    """``format("bench_clock")``: a read-only streaming source of rows due at a fixed rate."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: object) -> DataSourceStreamReader:
        return ClockStreamReader(dict(self.options))
