"""Which topic partition each written row goes to: Kafka's default partitioner, vectorized.

The rule, per row, first that applies (so that any client can compute it):

1. a ``partition`` column (int) whose value is not null: that partition
   (it must be below the topic's partition count);
2. option ``partitionBy``: ``murmur2(bytes) & 0x7fffffff`` mod the partition
   count, where ``bytes`` is :func:`key_bytes` of the named columns;
3. a ``key`` column whose value is not null: the same hash of the key's bytes
   (a string key hashes its UTF-8 bytes) -- exactly what Kafka's default
   partitioner (``Utils.toPositive(Utils.murmur2(key)) % numPartitions``)
   gives, so a Kafka-keyed producer and raftlog agree;
4. otherwise the Spark partition id mod the partition count (rows without a
   key spread over partitions as Spark spreads them over tasks).

``murmur2`` is Kafka's (``org.apache.kafka.common.utils.Utils.murmur2``: seed
``0x9747b28c``, m ``0x5bd1e995``, r 24). :func:`murmur2_many` runs it over many
byte strings at once with numpy, one pass per 4-byte word of the longest input,
never row by row.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["key_bytes", "murmur2", "murmur2_many", "partitions_of", "to_large_binary"]

from raftlog.client.partitioner import SEED as _SEED
from raftlog.client.partitioner import M as _M
from raftlog.client.partitioner import murmur2


def to_large_binary(arr: pa.Array | pa.ChunkedArray) -> pa.Array:
    """``arr`` (string or binary, any width) as one large_binary array."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not pa.types.is_large_binary(arr.type):
        arr = arr.cast(pa.large_binary())
    return arr


def _offsets_and_data(arr: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(int64 offsets[n+1], uint8 data) of a large_binary array, honouring its slice offset."""
    _, offsets_buf, data_buf = arr.buffers()
    offsets = np.frombuffer(offsets_buf, np.int64, count=len(arr) + 1, offset=arr.offset * 8)
    data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
    return offsets, data


def murmur2_many(arr: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Kafka's murmur2 of every value of a binary/string array, as int32 (nulls hash b"")."""
    arr = to_large_binary(arr)
    if arr.null_count:
        arr = pc.if_else(pc.is_null(arr), pa.scalar(b"", pa.large_binary()), arr)
    offsets, data = _offsets_and_data(arr)
    starts = offsets[:-1]
    lengths = (offsets[1:] - starts).astype(np.int64)
    with np.errstate(over="ignore"):
        m = np.uint32(_M)
        h = np.uint32(_SEED) ^ lengths.astype(np.uint32)
        words = lengths // 4
        for i in range(int(words.max()) if len(words) else 0):
            rows = np.nonzero(words > i)[0]
            base = starts[rows] + 4 * i
            k = (
                data[base].astype(np.uint32)
                | (data[base + 1].astype(np.uint32) << 8)
                | (data[base + 2].astype(np.uint32) << 16)
                | (data[base + 3].astype(np.uint32) << 24)
            )
            k = k * m
            k ^= k >> np.uint32(24)
            k = k * m
            h[rows] = (h[rows] * m) ^ k
        tail = starts + (lengths & ~3)
        rest = lengths % 4
        for shift, need in ((16, 3), (8, 2)):
            rows = np.nonzero(rest >= need)[0]
            h[rows] ^= data[tail[rows] + need - 1].astype(np.uint32) << np.uint32(shift)
        rows = np.nonzero(rest >= 1)[0]
        h[rows] ^= data[tail[rows]].astype(np.uint32)
        h[rows] = h[rows] * m
        h ^= h >> np.uint32(13)
        h = h * m
        h ^= h >> np.uint32(15)
    return h.view(np.int32)


def _column_bytes(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """One partitionBy column's values as bytes (see :func:`key_bytes`)."""
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    t = col.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        return to_large_binary(col)
    if pa.types.is_large_binary(t):
        return col
    if pa.types.is_boolean(t):
        col = col.cast(pa.int8())
    width = {1: ">i1", 2: ">i4", 4: ">i4", 8: ">i8"}
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        # ints as Kafka's IntegerSerializer/LongSerializer write them: big-endian two's
        # complement, 4 bytes up to int32, 8 for int64; a boolean as one byte 0/1
        size = 1 if pa.types.is_boolean(t) else t.bit_width // 8
        fmt = width[size]
        values = col.fill_null(0).to_numpy(zero_copy_only=False).astype(fmt)
    elif pa.types.is_floating(t):
        values = col.cast(pa.float64()).fill_null(0).to_numpy(zero_copy_only=False)
        values = values.astype(">f8")  # DoubleSerializer: IEEE 754 big-endian
    elif pa.types.is_date32(t) or pa.types.is_timestamp(t):
        phys = pa.int32() if pa.types.is_date32(t) else pa.int64()
        values = col.view(phys).fill_null(0).to_numpy(zero_copy_only=False)
        values = values.astype(">i4" if pa.types.is_date32(t) else ">i8")
    else:  # decimals and anything else: the value's text, as Arrow casts it
        return to_large_binary(col.cast(pa.string()))
    size = values.dtype.itemsize
    raw = np.ascontiguousarray(values).view(np.uint8)
    offsets = np.arange(0, size * (len(col) + 1), size, dtype=np.int64)
    out = pa.Array.from_buffers(
        pa.large_binary(), len(col), [None, pa.py_buffer(offsets), pa.py_buffer(raw)]
    )
    return pc.if_else(pc.is_null(col), pa.scalar(None, pa.large_binary()), out)


def key_bytes(columns: list[pa.Array | pa.ChunkedArray]) -> pa.Array:
    """The bytes that ``partitionBy`` hashes, per row.

    One column: its value's bytes -- UTF-8 of a string, a binary as is,
    integers big-endian (4 bytes up to int32, 8 for int64; Kafka's
    Integer/LongSerializer), floats as 8-byte big-endian doubles, dates as
    int32 days and timestamps as int64 microseconds (big-endian), booleans as
    one byte, anything else as Arrow's text of it; a null as no bytes.
    Several columns: for each, a 4-byte big-endian length then those bytes
    (length -1 and no bytes for a null), concatenated in the option's order,
    so that ("a", "bc") and ("ab", "c") differ.
    """
    parts = [_column_bytes(c) for c in columns]
    if len(parts) == 1:
        return parts[0]
    n = len(parts[0])
    pieces = []
    for part in parts:
        offsets, _ = _offsets_and_data(part)
        lengths = (offsets[1:] - offsets[:-1]).astype(">i4")
        if part.null_count:
            lengths[np.asarray(part.is_null())] = -1
        prefix = pa.Array.from_buffers(
            pa.large_binary(),
            n,
            [
                None,
                pa.py_buffer(np.arange(0, 4 * (n + 1), 4, dtype=np.int64)),
                pa.py_buffer(np.ascontiguousarray(lengths).view(np.uint8)),
            ],
        )
        pieces += [prefix, part.fill_null(b"")]
    return pc.binary_join_element_wise(*pieces, pa.scalar(b"", pa.large_binary()))


def partitions_of(
    num_partitions: np.ndarray,
    *,
    explicit: pa.Array | None,
    hashed_bytes: pa.Array | None,
    hash_null_means_default: bool,
    default: int,
) -> np.ndarray:
    """The topic partition of every row (int32), by the rule in the module docstring.

    ``num_partitions`` holds each row's topic's partition count. ``explicit``
    is the ``partition`` column; ``hashed_bytes`` what to hash (partitionBy's
    :func:`key_bytes` or the ``key`` column); with ``hash_null_means_default``
    (a ``key`` column) a null falls through to ``default`` (the Spark partition
    id), otherwise (partitionBy) a null hashes as no bytes. Raises ValueError
    naming the row for an explicit partition outside the topic.
    """
    n = len(num_partitions)
    out = np.full(n, default, np.int64) % num_partitions
    if hashed_bytes is not None:
        hashed = (murmur2_many(hashed_bytes).astype(np.int64) & 0x7FFFFFFF) % num_partitions
        if hash_null_means_default and hashed_bytes.null_count:
            keep = np.asarray(hashed_bytes.is_valid())
            out = np.where(keep, hashed, out)
        else:
            out = hashed
    if explicit is not None:
        given = explicit.cast(pa.int64()).fill_null(-1).to_numpy(zero_copy_only=False)
        bad = np.nonzero((given < -1) | ((given >= 0) & (given >= num_partitions)))[0]
        if len(bad):
            i = int(bad[0])
            raise ValueError(
                f"column 'partition' of row {i} is {int(given[i])}, but its topic has "
                f"{int(num_partitions[i])} partitions (0..{int(num_partitions[i]) - 1})"
            )
        out = np.where(given >= 0, given, out)
    return out.astype(np.int32)
