"""Raw records: Kafka's columns <-> the CLI's payload framing, with array operations.

A DataFrame whose columns are ``value`` and nothing but Kafka's others
(``key``, ``headers``, ``topic``, ``partition``, ``timestamp``) is written as
raw records, value and key bytes as they are, in the *keyed* layout of
:mod:`raftlog.client.framing` (the one ``raftlog produce`` writes with keys or
headers). A topic of raw records reads back with Kafka's schema
(:data:`KAFKA_READ_FIELDS`); plain CLI payloads (values only) and, failing
both, opaque payloads (one value each) read the same way, so anything a
non-Spark producer wrote is readable.

Both directions work on whole Arrow buffers (numpy views of offsets and
lengths), never row by row.
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

from raftlog.client.framing import (
    FLAG_HEADERS,
    FLAG_KEYS,
    FLAG_TIMESTAMPS,
    KEYED_MAGIC,
    unframe_records,
)

__all__ = [
    "HEADERS_TYPE",
    "RECORDS_FORMAT_KEY",
    "Decoded",
    "chunk_records",
    "decode_records",
    "encode_records",
    "is_records_schema",
    "records_bytes",
    "records_marker_schema",
]

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
RECORDS_FORMAT_KEY = b"raftlog.format"
_HEAD = struct.Struct("<4sII")
# A record's bytes besides its key, value and headers: lengths, timestamp, header count.
ROW_OVERHEAD = 24


def records_marker_schema() -> pa.Schema:
    """The schema stored as a raw-records topic's metadata: no fields, a format mark."""
    return pa.schema([], metadata={RECORDS_FORMAT_KEY: b"records"})


def is_records_schema(schema: pa.Schema | None) -> bool:
    """Whether a topic's stored schema marks it as holding raw records."""
    return schema is not None and (schema.metadata or {}).get(RECORDS_FORMAT_KEY) == b"records"


def _lengths_and_bytes(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int32 lengths with -1 for null, the values' bytes back to back) of a binary array."""
    arr = to_large_binary(arr)
    nulls = np.asarray(arr.is_null()) if arr.null_count else None
    if nulls is not None:
        arr = arr.fill_null(b"")
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    lengths = (offsets[1:] - offsets[:-1]).astype(np.int32)
    body = data[offsets[0] : offsets[-1]]
    if nulls is not None:
        lengths[nulls] = -1
    return lengths, body


def _timestamps_ms(col: pa.Array) -> np.ndarray:
    """A timestamp column as int64 ms; a null timestamp is the time of writing (as Kafka's)."""
    micros = col.cast(pa.timestamp("us")).view(pa.int64())
    now = int(time.time() * 1000)
    ms = pc.floor(pc.divide(micros.cast(pa.float64()), 1000.0)).cast(pa.int64())
    return ms.fill_null(now).to_numpy(zero_copy_only=False).astype("<i8")


def encode_records(batch: pa.RecordBatch) -> bytes:
    """One keyed payload holding every row of ``batch`` (Kafka's columns; ``value`` required).

    ``topic`` and ``partition`` columns are routing only and are not stored.
    """
    n = batch.num_rows
    names = batch.schema.names
    flags = 0
    sections: list[bytes | np.ndarray] = []
    blobs: list[np.ndarray] = []
    if "key" in names:
        flags |= FLAG_KEYS
        key_lens, key_bytes = _lengths_and_bytes(batch.column("key"))
        sections.append(key_lens.astype("<i4"))
        blobs.append(key_bytes)
    value_lens, value_bytes = _lengths_and_bytes(batch.column("value"))
    sections.append(value_lens.astype("<i4"))
    blobs.append(value_bytes)
    if "timestamp" in names:
        flags |= FLAG_TIMESTAMPS
        sections.append(_timestamps_ms(batch.column("timestamp")))
    if "headers" in names:
        headers = batch.column("headers")
        counts = pc.list_value_length(headers).fill_null(0).to_numpy(zero_copy_only=False)
        if counts.sum():
            flags |= FLAG_HEADERS
            flat = pc.list_flatten(headers)
            hkey_lens, hkeys = _lengths_and_bytes(flat.field("key").fill_null(""))
            hval_lens, hvals = _lengths_and_bytes(flat.field("value"))
            sections += [
                counts.astype("<u4"),
                hkey_lens.astype("<u4"),
                hval_lens.astype("<i4"),
            ]
            blobs += [hkeys, hvals]
    head = _HEAD.pack(KEYED_MAGIC, n, flags)
    return head + b"".join(
        s.tobytes() if isinstance(s, np.ndarray) else s for s in [*sections, *blobs]
    )


def _record_sizes(batch: pa.RecordBatch) -> np.ndarray:
    """Each row's bytes as a framed record (an upper bound where it has headers)."""
    n = batch.num_rows
    size = np.full(n, ROW_OVERHEAD, np.int64)
    for name in ("key", "value"):
        if name in batch.schema.names:
            lens, _ = _lengths_and_bytes(batch.column(name))
            size += np.maximum(lens, 0)
    if "headers" in batch.schema.names:
        # a row's headers: an upper bound from the flattened lengths per list
        flat = pc.list_flatten(batch.column("headers"))
        if len(flat):
            klen, _ = _lengths_and_bytes(flat.field("key").fill_null(""))
            vlen, _ = _lengths_and_bytes(flat.field("value"))
            per = np.maximum(klen, 0) + np.maximum(vlen, 0) + 8
            parents = pc.list_parent_indices(batch.column("headers")).to_numpy()
            size += np.bincount(parents, weights=per, minlength=n).astype(np.int64)
    return size


def records_bytes(batch: pa.RecordBatch) -> int:
    """The bytes of ``batch``'s rows as framed records (what :func:`chunk_records` cuts
    by): a :class:`~pyspark_raftlog.arrow_payload.RowChunker`'s measure for them."""
    return int(_record_sizes(batch).sum())


def chunk_records(batch: pa.RecordBatch, chunk_bytes: int) -> Iterator[Chunk]:
    """Cut ``batch`` into keyed payloads of at most about ``chunk_bytes`` (rows never split).

    A row larger than ``chunk_bytes`` travels alone; one beyond the engine's
    64 MiB limit is an error naming the row.
    """
    n = batch.num_rows
    if n == 0:
        return
    size = _record_sizes(batch)
    ends = np.cumsum(size)
    start = 0
    while start < n:
        base = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, base + chunk_bytes - _HEAD.size, side="right"))
        stop = max(stop, start + 1)
        payload = encode_records(batch.slice(start, stop - start))
        if len(payload) > MAX_CHUNK_BYTES:
            raise ValueError(
                f"row {start} alone encodes to {len(payload)} bytes, more than the "
                f"{MAX_CHUNK_BYTES}-byte limit of one raftlog record batch"
            )
        yield payload, stop - start
        start = stop


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
        typ, len(lengths), [validity, pa.py_buffer(offsets), pa.py_buffer(body.tobytes())]
    )


def decode_records(payload: bytes, record_count: int) -> Decoded:
    """The records of any payload as Kafka's columns.

    A keyed payload gives its keys, values, timestamps and headers; a plain
    CLI payload its values; anything else (e.g. an Arrow payload, bytes
    written by another client) is one opaque value per record batch, returned
    once per record so the counts line up.
    """
    n = record_count
    data = np.frombuffer(payload, np.uint8)
    parsed = _parse_keyed(payload, data, n)
    if parsed is not None:
        return parsed
    values = unframe_records(payload, n)
    if values is None:
        values = [payload] * n
    value = pa.array(values, pa.binary())
    return Decoded(pa.nulls(n, pa.binary()), value, None, pa.nulls(n, HEADERS_TYPE))


def _parse_keyed(payload: bytes, data: np.ndarray, n: int) -> Decoded | None:
    if len(payload) < _HEAD.size or payload[:4] != KEYED_MAGIC:
        return None
    _, count, flags = _HEAD.unpack_from(payload, 0)
    if count != n:
        return None
    pos = _HEAD.size

    def take(dtype: str, k: int) -> np.ndarray:
        nonlocal pos
        arr = np.frombuffer(payload, dtype, count=k, offset=pos)
        pos += arr.nbytes
        return arr

    try:
        key_lens = take("<i4", n) if flags & FLAG_KEYS else None
        value_lens = take("<i4", n)
        stamps = take("<i8", n).astype(np.int64) if flags & FLAG_TIMESTAMPS else None
        if flags & FLAG_HEADERS:
            hcounts = take("<u4", n).astype(np.int64)
            total = int(hcounts.sum())
            hk_lens = take("<u4", total).astype(np.int32)
            hv_lens = take("<i4", total)
    except ValueError:
        return None
    if key_lens is not None:
        key = _binary(key_lens, data, pos, pa.binary())
        pos += int(np.maximum(key_lens, 0).sum())
    else:
        key = pa.nulls(n, pa.binary())
    value = _binary(value_lens, data, pos, pa.binary())
    pos += int(np.maximum(value_lens, 0).sum())
    if flags & FLAG_HEADERS:
        hkeys = _binary(hk_lens, data, pos, pa.string())
        pos += int(hk_lens.sum())
        hvals = _binary(hv_lens, data, pos, pa.binary())
        pos += int(np.maximum(hv_lens, 0).sum())
        offsets = np.zeros(n + 1, np.int32)
        np.cumsum(hcounts, out=offsets[1:])
        structs = pa.StructArray.from_arrays([hkeys, hvals], fields=list(HEADERS_TYPE.value_type))
        headers = pa.ListArray.from_arrays(pa.array(offsets), structs, type=HEADERS_TYPE)
    else:
        headers = pa.nulls(n, HEADERS_TYPE)
    if pos != len(payload):
        return None
    return Decoded(key, value, stamps, headers)
