"""What a data batch's payload must be for its record count: the check a node makes on
produce, before a batch enters the log, and the bounds every reader keeps to.

Three layouts carry records, told apart by their first bytes (after the codec is undone,
with a bounded decompression: :func:`raftlog.records.compression.decompress`):

- *keyed* (``raftlog.records.framing``, magic ``b"\\xffRK1"``): checked in full, in one
  vectorised pass (:func:`keyed_layout`): its count equals the batch's, every section and
  every length fits, the bytes end exactly where the lengths say, header keys are UTF-8.
- *Arrow IPC stream* (continuation marker ``0xFFFFFFFF``, what the Spark sink writes):
  its messages are walked without reading their bodies (:func:`arrow_rows`), the rows of
  its record batches must add up to the record count, and IPC body compression is
  refused (its buffers declare their own decompressed sizes: a bomb that the codec cap
  would not see). The body itself is then read and validated by pyarrow, zero-copy.
- on a *typed* topic (one with an Arrow schema that does not mark raw records:
  :mod:`raftlog.records.topic_schema`) every payload must be an Arrow IPC stream of
  exactly one record batch with the topic's columns, which is all the Spark source reads.
- anything else is a *plain* payload: ``record_count`` length-prefixed records
  (:func:`raftlog.records.framing.frame_records`) or, when it does not parse so, one
  opaque value. The two cannot be told apart, so the node checks only the bound that
  holds for both: at least one byte per record (``count <= max(1, len)``).

A refusal is a :class:`PayloadError` (a ValueError) saying what does not fit; the node
adds the topic, partition and batch index, a reader the topic, partition and offset.
"""

from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa

from raftlog.records.compression import decompress
from raftlog.records.framing import FLAG_HEADERS, FLAG_KEYS, FLAG_TIMESTAMPS, KEYED_MAGIC
from raftlog.records.topic_schema import schema_shape
from raftlog.storage.batch import MAX_PAYLOAD_BYTES, SUPPORTED_COMPRESSION, Compression

__all__ = [
    "ARROW_MARKER",
    "KeyedLayout",
    "PayloadError",
    "arrow_rows",
    "check_payload",
    "keyed_layout",
]

ARROW_MARKER = b"\xff\xff\xff\xff"
"""First 4 bytes of an Arrow IPC stream (the continuation marker of its first message)."""

_HEAD = struct.Struct("<4sII")
_ALL_FLAGS = FLAG_KEYS | FLAG_TIMESTAMPS | FLAG_HEADERS


class PayloadError(ValueError):
    """A payload does not hold its record count in any layout readers decode."""


class KeyedLayout:
    """The sections of a checked keyed payload, as numpy views of it (no copy).

    ``key_lens`` (None without keys), ``value_lens`` and ``hv_lens`` are int32 (-1:
    null); ``hk_lens`` uint32; ``timestamps`` int64 (None without); ``header_counts``
    uint32 (None without headers); ``data_start`` is where the bytes begin. Invariant:
    the lengths add up to exactly the bytes after ``data_start``.
    """

    __slots__ = (
        "data_start",
        "header_counts",
        "hk_lens",
        "hv_lens",
        "key_lens",
        "timestamps",
        "value_lens",
    )
    data_start: int
    key_lens: np.ndarray | None
    value_lens: np.ndarray
    timestamps: np.ndarray | None
    header_counts: np.ndarray | None
    hk_lens: np.ndarray | None
    hv_lens: np.ndarray | None

    def __init__(self, **sections: object) -> None:
        for name, value in sections.items():
            setattr(self, name, value)


def keyed_layout(payload: bytes | memoryview, record_count: int) -> KeyedLayout:
    """The sections of a keyed payload holding exactly ``record_count`` records.

    Sizes are checked against the payload's length before any array is made, so a
    count claiming 2**31 records in 12 bytes allocates nothing. PayloadError names what
    does not fit.
    """
    size = len(payload)
    if size < _HEAD.size:
        raise PayloadError(f"keyed payload of {size} bytes is shorter than its 12-byte head")
    magic, count, flags = _HEAD.unpack_from(payload, 0)
    if magic != KEYED_MAGIC:
        raise PayloadError("payload does not start with the keyed magic")
    if count != record_count:
        raise PayloadError(f"keyed payload holds {count} records, the batch claims {record_count}")
    if flags & ~_ALL_FLAGS:
        raise PayloadError(f"keyed payload has unknown flags {flags:#x}")
    per_record = 4 + 4 * bool(flags & FLAG_KEYS) + 8 * bool(flags & FLAG_TIMESTAMPS)
    per_record += 4 * bool(flags & FLAG_HEADERS)
    if _HEAD.size + count * per_record > size:
        raise PayloadError(
            f"record_count {count} does not fit a keyed payload of {size} bytes "
            f"(each record needs at least {per_record} bytes)"
        )
    pos = _HEAD.size

    def take(dtype: str, n: int) -> np.ndarray:
        nonlocal pos
        arr = np.frombuffer(payload, dtype, count=n, offset=pos)
        pos += arr.nbytes
        return arr

    key_lens = take("<i4", count) if flags & FLAG_KEYS else None
    value_lens = take("<i4", count)
    timestamps = take("<i8", count) if flags & FLAG_TIMESTAMPS else None
    header_counts = None
    if flags & FLAG_HEADERS:
        header_counts = take("<u4", count)
        headers = int(header_counts.sum(dtype=np.uint64))
        if pos + headers * 8 > size:
            raise PayloadError(
                f"keyed payload of {size} bytes cannot hold its {headers} headers "
                "(each needs at least 8 bytes)"
            )
        hk_lens = take("<u4", headers)
        hv_lens = take("<i4", headers)
    else:
        hk_lens = hv_lens = np.zeros(0, "<i4")
    data = 0
    for name, lens in (("key", key_lens), ("value", value_lens), ("header value", hv_lens)):
        if lens is None:
            continue
        if len(lens) and int(lens.min()) < -1:
            raise PayloadError(f"keyed payload has a {name} length below -1 (null)")
        data += _non_null(lens)
    key_bytes = int(hk_lens.sum(dtype=np.int64))
    data += key_bytes
    if pos + data != size:
        raise PayloadError(
            f"keyed payload's lengths add up to {data} bytes of data, but {size - pos} "
            "follow its sections"
        )
    if key_bytes:
        _check_utf8(payload, size - key_bytes - _non_null(hv_lens), hk_lens)
    return KeyedLayout(
        data_start=pos,
        key_lens=key_lens,
        value_lens=value_lens,
        timestamps=timestamps,
        header_counts=header_counts,
        hk_lens=hk_lens if flags & FLAG_HEADERS else None,
        hv_lens=hv_lens if flags & FLAG_HEADERS else None,
    )


def _non_null(lens: np.ndarray) -> int:
    return int(np.maximum(lens, 0).sum(dtype=np.int64))


def _check_utf8(payload: bytes | memoryview, start: int, lens: np.ndarray) -> None:
    """Header keys are strings: each must be valid UTF-8 on its own (readers build an
    Arrow string array of them, which must hold valid UTF-8)."""
    offsets = np.zeros(len(lens) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    body = memoryview(payload)[start : start + int(offsets[-1])]
    keys = pa.LargeStringArray.from_buffers(len(lens), pa.py_buffer(offsets), pa.py_buffer(body))
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        raise PayloadError("keyed payload has a header key that is not UTF-8") from None


# -- Arrow IPC -------------------------------------------------------------------

_U8 = struct.Struct("<B")
_U16 = struct.Struct("<H")
_I32 = struct.Struct("<i")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_SCHEMA, _DICTIONARY_BATCH, _RECORD_BATCH = 1, 2, 3


class _Table:
    """One flatbuffer table (Arrow's Message.fbs), read with bounds checks only."""

    def __init__(self, buf: bytes, pos: int) -> None:
        self.buf, self.pos = buf, pos
        self.vtable = pos - _I32.unpack_from(buf, pos)[0]
        self.vtsize = _U16.unpack_from(buf, self.vtable)[0]

    def _at(self, field: int) -> int:
        """Where ``field`` is stored, or 0 when absent (its default)."""
        slot = 4 + 2 * field
        if slot + 2 > self.vtsize:
            return 0
        off = _U16.unpack_from(self.buf, self.vtable + slot)[0]
        return self.pos + off if off else 0

    def scalar(self, field: int, fmt: struct.Struct) -> int:
        at = self._at(field)
        return fmt.unpack_from(self.buf, at)[0] if at else 0

    def table(self, field: int) -> _Table | None:
        at = self._at(field)
        return _Table(self.buf, at + _U32.unpack_from(self.buf, at)[0]) if at else None


def arrow_rows(payload: bytes | memoryview) -> int:
    """The rows of an Arrow IPC stream's record batches, read from their metadata alone.

    PayloadError when the stream is malformed, holds no schema first, or compresses its
    bodies (Arrow IPC buffer compression: each buffer declares its own decompressed
    size, so reading one could allocate without a bound).
    """
    reader = pa.ipc.MessageReader.open_stream(pa.py_buffer(payload))
    rows = 0
    first = True
    for _ in range(len(payload) // 8 + 1):  # a message takes at least 8 bytes
        try:
            message = reader.read_next_message()
        except StopIteration:
            break
        except (pa.ArrowException, OSError) as exc:
            raise PayloadError(f"Arrow IPC payload is malformed: {exc}") from None
        meta = message.metadata.to_pybytes()
        try:
            root = _Table(meta, _U32.unpack_from(meta, 0)[0])
            kind = root.scalar(1, _U8)
            header = root.table(2)
            if first != (kind == _SCHEMA) or header is None:
                raise PayloadError("Arrow IPC payload does not start with one schema")
            first = False
            if kind == _DICTIONARY_BATCH:
                header = header.table(1)
            if kind in (_DICTIONARY_BATCH, _RECORD_BATCH) and header is not None:
                if header.table(3) is not None:
                    raise PayloadError(
                        "Arrow IPC payload compresses its body; only uncompressed IPC "
                        "is accepted (compress the batch with its codec instead)"
                    )
                if kind == _RECORD_BATCH:
                    length = header.scalar(0, _I64)
                    if length < 0:
                        raise PayloadError(f"Arrow IPC record batch has {length} rows")
                    rows += length
            elif kind != _SCHEMA:
                raise PayloadError(f"Arrow IPC payload holds a message of type {kind}")
        except struct.error:
            raise PayloadError("Arrow IPC payload has malformed message metadata") from None
    if first:
        raise PayloadError("Arrow IPC payload holds no schema")
    return rows


def _check_names(fields: list[pa.Field]) -> None:
    """Field names, nested ones too, are strings to every reader: pyarrow decodes each
    as UTF-8 when asked for it (UnicodeDecodeError otherwise)."""
    for _ in range(64):  # nesting deeper than this is no schema a writer sends
        if not fields:
            return
        fields = [
            f.type.field(i) for f in fields if f.name is not None for i in range(f.type.num_fields)
        ]
    raise PayloadError("Arrow IPC payload nests its schema deeper than 64 levels")


def _check_arrow(
    payload: bytes | memoryview, record_count: int, schema: pa.Schema | None = None
) -> None:
    rows = arrow_rows(payload)
    if rows != record_count:
        raise PayloadError(f"Arrow IPC payload holds {rows} rows, the batch claims {record_count}")
    batches = 0
    try:
        reader = pa.ipc.open_stream(pa.py_buffer(payload))
        _check_names(list(reader.schema))
        for batch in reader:
            batch.validate(full=True)
            batches += 1
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise PayloadError(f"Arrow IPC payload is invalid: {exc}") from None
    if schema is None:
        return
    if batches != 1:
        raise PayloadError(
            f"Arrow IPC payload holds {batches} record batches; a typed topic's payload "
            "holds exactly 1"
        )
    if schema_shape(reader.schema) != schema_shape(schema):
        raise PayloadError(
            "Arrow IPC payload's columns do not match the topic's schema: expected "
            f"{_columns(schema)}, got {_columns(reader.schema)}"
        )


def _columns(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name}: {f.type}" for f in schema) + ")"


# -- the check -------------------------------------------------------------------


def check_payload(
    payload: bytes | memoryview,
    record_count: int,
    compression: int = Compression.NONE,
    *,
    max_decompressed: int = MAX_PAYLOAD_BYTES,
    schema: pa.Schema | None = None,
) -> bytes | memoryview:
    """Check that ``payload`` (compressed with ``compression``) holds ``record_count``
    records in a layout readers decode (see the module doc); return it decompressed.

    ``schema``: the topic's, when it is typed (``topic_schema.typed_schema``): then the
    payload must be an Arrow IPC stream of one record batch with its columns.
    Decompression stops past ``max_decompressed`` bytes, so memory stays bounded
    whatever the payload claims. PayloadError says what does not fit.
    """
    if record_count < 1:
        raise PayloadError(f"record_count must be >= 1, got {record_count}")
    if compression not in SUPPORTED_COMPRESSION:
        allowed = ", ".join(c.name.lower() for c in SUPPORTED_COMPRESSION)
        raise PayloadError(f"compression: expected one of {allowed}, got codec id {compression}")
    try:
        data = decompress(Compression(compression), payload, limit=max_decompressed)
    except ValueError as exc:
        raise PayloadError(str(exc)) from None
    head = bytes(data[:4])
    if schema is not None and head != ARROW_MARKER:
        layout = "a keyed" if head == KEYED_MAGIC else "a plain"
        raise PayloadError(
            f"the topic is typed (it has an Arrow schema): a payload must be an Arrow IPC "
            f"stream of one record batch with its columns {_columns(schema)}, this is "
            f"{layout} payload"
        )
    if head == KEYED_MAGIC:
        keyed_layout(data, record_count)
    elif head == ARROW_MARKER:
        _check_arrow(data, record_count, schema)
    elif record_count > max(1, len(data)):
        raise PayloadError(
            f"record_count {record_count} does not fit a payload of {len(data)} bytes "
            "(each record needs at least 1 byte)"
        )
    return data
