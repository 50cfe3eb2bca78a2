"""``bench_count``: a streaming Python data source whose Arrow writer only counts rows.

The ceiling of any Python sink: Spark still converts each micro-batch to Arrow
and ships it to a Python worker, but ``write()`` does nothing with it beyond
``num_rows``. ``df.write.format("bench_count")`` works too (a batch Arrow writer
that counts): Spark's empty Python writer, the fixed cost of a small ``df.write``
that any Python sink pays. Python data sources are pickled by reference and run in Spark's
Python workers, so this module must be importable there: the ``spark``
scenario puts the repository root on ``PYTHONPATH`` before the JVM starts
(see :func:`worker_pythonpath`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

NAME = "bench_count"
REPO_ROOT = Path(__file__).resolve().parents[2]


def worker_pythonpath(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """``PYTHONPATH`` with the repository root first (unchanged when already there)."""
    paths = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if str(REPO_ROOT) in paths:
        return os.pathsep.join(paths)
    return os.pathsep.join([str(REPO_ROOT), *paths])


@dataclasses.dataclass
class CountMessage(WriterCommitMessage):
    """Rows and Arrow batches one task received."""

    rows: int
    batches: int


class CountingStreamWriter(DataSourceStreamArrowWriter):
    """Counts the rows of every Arrow batch; commit and abort do nothing."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CountMessage:  # type: ignore[override]
        rows = batches = 0
        for batch in iterator:
            rows += batch.num_rows
            batches += 1
        return CountMessage(rows, batches)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        return None

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        return None


class CountingBatchWriter(DataSourceArrowWriter):
    """``df.write``: counts the rows of every Arrow batch; commit and abort do nothing."""

    def write(self, iterator: Iterator[pa.RecordBatch]) -> CountMessage:  # type: ignore[override]
        return CountingStreamWriter().write(iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        return None

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        return None


class CountingDataSource(DataSource):
    """``format("bench_count")``: a write-only sink (streaming and batch) that counts."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return CountingStreamWriter()

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return CountingBatchWriter()
