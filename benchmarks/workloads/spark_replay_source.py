"""``bench_replay``: a streaming Python data source that replays one Arrow batch from memory.

The ceiling of any Python source, as ``bench_count`` is of any Python sink: Spark
still plans each micro-batch through a Python worker, reads every Arrow batch from
the worker's socket and turns it into rows, but ``read()`` only slices a batch it
built once per task. Nothing is fetched, decoded or assembled per batch.

The ``spark`` scenario reads it with the raftlog read's own schema (given with
``.schema(...)``) and the raftlog topic's rows and stored batch size, so the two
reads move the same columns, rows and Arrow batches into Spark. Columns are
filled by type: ``string`` columns whose name starts with ``__raftlog_`` hold
``option("topic")``, the other strings ``payloadBytes`` distinct bytes (the
scenario's payload); integers count up; timestamps are microseconds.

Options (strings, as Spark passes them): ``rows`` (total rows of the one
micro-batch that AvailableNow reads), ``batchRows`` (rows per Arrow batch),
``partitions`` (tasks; default 2), ``payloadBytes`` (default 100), ``topic``.
Like ``bench_count`` this module must be importable in Spark's Python workers
(see :func:`benchmarks.workloads.spark_count_sink.worker_pythonpath`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType
from pyspark_raftlog.spark_schema import arrow_schema_of
from pyspark_raftlog.splits import split_ranges

NAME = "bench_replay"
METADATA_PREFIX = "__raftlog_"


class ReplayPartition(InputPartition):
    """Rows ``[start, end)`` of the replayed stream."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


def replay_batch(schema: pa.Schema, rows: int, payload_bytes: int, topic: str) -> pa.RecordBatch:
    """One batch of ``rows`` rows of ``schema``, filled by type (see the module docstring)."""
    counting = np.arange(rows, dtype=np.int64)
    columns = []
    for field in schema:
        t = field.type
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            if field.name.startswith(METADATA_PREFIX):
                values = [topic] * rows
            else:
                values = [f"{i}:{'x' * payload_bytes}"[:payload_bytes] for i in range(rows)]
            columns.append(pa.array(values, t))
        elif pa.types.is_integer(t):
            columns.append(pa.array(counting, pa.int64()).cast(t))
        elif pa.types.is_timestamp(t):
            columns.append(pa.array(counting + 1_700_000_000_000_000, pa.int64()).cast(t))
        else:
            raise ValueError(f"bench_replay: column {field.name!r} of type {t} is not supported")
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class ReplayStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """One micro-batch of ``rows`` rows in ``partitions`` tasks; then nothing new."""

    def __init__(self, schema: StructType, options: dict[str, str]) -> None:
        self.schema = schema
        self.rows = int(options["rows"])
        self.batch_rows = int(options["batchrows"])
        self.parts = int(options.get("partitions", "2"))
        self.payload_bytes = int(options.get("payloadbytes", "100"))
        self.topic = options.get("topic", "bench")
        if self.rows < 0 or self.batch_rows < 1 or self.parts < 1:
            raise ValueError(
                "bench_replay: options rows >= 0, batchRows >= 1 and partitions >= 1 expected"
            )

    def initialOffset(self) -> dict:
        return {"row": 0}

    def prepareForTriggerAvailableNow(self) -> None:
        return None

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        return {"row": self.rows}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        # The stream is one range cut the way the raftlog source cuts a partition.
        ranges = {0: (start["row"], end["row"])}
        return [ReplayPartition(lo, hi) for _, lo, hi in split_ranges(ranges, self.parts)]

    def read(self, partition: ReplayPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        batch = replay_batch(
            arrow_schema_of(self.schema),
            min(self.batch_rows, partition.end - partition.start),
            self.payload_bytes,
            self.topic,
        )
        for at in range(partition.start, partition.end, self.batch_rows):
            yield batch.slice(0, min(self.batch_rows, partition.end - at))

    def commit(self, end: dict) -> None:
        return None


class ReplayDataSource(DataSource):
    """``format("bench_replay")``: a read-only streaming source; its schema is given."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        raise ValueError("bench_replay: give the schema with .schema(...)")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ReplayStreamReader(schema, dict(self.options))
