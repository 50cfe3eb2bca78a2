"""Framing of several records in one batch payload (used by the CLI).

The engine stores payloads as sent; a node checks them on produce
(:mod:`raftlog.records.payload_check`). Payloads written by the Spark
connector are Arrow IPC streams; payloads written by ``raftlog produce`` (and
by :func:`frame_records`) hold ``record_count`` records, each::

    length  uint32 little-endian
    value   ``length`` bytes

A payload that does not parse this way is treated as one opaque value.

Records with keys, headers or their own timestamps (Kafka's record model;
``raftlog produce --key-separator/--header``, and the Spark sink for a
DataFrame of Kafka's columns) use the *keyed* layout instead, columnar so that
it (de)serializes with array operations. All integers little-endian::

    magic         4 bytes  b"\xffRK1"
    count         uint32   number of records (= the batch's record count)
    flags         uint32   1: keys, 2: timestamps, 4: headers
    key_lens      int32[count]     if flags & 1   (-1: null key)
    value_lens    int32[count]                    (-1: null value)
    timestamps    int64[count]     if flags & 2   (ms since the epoch, CreateTime)
    header_counts uint32[count]    if flags & 4
    hkey_lens     uint32[H]        if flags & 4   (H = sum of header_counts)
    hvalue_lens   int32[H]         if flags & 4   (-1: null header value)
    then the bytes: all keys, all values, all header keys (UTF-8), all header values,
    each in record order, nulls taking no bytes.

A record without its own timestamp has its batch's append time (LogAppendTime).
"""

from __future__ import annotations

import dataclasses
import struct

_LEN = struct.Struct("<I")


def frame_records(values: list[bytes]) -> bytes:
    """One payload holding ``values``; pass ``len(values)`` as its record count."""
    return b"".join(_LEN.pack(len(v)) + bytes(v) for v in values)


def unframe_records(payload: bytes, record_count: int) -> list[bytes] | None:
    """The values framed in ``payload``, or None when it is not exactly
    ``record_count`` length-prefixed records (e.g. an Arrow IPC payload)."""
    out: list[bytes] = []
    pos = 0
    view = memoryview(payload)
    while pos < len(view):
        if pos + 4 > len(view):
            return None
        (n,) = _LEN.unpack_from(view, pos)
        pos += 4
        if pos + n > len(view):
            return None
        out.append(bytes(view[pos : pos + n]))
        pos += n
    return out if len(out) == record_count else None


# --- keyed records (keys, headers, timestamps) -----------------------------------------

KEYED_MAGIC = b"\xffRK1"
"""First 4 bytes of a keyed payload. Read as a plain payload's length prefix it is
0x314B52FF (~826 MB), beyond the engine's 64 MiB payload limit, so the two layouts
can never be confused."""

FLAG_KEYS = 1
FLAG_TIMESTAMPS = 2
FLAG_HEADERS = 4

_HEAD = struct.Struct("<4sII")

Header = tuple[str, bytes | None]


@dataclasses.dataclass(frozen=True)
class Record:
    """One record as Kafka's model has it. ``timestamp_ms`` None: the batch's append time."""

    value: bytes | None
    key: bytes | None = None
    headers: tuple[Header, ...] = ()
    timestamp_ms: int | None = None


def frame_keyed(records: list[Record]) -> bytes:
    """A keyed payload (layout in the module docstring) holding ``records``.

    Columnar, so that readers and writers can (de)serialize it with array
    operations: all lengths first, then all bytes. Sections whose flag is
    clear (no record has a key / a timestamp / headers) are left out.
    """
    n = len(records)
    flags = 0
    if any(r.key is not None for r in records):
        flags |= FLAG_KEYS
    if any(r.timestamp_ms is not None for r in records):
        flags |= FLAG_TIMESTAMPS
    if any(r.headers for r in records):
        flags |= FLAG_HEADERS
    parts = [_HEAD.pack(KEYED_MAGIC, n, flags)]

    def lens(values: list[bytes | None]) -> bytes:
        return struct.pack(f"<{len(values)}i", *(-1 if v is None else len(v) for v in values))

    if flags & FLAG_KEYS:
        parts.append(lens([r.key for r in records]))
    parts.append(lens([r.value for r in records]))
    if flags & FLAG_TIMESTAMPS:
        if any(r.timestamp_ms is None for r in records):
            raise ValueError("either every record of a payload has a timestamp, or none has")
        parts.append(struct.pack(f"<{n}q", *(r.timestamp_ms for r in records)))
    hkeys: list[bytes] = []
    hvals: list[bytes | None] = []
    if flags & FLAG_HEADERS:
        parts.append(struct.pack(f"<{n}I", *(len(r.headers) for r in records)))
        for r in records:
            for k, v in r.headers:
                hkeys.append(k.encode("utf-8"))
                hvals.append(v)
        parts.append(struct.pack(f"<{len(hkeys)}I", *(len(k) for k in hkeys)))
        parts.append(lens(hvals))
    if flags & FLAG_KEYS:
        parts.extend(r.key for r in records if r.key is not None)
    parts.extend(r.value for r in records if r.value is not None)
    parts.extend(hkeys)
    parts.extend(v for v in hvals if v is not None)
    return b"".join(parts)


def unframe_keyed(payload: bytes, record_count: int) -> list[Record] | None:
    """The records of a keyed payload, or None when ``payload`` is not one holding
    exactly ``record_count`` records."""
    view = memoryview(payload)
    if len(view) < _HEAD.size or bytes(view[:4]) != KEYED_MAGIC:
        return None
    _, n, flags = _HEAD.unpack_from(view, 0)
    if n != record_count or flags & ~(FLAG_KEYS | FLAG_TIMESTAMPS | FLAG_HEADERS):
        return None
    # each record takes at least its value length: a count its bytes cannot hold is
    # refused before anything is sized by it (2**31 records claimed in 12 bytes)
    if _HEAD.size + 4 * n > len(view):
        return None
    pos = _HEAD.size
    try:

        def take(fmt: str, count: int) -> tuple[int, ...]:
            nonlocal pos
            out = struct.unpack_from(f"<{count}{fmt}", view, pos)
            pos += struct.calcsize(f"<{count}{fmt}")
            return out

        key_lens = take("i", n) if flags & FLAG_KEYS else (-1,) * n
        val_lens = take("i", n)
        stamps = take("q", n) if flags & FLAG_TIMESTAMPS else (None,) * n
        hcounts = take("I", n) if flags & FLAG_HEADERS else (0,) * n
        total_h = sum(hcounts)
        if pos + 8 * total_h > len(view):
            return None
        hk_lens = take("I", total_h) if flags & FLAG_HEADERS else ()
        hv_lens = take("i", total_h) if flags & FLAG_HEADERS else ()
    except struct.error:
        return None

    def cut(lengths: tuple[int, ...]) -> list[bytes | None] | None:
        nonlocal pos
        out: list[bytes | None] = []
        for length in lengths:
            if length < 0:
                out.append(None)
                continue
            if pos + length > len(view):
                return None
            out.append(bytes(view[pos : pos + length]))
            pos += length
        return out

    keys, values = cut(key_lens), cut(val_lens)
    hkeys, hvals = cut(hk_lens), cut(hv_lens)
    if keys is None or values is None or hkeys is None or hvals is None or pos != len(view):
        return None
    records = []
    h = 0
    for i in range(n):
        headers = tuple(
            ((hkeys[j] or b"").decode("utf-8", "replace"), hvals[j])
            for j in range(h, h + hcounts[i])
        )
        h += hcounts[i]
        records.append(Record(values[i], keys[i], headers, stamps[i]))
    return records


def unframe_any(payload: bytes, record_count: int) -> list[Record] | None:
    """Records of a keyed payload or of a plain one (values only); None for neither."""
    keyed = unframe_keyed(payload, record_count)
    if keyed is not None:
        return keyed
    plain = unframe_records(payload, record_count)
    return None if plain is None else [Record(v) for v in plain]
