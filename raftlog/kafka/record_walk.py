"""The records section of a Kafka RecordBatch v2, walked and built in columns.

Kafka's record layout (KIP-98; Kafka's ``DefaultRecord.java``), after the batch's
61-byte header and its codec undone, ``record count`` times::

    length          varint   the bytes that follow, to the record's end
    attributes      int8     unused (0)
    timestampDelta  varlong  from the batch's first timestamp
    offsetDelta     varint   from the batch's base offset
    keyLength       varint   -1: null key
    key             bytes
    valueLength     varint   -1: null value
    value           bytes
    headers count   varint
    then per header: keyLength varint (>= 0), key (UTF-8), valueLength varint (-1:
    null), value

Varints are zig-zag encoded base-128, least significant group first (Kafka's
``ByteUtils.readVarint``): at most 5 bytes, varlongs at most 10.

:func:`walk` checks that layout and returns each field as a numpy column without making
an object per record: only the chain of record lengths is followed in Python (where a
record starts depends on the one before); every other field is decoded for all records
at once. :func:`keyed_payload` turns the columns into raftlog's keyed payload
(:mod:`raftlog.records.framing`), and :func:`build_records` builds a records section
from a keyed payload's columns (:class:`raftlog.records.payload_check.KeyedLayout`),
the way back for a fetch. The batch header and its CRC are
:mod:`raftlog.kafka.records`' job.
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

from raftlog.records.framing import FLAG_HEADERS, FLAG_KEYS, FLAG_TIMESTAMPS, KEYED_MAGIC

#: length 1, then attributes, timestampDelta, offsetDelta, keyLength, valueLength,
#: headers count: a byte each at least
MIN_RECORD_BYTES = 7
_MIN_BODY = MIN_RECORD_BYTES - 1
_HEAD = struct.Struct("<4sII")
_PAD = 10  # a varlong's longest: every field's bytes are gathered past the end safely


class RecordWalkError(ValueError):
    """The records section does not hold its record count in Kafka's layout; the message
    says where and what."""


@dataclasses.dataclass(frozen=True, slots=True)
class Columns:
    """The records of one records section, one entry per record.

    ``key_at``/``value_at``: where each key and value starts in the section;
    ``key_len``/``value_len``: int64 lengths (-1: null); ``timestamp_delta``: int64;
    ``headers``: per record, its ``(key, value)`` pairs (key decoded from UTF-8, value
    None when null), or None when no record has a header.
    """

    key_at: np.ndarray
    key_len: np.ndarray
    value_at: np.ndarray
    value_len: np.ndarray
    timestamp_delta: np.ndarray
    headers: list[tuple[tuple[str, bytes | None], ...]] | None


def _chain(data: bytes, count: int) -> tuple[list[int], list[int]]:
    """Where each record's body starts and ends, following the length varints."""
    starts = [0] * count
    ends = [0] * count
    pos, size = 0, len(data)
    for i in range(count):
        if pos >= size:
            raise RecordWalkError(f"record {i} of {count} starts past the records' end")
        b = data[pos]
        if b < 0x80:  # the common lengths inline: records under 64 bytes, then 8 KiB
            v, pos = b, pos + 1
        elif pos + 1 < size and data[pos + 1] < 0x80:
            v, pos = (b & 0x7F) | (data[pos + 1] << 7), pos + 2
        else:
            v, pos = _slow_varint(data, pos, 5)
        length = (v >> 1) ^ -(v & 1)
        if length < _MIN_BODY or pos + length > size:
            raise RecordWalkError(
                f"record {i} declares {length} bytes; {size - pos} remain "
                f"(a record has at least {_MIN_BODY} after its length)"
            )
        starts[i] = pos
        pos += length
        ends[i] = pos
    if pos != size:
        raise RecordWalkError(f"{size - pos} bytes follow the last of {count} records")
    return starts, ends


def _slow_varint(data: bytes, pos: int, most: int) -> tuple[int, int]:
    """The unsigned base-128 value at ``pos`` and the position after it."""
    value = shift = 0
    for k in range(most):
        if pos + k >= len(data):
            raise RecordWalkError("a varint is cut short by the records' end")
        b = data[pos + k]
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos + k + 1
        shift += 7
    raise RecordWalkError(f"a varint runs past {most} bytes")


_WEIGHTS = {n: (np.arange(n, dtype=np.uint64) * np.uint64(7)) for n in (3, 5, 10)}
_SHORT = 3  # bytes tried first: values below 2**20 (zig-zag), nearly every field


def _varints(buf: np.ndarray, at: np.ndarray, most: int) -> tuple[np.ndarray, np.ndarray]:
    """The zig-zag varints starting at ``at`` (int64 positions in ``buf``, which has
    ``_PAD`` bytes past the section): (values int64, positions after them)."""
    cols = buf[at[:, None] + np.arange(_SHORT)]
    last = cols < 0x80
    if last.any(axis=1).all():
        most = _SHORT
    else:
        cols = buf[at[:, None] + np.arange(most)]
        last = cols < 0x80
        if not last.any(axis=1).all():
            raise RecordWalkError(f"a varint runs past {most} bytes")
    size = last.argmax(axis=1) + 1
    groups = (cols & 0x7F).astype(np.uint64) << _WEIGHTS[most]
    groups[np.arange(most) >= size[:, None]] = 0
    raw = groups.sum(axis=1, dtype=np.uint64)
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, at + size


def _within(
    field: tuple[np.ndarray, np.ndarray], end: np.ndarray, what: str
) -> tuple[np.ndarray, np.ndarray]:
    """``field`` (values, positions after them) when no record's field ran past its
    end (so the next field's bytes, and its ``_PAD`` reach, are in the buffer)."""
    if (field[1] > end).any():
        raise RecordWalkError(f"a record's {what} runs past its end")
    return field


def walk(section: bytes | memoryview, count: int) -> Columns:
    """Check ``section`` (a batch's records, codec undone) holds exactly ``count``
    records in Kafka's layout and return them as columns.

    Checked: every record's length fits what remains and the records end exactly where
    the section does; within each record the fields end exactly at its length; offset
    deltas are 0..count-1 (what every producer writes, and what lets the stored batch
    answer a fetch with the same offsets); record attributes are 0 (unused by Kafka,
    and not stored); key and value lengths are -1 or more; header
    keys are not null and are UTF-8. Nothing is sized by ``count`` before the chain of
    lengths has found that many records in the bytes. RecordWalkError says what failed.
    """
    data = bytes(section)
    if count < 1 or count > len(data) // MIN_RECORD_BYTES:
        raise RecordWalkError(
            f"record count {count} does not fit {len(data)} bytes of records "
            f"(each record takes at least {MIN_RECORD_BYTES})"
        )
    starts, ends = _chain(data, count)
    buf = np.frombuffer(data + bytes(_PAD), dtype=np.uint8)
    end = np.array(ends, dtype=np.int64)
    at = np.array(starts, dtype=np.int64)
    if buf[at].any():
        bad = int(np.flatnonzero(buf[at])[0])
        raise RecordWalkError(
            f"record {bad} has attributes {int(buf[at[bad]])}; a record's attributes are "
            "unused in Kafka's format and written as 0 (they would not be stored)"
        )
    at = at + 1
    ts_delta, at = _within(_varints(buf, at, 10), end, "timestamp delta")
    offset_delta, at = _within(_varints(buf, at, 5), end, "offset delta")
    if not np.array_equal(offset_delta, np.arange(count, dtype=np.int64)):
        bad = int(np.flatnonzero(offset_delta != np.arange(count))[0])
        raise RecordWalkError(
            f"record {bad} has offset delta {int(offset_delta[bad])}; expected {bad} "
            "(offset deltas count 0, 1, 2, ... in a batch)"
        )
    key_len, at = _within(_varints(buf, at, 5), end, "key length")
    key_at = at
    at = at + np.maximum(key_len, 0)
    if (at >= end).any():  # a value length, and the headers count, still follow
        raise RecordWalkError("a record's key runs past its end")
    value_len, at = _within(_varints(buf, at, 5), end, "value length")
    value_at = at
    at = at + np.maximum(value_len, 0)
    if (at >= end).any():
        raise RecordWalkError("a record's value runs past its end")
    if (key_len < -1).any() or (value_len < -1).any():
        raise RecordWalkError("a key or value length is below -1")
    header_count, at = _within(_varints(buf, at, 5), end, "headers count")
    headers = None
    if (header_count != 0).any():
        headers = _headers(data, at.tolist(), header_count.tolist(), ends)
    elif not np.array_equal(at, end):
        raise RecordWalkError("a record's fields do not end where its length says")
    return Columns(key_at, key_len, value_at, value_len, ts_delta, headers)


def _headers(
    data: bytes, at: list[int], counts: list[int], ends: list[int]
) -> list[tuple[tuple[str, bytes | None], ...]]:
    """Each record's headers, read one by one (records with headers are the rare case)."""
    out: list[tuple[tuple[str, bytes | None], ...]] = []
    for pos, n, end in zip(at, counts, ends, strict=True):
        if n < 0 or n > end - pos:
            raise RecordWalkError(f"a headers count of {n} does not fit its record")
        pairs = []
        for _ in range(n):
            v, pos = _slow_varint(data, pos, 5)
            klen = (v >> 1) ^ -(v & 1)
            if klen < 0 or pos + klen > end:
                raise RecordWalkError("a header key is null or runs past its record")
            try:
                key = data[pos : pos + klen].decode("utf-8")
            except UnicodeDecodeError:
                raise RecordWalkError("a header key is not UTF-8") from None
            pos += klen
            v, pos = _slow_varint(data, pos, 5)
            vlen = (v >> 1) ^ -(v & 1)
            if vlen < -1 or pos + max(vlen, 0) > end:
                raise RecordWalkError("a header value runs past its record")
            value = None if vlen < 0 else data[pos : pos + vlen]
            pos += max(vlen, 0)
            pairs.append((key, value))
        if pos != end:
            raise RecordWalkError("a record's fields do not end where its length says")
        out.append(tuple(pairs))
    return out


def _cut(data: bytes, at: np.ndarray, lens: np.ndarray) -> list[bytes]:
    """The non-null fields at ``at`` of ``lens``, in record order."""
    keep = lens >= 0
    return [data[a : a + n] for a, n in zip(at[keep].tolist(), lens[keep].tolist(), strict=True)]


def keyed_payload(section: bytes | memoryview, cols: Columns, first_timestamp: int | None) -> bytes:
    """The keyed payload of the records ``cols`` walked in ``section``: byte for byte
    what :func:`raftlog.records.framing.frame_keyed` makes of the same records (timestamps
    ``first_timestamp`` + each delta; None: no timestamps, the batch's append time)."""
    data = bytes(section)
    n = len(cols.key_len)
    flags = FLAG_KEYS if (cols.key_len >= 0).any() else 0
    if first_timestamp is not None:
        flags |= FLAG_TIMESTAMPS
    if cols.headers is not None:
        flags |= FLAG_HEADERS
    parts: list[bytes] = [_HEAD.pack(KEYED_MAGIC, n, flags)]
    if flags & FLAG_KEYS:
        parts.append(cols.key_len.astype("<i4").tobytes())
    parts.append(cols.value_len.astype("<i4").tobytes())
    if first_timestamp is not None:
        parts.append((cols.timestamp_delta + first_timestamp).astype("<i8").tobytes())
    hkeys: list[bytes] = []
    hvals: list[bytes | None] = []
    if cols.headers is not None:
        parts.append(np.array([len(h) for h in cols.headers], dtype="<u4").tobytes())
        for pairs in cols.headers:
            for k, v in pairs:
                hkeys.append(k.encode("utf-8"))
                hvals.append(v)
        parts.append(np.array([len(k) for k in hkeys], dtype="<u4").tobytes())
        parts.append(np.array([-1 if v is None else len(v) for v in hvals], "<i4").tobytes())
    if flags & FLAG_KEYS:
        parts.extend(_cut(data, cols.key_at, cols.key_len))
    parts.extend(_cut(data, cols.value_at, cols.value_len))
    parts.extend(hkeys)
    parts.extend(v for v in hvals if v is not None)
    return b"".join(parts)


def _encode_varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zig-zag base-128 encodings of int64 ``values``: (bytes (n, w) uint8, sizes), ``w``
    the longest encoding's size."""
    signed = values.astype(np.int64)
    z = ((signed << 1) ^ (signed >> 63)).view(np.uint64)
    top = int(z.max()) if len(z) else 0
    width = max(1, (top.bit_length() + 6) // 7)
    shifts = np.arange(width, dtype=np.uint64) * np.uint64(7)
    groups = (z[:, None] >> shifts) & np.uint64(0x7F)
    more = (z[:, None] >> (shifts + np.uint64(7))) != 0
    sizes = more.sum(axis=1) + 1
    out = (groups | (more.astype(np.uint64) << np.uint64(7))).astype(np.uint8)
    return out, sizes


def _scatter(out: np.ndarray, at: np.ndarray, encoded: tuple[np.ndarray, np.ndarray]) -> None:
    mat, sizes = encoded
    keep = np.arange(mat.shape[1]) < sizes[:, None]
    out[(at[:, None] + np.arange(mat.shape[1]))[keep]] = mat[keep]


def build_records(
    key_lens: np.ndarray,
    value_lens: np.ndarray,
    timestamps: np.ndarray,
    keys: bytes | memoryview,
    values: bytes | memoryview,
) -> bytes:
    """A records section (the layout above) of records without headers: offset deltas
    0..n-1, timestamp deltas from ``timestamps[0]``, attributes 0; ``keys`` and
    ``values`` hold the non-null keys and values back to back in record order (as a
    keyed payload does), ``key_lens``/``value_lens`` their lengths (-1: null). Byte for
    byte what kafka-python's ``DefaultRecordBatchBuilder`` appends for the same records.
    """
    n = len(value_lens)
    klen = key_lens.astype(np.int64)
    vlen = value_lens.astype(np.int64)
    kbytes, vbytes = np.maximum(klen, 0), np.maximum(vlen, 0)
    ts = _encode_varints(timestamps.astype(np.int64) - np.int64(timestamps[0]))
    offs = _encode_varints(np.arange(n, dtype=np.int64))
    ks, vs = _encode_varints(klen), _encode_varints(vlen)
    # attributes, the fields, and a headers count of 0: one byte each
    body = 2 + ts[1] + offs[1] + ks[1] + kbytes + vs[1] + vbytes
    length = _encode_varints(body)
    size = length[1] + body
    start = np.zeros(n, dtype=np.int64)
    np.cumsum(size[:-1], out=start[1:])
    out = np.zeros(int(size.sum()), dtype=np.uint8)
    _scatter(out, start, length)
    at = start + length[1] + 1  # past the attributes byte (0)
    _scatter(out, at, ts)
    at = at + ts[1]
    _scatter(out, at, offs)
    at = at + offs[1]
    _scatter(out, at, ks)
    key_at = at + ks[1]
    at = key_at + kbytes
    _scatter(out, at, vs)
    value_at = at + vs[1]
    for blob, where, lens in ((keys, key_at, kbytes), (values, value_at, vbytes)):
        _copy_runs(out, np.frombuffer(blob, dtype=np.uint8), where, lens)
    return out.tobytes()


def _copy_runs(out: np.ndarray, blob: np.ndarray, where: np.ndarray, lens: np.ndarray) -> None:
    """Copy ``blob``'s back-to-back runs of ``lens`` bytes to ``out`` at ``where``."""
    total = int(lens.sum())
    if total != len(blob):
        raise ValueError(f"{len(blob)} bytes for runs of {total}")
    if total:
        # runs do not overlap, so +1 at each start and -1 at each end mark their bytes
        # (empty runs left out: then no two runs share a start, nor an end)
        some = lens > 0
        edges = np.zeros(len(out) + 1, dtype=np.int8)
        edges[where[some]] += 1
        edges[where[some] + lens[some]] -= 1
        out[np.cumsum(edges[:-1], dtype=np.int8).view(np.bool_)] = blob
