"""``bench_latency``: a streaming Python sink that records, per row, how long ago it was due.

The ``latency`` scenario's reader writes into it. When an Arrow batch reaches
``write()`` in Spark's Python worker (the moment a reader's own code would get
the rows), each row's latency is now minus its ``generated`` timestamp (set by
:mod:`benchmarks.workloads.spark_clock_source` in the writer), and, when the
batch carries ``__raftlog_timestamp`` (the raftlog source's append time of the
row's record batch), also the append time minus ``generated``: how much of the
latency was spent before the row was stored.

Rows are not kept: each ``write()`` leaves one ``.npy`` file in option ``path``
holding ``(generated second, kind, latency in 100 µs units, rows)`` per distinct
value (kind 0: seen by the reader, kind 1: appended), so a million rows a second
cost a few kilobytes. :func:`collect` sums the files of a window of generation
times for the scenario. The files are the channel because a Python sink's
``commit`` runs in a separate worker, not in the driver's process.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

NAME = "bench_latency"
GENERATED = "generated"
APPENDED = "__raftlog_timestamp"
SEEN, STORED = 0, 1
"""Kinds of latency: until the reader's sink got the row; until it was appended."""
UNIT_US = 100
"""Latencies are kept in 100 µs units: finer than any micro-batch's timing."""


@dataclasses.dataclass
class LatencyMessage(WriterCommitMessage):
    """Rows one task saw."""

    rows: int


def _micros(column: pa.Array) -> np.ndarray:
    """A timestamp column as int64 microseconds since the epoch."""
    as_us = column.cast(pa.timestamp("us", tz=column.type.tz))
    return as_us.cast(pa.int64()).to_numpy(zero_copy_only=False)


def tally(generated_us: np.ndarray, then_us: np.ndarray | int, kind: int) -> np.ndarray:
    """``(generated second, kind, latency units, rows)`` rows for the given stamps."""
    seconds = generated_us // 1_000_000
    units = np.maximum(np.asarray(then_us - generated_us) // UNIT_US, 0)
    keys, counts = np.unique(seconds * (1 << 32) + units, return_counts=True)
    return np.stack(
        [keys >> 32, np.full(len(keys), kind), keys & ((1 << 32) - 1), counts], axis=1
    ).astype(np.int64)


class LatencyStreamWriter(DataSourceStreamArrowWriter):
    """Tallies every batch's latencies into a file in ``path``; commit and abort do nothing."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> LatencyMessage:  # type: ignore[override]
        parts: list[np.ndarray] = []
        rows = 0
        for batch in iterator:
            now_us = time.time_ns() // 1000
            if batch.num_rows == 0:
                continue
            generated = _micros(batch.column(GENERATED))
            parts.append(tally(generated, now_us, SEEN))
            if APPENDED in batch.schema.names:
                parts.append(tally(generated, _micros(batch.column(APPENDED)), STORED))
            rows += batch.num_rows
        if parts:
            # Written aside then renamed: the driver reads the directory while tasks write.
            final = self.path / f"{uuid.uuid4().hex}.npy"
            partial = final.with_suffix(".partial")
            with partial.open("wb") as f:
                np.save(f, np.concatenate(parts))
            partial.rename(final)
        return LatencyMessage(rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        return None

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        return None


class LatencyDataSource(DataSource):
    """``format("bench_latency")``: a write-only streaming sink; option ``path`` (a directory)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        path = self.options.get("path")
        if not path:
            raise ValueError("bench_latency: option path (an existing directory) is required")
        return LatencyStreamWriter(path)


def collect(path: Path, first_s: int, end_s: int) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per kind, (latencies in seconds, rows at each) of the rows generated in seconds
    ``[first_s, end_s)`` (since the epoch), summed over every file in ``path``."""
    files = [np.load(f) for f in sorted(path.glob("*.npy"))]
    if not files:
        return {}
    table = np.concatenate(files)
    table = table[(table[:, 0] >= first_s) & (table[:, 0] < end_s)]
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for kind in (SEEN, STORED):
        mine = table[table[:, 1] == kind]
        if len(mine):
            units, where = np.unique(mine[:, 2], return_inverse=True)
            counts = np.bincount(where, weights=mine[:, 3]).astype(np.int64)
            out[kind] = (units * (UNIT_US / 1e6), counts)
    return out
