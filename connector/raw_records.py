"""Raw records: Kafka's columns <-> the CLI's payload framing, with array operations.

A DataFrame whose columns are ``value`` and nothing but Kafka's others
(``key``, ``headers``, ``topic``, ``partition``, ``timestamp``) is written as
raw records, value and key bytes as they are, in the *keyed* layout of
:mod:`raftlog.records.framing` (the one ``raftlog produce`` writes with keys or
headers). A topic of raw records reads back with Kafka's schema
(:data:`KAFKA_READ_FIELDS`); plain CLI payloads (values only) and, failing
both, opaque payloads (one value each) read the same way, so anything a
non-Spark producer wrote is readable.

Both directions work on whole Arrow buffers (numpy views of offsets and
lengths), never row by row. Writing copies each byte once, into its payload
(:class:`RecordChunker`; joining Spark's batches first, then framing from
per-section copies, cost 0.12 CPU-s per million 100-byte rows against 0.037 now,
outside Spark); reading builds the columns over the payload's own memory.
"""

from __future__ import annotations

import struct
import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark_raftlog.arrow_payload import Chunk
from pyspark_raftlog.options import MAX_CHUNK_BYTES
from pyspark_raftlog.routing import to_large_binary

from raftlog.records.framing import (
    FLAG_HEADERS,
    FLAG_KEYS,
    FLAG_TIMESTAMPS,
    KEYED_MAGIC,
    unframe_records,
)
from raftlog.records.payload_check import KeyedLayout, check_payload, keyed_layout
from raftlog.records.topic_schema import RECORDS_FORMAT_KEY, is_records_schema

__all__ = [
    "HEADERS_TYPE",
    "RECORDS_FORMAT_KEY",
    "Decoded",
    "RecordChunker",
    "decode_records",
    "is_records_schema",
    "records_marker_schema",
]

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
_HEAD = struct.Struct("<4sII")


def records_marker_schema() -> pa.Schema:
    """The schema stored as a raw-records topic's metadata: no fields, a format mark."""
    return pa.schema([], metadata={RECORDS_FORMAT_KEY: b"records"})


class _Binary:
    """A string or binary column of any width as numpy views, for whole-buffer framing.

    ``lengths``: int32 per row, -1 for null; ``offsets``: int64, ``n + 1``, into
    ``data`` (uint8, Arrow's buffer, not copied). A null row's segment is empty, so
    ``data[offsets[a]:offsets[b]]`` is exactly the bytes of rows ``a..b-1``.
    """

    def __init__(self, arr: pa.Array | pa.ChunkedArray) -> None:
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        t = arr.type
        if not (pa.types.is_string(t) or pa.types.is_binary(t) or _is_large(t)):
            arr = to_large_binary(arr)  # string or binary views, fixed-size binary
        offsets, self.data = _offsets_data(arr)
        self.lengths = np.diff(offsets).astype(np.int32)
        if arr.null_count:
            nulls = np.asarray(arr.is_null())
            if self.lengths[nulls].any():  # Arrow lets a null slot hold bytes: drop them
                arr = to_large_binary(arr).fill_null(b"")
                offsets, self.data = _offsets_data(arr)
                self.lengths = np.diff(offsets).astype(np.int32)
            self.lengths[nulls] = -1
        self.offsets = offsets

    def bytes_of(self, start: int, stop: int) -> np.ndarray:
        """The bytes of rows ``start..stop-1``, back to back (a view)."""
        return self.data[self.offsets[start] : self.offsets[stop]]


def _is_large(t: pa.DataType) -> bool:
    return pa.types.is_large_string(t) or pa.types.is_large_binary(t)


def _offsets_data(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets[n+1], uint8 data) of a string/binary array of 32- or 64-bit offsets,
    honouring its slice offset; views of its buffers (the offsets widened when 32-bit)."""
    width = np.int64 if _is_large(arr.type) else np.int32
    _, offsets_buf, data_buf = arr.buffers()[:3]
    n = len(arr)
    offsets = np.frombuffer(
        offsets_buf, width, count=n + 1, offset=arr.offset * np.dtype(width).itemsize
    ).astype(np.int64, copy=False)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return offsets, data


def _timestamps_ms(col: pa.Array) -> np.ndarray:
    """A timestamp column as int64 ms; a null timestamp is the time of writing (as Kafka's)."""
    micros = col.cast(pa.timestamp("us")).view(pa.int64())
    now = int(time.time() * 1000)
    ms = pc.floor(pc.divide(micros.cast(pa.float64()), 1000.0)).cast(pa.int64())
    return ms.fill_null(now).to_numpy(zero_copy_only=False).astype("<i8")


class _Rows:
    """A batch of Kafka's columns prepared once for framing any run of its rows.

    ``sizes``: each row's bytes as a framed record (an upper bound where it has
    headers), ``ends`` their running total; :func:`_frame` writes runs of rows.
    ``topic`` and ``partition`` columns are routing only and are not stored.
    """

    def __init__(self, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        self.n = batch.num_rows
        self.key = _Binary(batch.column("key")) if "key" in names else None
        self.value = _Binary(batch.column("value"))
        self.stamps = _timestamps_ms(batch.column("timestamp")) if "timestamp" in names else None
        # a record's bytes besides its key, value and headers: its value's length, its
        # key's, its timestamp, its header count (counted whenever the column exists)
        overhead = 4 + 4 * (self.key is not None) + 8 * (self.stamps is not None)
        sizes = np.full(self.n, overhead + 4 * ("headers" in names), np.int64)
        for col in (self.key, self.value):
            if col is not None:
                sizes += np.maximum(col.lengths, 0)
        self.headers: tuple[np.ndarray, _Binary, _Binary] | None = None
        if "headers" in names:
            headers = batch.column("headers")
            counts = pc.list_value_length(headers).fill_null(0).to_numpy(zero_copy_only=False)
            if counts.sum():
                # rows a..b-1 hold flattened headers first[a]..first[b]-1
                first = np.zeros(self.n + 1, np.int64)
                np.cumsum(counts, out=first[1:])
                flat = pc.list_flatten(headers)
                hkeys, hvals = (
                    _Binary(flat.field("key").fill_null("")),
                    _Binary(flat.field("value")),
                )
                per = hkeys.lengths.astype(np.int64) + np.maximum(hvals.lengths, 0) + 8
                parents = np.repeat(np.arange(self.n), counts)
                sizes += np.bincount(parents, weights=per, minlength=self.n).astype(np.int64)
                self.headers = (first, hkeys, hvals)
        self.sizes = sizes
        self.ends = np.cumsum(sizes)


Run = tuple[_Rows, int, int]
"""Rows ``start..stop-1`` of one prepared batch."""


def _frame(runs: list[Run]) -> memoryview:
    """One keyed payload of the rows of ``runs``, in order (see raftlog.records.framing),
    written with one copy of their bytes. The runs' batches have the same columns."""
    first = runs[0][0]
    flags = 0
    sections: list[np.ndarray] = []
    blobs: list[np.ndarray] = []
    # the runs' batches have the same columns: where the first has keys (stamps),
    # every one does, which the ignores below stand for
    if first.key is not None:
        flags |= FLAG_KEYS
        sections += [r.key.lengths[a:b] for r, a, b in runs]  # type: ignore[union-attr]
        blobs += [r.key.bytes_of(a, b) for r, a, b in runs]  # type: ignore[union-attr]
    sections += [r.value.lengths[a:b] for r, a, b in runs]
    blobs += [r.value.bytes_of(a, b) for r, a, b in runs]
    if first.stamps is not None:
        flags |= FLAG_TIMESTAMPS
        sections += [r.stamps[a:b] for r, a, b in runs]  # type: ignore[index]
    spans = [(r.headers, a, b) for r, a, b in runs]
    if any(h is not None and h[0][b] > h[0][a] for h, a, b in spans):
        flags |= FLAG_HEADERS
        counts, klens, vlens, kbytes, vbytes = [], [], [], [], []
        for h, a, b in spans:
            if h is None:
                counts.append(np.zeros(b - a, "<u4"))
                continue
            starts, hkeys, hvals = h
            lo, hi = int(starts[a]), int(starts[b])
            counts.append(np.diff(starts[a : b + 1]).astype("<u4"))
            klens.append(hkeys.lengths[lo:hi].astype("<u4"))
            vlens.append(hvals.lengths[lo:hi])
            kbytes.append(hkeys.bytes_of(lo, hi))
            vbytes.append(hvals.bytes_of(lo, hi))
        sections += counts + klens + vlens
        blobs += kbytes + vbytes
    parts = [np.ascontiguousarray(a).view(np.uint8) for a in (*sections, *blobs)]
    out = np.empty(_HEAD.size + sum(p.nbytes for p in parts), np.uint8)
    # out.data: the array's memoryview (numpy's stubs give ndarray the buffer protocol
    # only for Python 3.12+)
    _HEAD.pack_into(out.data, 0, KEYED_MAGIC, sum(b - a for _r, a, b in runs), flags)
    pos = _HEAD.size
    for part in parts:
        out[pos : pos + part.nbytes] = part
        pos += part.nbytes
    return out.data.toreadonly()


class RecordChunker:
    """Keyed payloads of at most about ``chunk_bytes`` from a stream of batches of Kafka's
    columns: what :class:`~pyspark_raftlog.arrow_payload.RowChunker` is for typed rows.

    Contract: the chunks of :meth:`add` and :meth:`flush` hold every row added, once,
    in order; a chunk is at most ``chunk_bytes`` (but for a row larger than that, alone)
    and, but for the last, as full as the next row allows: rows left over at the end
    of a batch wait for the next one's. Spark hands a task 10,000 rows at a time; a
    payload is framed straight from the runs of rows of the batches it spans, never
    from a joined copy of them. A row beyond the engine's 64 MiB limit is an error.
    """

    def __init__(self, chunk_bytes: int) -> None:
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
        self._budget = chunk_bytes - _HEAD.size
        # prepared batches and the first row of each not framed yet
        self._pending: list[tuple[_Rows, int]] = []
        self._pending_bytes = 0

    @property
    def waiting(self) -> bool:
        """Rows were added that no payload holds yet."""
        return bool(self._pending)

    def add(self, batch: pa.RecordBatch) -> Iterator[Chunk]:
        """The payloads that ``batch``'s rows complete (none while they fit in one)."""
        if batch.num_rows == 0:
            return
        rows = _Rows(batch)
        self._pending.append((rows, 0))
        self._pending_bytes += int(rows.ends[-1])
        while self._pending_bytes > self._budget:
            yield self._take()

    def flush(self) -> Iterator[Chunk]:
        """The payloads of the rows still waiting; the chunker is empty after."""
        while self._pending:
            yield self._take()

    def _take(self) -> Chunk:
        """A payload of the waiting rows from the oldest on, as many as fit."""
        runs: list[Run] = []
        room = self._budget
        for i, (rows, start) in enumerate(self._pending):
            base = int(rows.ends[start - 1]) if start else 0
            stop = int(np.searchsorted(rows.ends, base + room, side="right"))
            if stop == start and not runs:
                stop = start + 1  # a row larger than a chunk travels alone
            if stop > start:
                runs.append((rows, start, stop))
                room -= int(rows.ends[stop - 1]) - base
                self._pending_bytes -= int(rows.ends[stop - 1]) - base
            if stop < rows.n:
                self._pending[: i + 1] = [(rows, stop)]
                break
        else:
            self._pending = []
        payload = _frame(runs)
        if len(payload) > MAX_CHUNK_BYTES:
            r, a, _b = runs[0]
            raise ValueError(
                f"a row of {int(r.sizes[a])} bytes encodes to {len(payload)} bytes, more "
                f"than the {MAX_CHUNK_BYTES}-byte limit of one raftlog record batch"
            )
        return payload, sum(b - a for _r, a, b in runs)


class Decoded:
    """The columns of one payload's records: ``key``, ``value`` (binary arrays),
    ``timestamp_ms`` (int64 numpy array, or None: the batch's append time) and
    ``headers`` (list<struct<key string, value binary>>)."""

    def __init__(
        self, key: pa.Array, value: pa.Array, timestamp_ms: np.ndarray | None, headers: pa.Array
    ) -> None:
        self.key, self.value, self.timestamp_ms, self.headers = key, value, timestamp_ms, headers


def _binary(lengths: np.ndarray, data: np.ndarray, start: int, typ: pa.DataType) -> pa.Array:
    """A binary/string array over ``data[start:]`` cut by ``lengths`` (-1 = null)."""
    valid = lengths >= 0
    sizes = np.where(valid, lengths, 0).astype(np.int64)
    offsets = np.zeros(len(lengths) + 1, np.int32)
    np.cumsum(sizes, out=offsets[1:])
    body = data[start : start + int(offsets[-1])]
    validity = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(
        typ, len(lengths), [validity, pa.py_buffer(offsets), pa.py_buffer(body)]
    )


def decode_records(payload: bytes, record_count: int) -> Decoded:
    """The records of any payload as Kafka's columns.

    A keyed payload gives its keys, values, timestamps and headers; a plain
    CLI payload its values; anything else (e.g. an Arrow payload, bytes
    written by another client) is one opaque value, the first record's, the
    batch's other records having null values (the counts line up, and a batch
    claiming many records of one value costs one copy of it, as the CLI prints it once).

    The record count is checked against the payload's bytes before anything is
    sized by it (:mod:`raftlog.records.payload_check`): PayloadError (a ValueError)
    when the payload cannot hold ``record_count`` records, never a MemoryError.
    """
    n = record_count
    data = np.frombuffer(payload, np.uint8)
    if bytes(payload[:4]) == KEYED_MAGIC:
        return _keyed(keyed_layout(payload, n), data, n)
    check_payload(payload, n)  # the bound for plain and opaque payloads, Arrow's rows
    values = unframe_records(payload, n)
    if values is not None:
        value = pa.array(values, pa.binary())
    else:
        offsets = np.full(n + 1, len(payload), np.int32)
        offsets[0] = 0
        validity = np.zeros(n, bool)
        validity[0] = True
        value = pa.Array.from_buffers(
            pa.binary(),
            n,
            [
                pa.py_buffer(np.packbits(validity, bitorder="little")),
                pa.py_buffer(offsets),
                pa.py_buffer(payload),
            ],
        )
    return Decoded(pa.nulls(n, pa.binary()), value, None, pa.nulls(n, HEADERS_TYPE))


def _keyed(lay: KeyedLayout, data: np.ndarray, n: int) -> Decoded:
    """Columns over a checked keyed payload's own memory (``data``: its bytes)."""
    pos = lay.data_start
    if lay.key_lens is not None:
        key = _binary(lay.key_lens, data, pos, pa.binary())
        pos += int(np.maximum(lay.key_lens, 0).sum())
    else:
        key = pa.nulls(n, pa.binary())
    value = _binary(lay.value_lens, data, pos, pa.binary())
    pos += int(np.maximum(lay.value_lens, 0).sum())
    stamps = None if lay.timestamps is None else lay.timestamps.astype(np.int64)
    if lay.header_counts is not None:
        assert lay.hk_lens is not None and lay.hv_lens is not None  # set with header counts
        hk_lens = lay.hk_lens.astype(np.int32)
        hkeys = _binary(hk_lens, data, pos, pa.string())
        pos += int(hk_lens.sum())
        hvals = _binary(lay.hv_lens, data, pos, pa.binary())
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(lay.header_counts, out=offsets[1:])
        structs = pa.StructArray.from_arrays([hkeys, hvals], fields=list(HEADERS_TYPE.value_type))
        headers = pa.ListArray.from_arrays(pa.array(offsets), structs, type=HEADERS_TYPE)
    else:
        headers = pa.nulls(n, HEADERS_TYPE)
    return Decoded(key, value, stamps, headers)
