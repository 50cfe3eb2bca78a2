"""The wire codec: frozen dataclasses to compact binary and back.

Every message on the wire (peer RPC and client calls) is one registered
dataclass. A frame is::

    type_id  uint16   the message's registered id
    body     ...      the dataclass's fields in declaration order

Field encodings (little-endian, driven by the field's type annotation):

- ``int``: int64; ``float``: float64; ``bool``: one byte, 0 or 1;
- ``str``: uint32 length + UTF-8; ``bytes``: uint32 length + raw bytes;
  ``bytes | memoryview``: the same bytes, decoded as a read-only view of the
  frame when the frame is ``bytes`` (a payload is not copied out of it);
- ``RecordBatch``: its own encoded form (header + payload, self-delimiting).
  Payloads pass through untouched: only the 52-byte header is read, and its
  CRC checked, never the records inside. A field marked
  ``dataclasses.field(metadata={"crc": "reader"})`` (a fetch answer's batches) is
  decoded without the CRC check: its reader checks each batch
  (``RecordBatch.check_crc``), so that it can name the bad one and read past it;
- ``list[T]``: uint32 count + items; ``T | None``: one presence byte + T;
- a nested dataclass: its fields, inline; an ``IntEnum``: int64.

Plans (the per-class list of encode/decode steps) are built once per class
and cached; runs of fixed-size fields are packed with one ``struct.Struct``.

Range checks at the edge: every ``int`` field (and every item of a
``list[int]``) has an allowed range, checked when it is decoded, so that no
value past decoding can overflow a header field or a counter. The range comes
from the field's metadata (``dataclasses.field(metadata={"range": (lo, hi)})``)
when given, else from :data:`FIELD_RANGES` by field name (counts, sequences,
epochs, node and partition ids, acks...), else :data:`DEFAULT_RANGE`: ``-1``
(Kafka's "none") up to int64's maximum, so a negative offset, term or id is
refused everywhere. Record batches inside a message get the same treatment for
their header (base offset, term, producer id, epoch, sequence, timestamp, and
a last offset that fits int64). Encoding does not check ranges: the receiver
is the edge.

Contract: :func:`decode` of any byte string either returns a message whose
re-encoding is the same bytes, every int field within its allowed range, or
raises :class:`CodecError` naming the field and what was expected (for a range:
``ProduceRequest.batches[0].record_count: 2147483648 is out of range, allowed
1..2147483647``). It never raises anything else, and never allocates more than
the input can describe (list counts are bounded by the bytes left).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import struct
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, overload

from raftlog.storage.batch import HEADER_SIZE, BatchError, RecordBatch, frozen_buffer

__all__ = [
    "CodecError",
    "decode",
    "decode_body",
    "encode",
    "encode_body",
    "register",
    "registered_types",
    "type_of",
]

T = TypeVar("T")


class CodecError(ValueError):
    """A body could not be decoded (or a value could not be encoded).

    The message names the field path (``AppendEntries.batches[3]``) and what
    was expected, so the server can return it verbatim in an HTTP 400.
    """


_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_I64 = struct.Struct("<q")
_F64 = struct.Struct("<d")
_U8 = struct.Struct("<B")

I64_MAX = (1 << 63) - 1
I32_MAX = (1 << 31) - 1
I16_MAX = (1 << 15) - 1

DEFAULT_RANGE = (-1, I64_MAX)
"""An int field without a rule: -1 ("none") or a non-negative int64."""

FIELD_RANGES: dict[str, tuple[int, int]] = {
    # counts and sizes (a batch's record count is an int32 >= 1 in its header)
    "record_count": (1, I32_MAX),
    "partitions": (-1, I32_MAX),
    "replication_factor": (-1, I16_MAX),
    "max_bytes": (1, I64_MAX),
    # producer identity: epoch is an int16 and sequences int32 in the batch header
    "producer_epoch": (-1, I16_MAX),
    "epoch": (-1, I16_MAX),
    "first_sequence": (-1, I32_MAX),
    "sequence": (-1, I32_MAX),
    "last_sequence": (-1, I32_MAX),
    # ids
    "partition": (-1, I32_MAX),
    "group": (-1, I32_MAX),
    "group_id": (-1, I32_MAX),
    "group_ids": (0, I32_MAX),
    "node_id": (-1, I32_MAX),
    "source_node": (-1, I32_MAX),
    "target_node": (-1, I32_MAX),
    "leader": (-1, I32_MAX),
    "leader_id": (-1, I32_MAX),
    "controller_leader": (-1, I32_MAX),
    "replicas": (0, I32_MAX),
    "nodes": (0, I32_MAX),
    # enumerations carried as ints
    "acks": (-1, 1),
    "isolation": (0, 1),
    "result": (0, 2),
}
"""Allowed ranges of int fields by name (see the module docstring for precedence)."""

# An upper bound of any single str/bytes field, well above a batch's payload
# limit: anything longer is a corrupt length, not data.
MAX_FIELD_BYTES = 128 * 1024 * 1024

_Encoder = Callable[[Any, list[bytes | memoryview], str], None]
# A decoder takes (buffer, position, field path) and returns (value, new position).
_Decoder = Callable[[memoryview, int, str], tuple[Any, int]]


@dataclasses.dataclass(frozen=True, slots=True)
class _Codec:
    encode: _Encoder
    decode: _Decoder
    min_size: int  # the fewest bytes one value occupies; bounds list counts


_registry_by_id: dict[int, type] = {}
_registry_by_type: dict[type, int] = {}
_plans: dict[type, _Codec] = {}


def register(type_id: int, cls: type[T] | None = None) -> Any:
    """Register a dataclass under ``type_id`` (usable as a class decorator).

    Ids are part of the wire format: never reuse or renumber one. Registering
    the same class twice under the same id is a no-op; anything else conflicting
    raises ValueError.
    """

    def _do(c: type[T]) -> type[T]:
        if not dataclasses.is_dataclass(c):
            raise TypeError(f"{c.__name__} is not a dataclass")
        if not 0 <= type_id <= 0xFFFF:
            raise ValueError(f"type_id must be in 0..65535, got {type_id}")
        existing = _registry_by_id.get(type_id)
        if existing is not None and existing is not c:
            raise ValueError(
                f"type id {type_id} is already {existing.__qualname__}, not {c.__qualname__}"
            )
        old_id = _registry_by_type.get(c)
        if old_id is not None and old_id != type_id:
            raise ValueError(f"{c.__qualname__} is already registered as {old_id}")
        _registry_by_id[type_id] = c
        _registry_by_type[c] = type_id
        return c

    return _do if cls is None else _do(cls)


def registered_types() -> dict[int, type]:
    """A copy of the id -> class registry."""
    return dict(_registry_by_id)


def type_of(buf: bytes | bytearray | memoryview) -> type:
    """The registered type of a framed message, read from its type id alone (the rest
    is not decoded); CodecError when the frame is too short or the id unknown."""
    if len(buf) < _U16.size:
        raise CodecError(f"message truncated: {len(buf)} bytes, expected a type id")
    (type_id,) = _U16.unpack_from(buf, 0)
    cls = _registry_by_id.get(type_id)
    if cls is None:
        raise CodecError(f"unknown message type id {type_id}")
    return cls


def encode(msg: Any, prefix: bytes = b"") -> bytes:
    """Frame a registered message: type id, then its body; after ``prefix`` when given
    (a stream frame's request id: joined in the one copy of the message's bytes)."""
    return b"".join(_encoded(msg, prefix))


GATHER_MIN_PART = 64 * 1024
"""In :func:`encode_parts`, a buffer at least this large is passed on as it is."""


def encode_parts(msg: Any, prefix: bytes = b"") -> list[bytes | memoryview]:
    """The bytes of :func:`encode` ``(msg, prefix)`` as buffers in order, for a gather
    write (``transport.writelines``: one writev, and no copy of a batch in user space).

    Buffers of ``GATHER_MIN_PART`` bytes or more (a batch's encoded form, a payload)
    are the caller's objects as they are; the small ones between them are joined, so
    a frame of many small fields is a few buffers, not thousands.
    """
    parts: list[bytes | memoryview] = []
    small: list[bytes | memoryview] = []
    for buf in _encoded(msg, prefix):
        if len(buf) < GATHER_MIN_PART:
            small.append(buf)
            continue
        if small:
            parts.append(b"".join(small))
            small = []
        parts.append(buf)
    if small:
        parts.append(b"".join(small))
    return parts


def _encoded(msg: Any, prefix: bytes) -> list[bytes | memoryview]:
    cls = type(msg)
    type_id = _registry_by_type.get(cls)
    if type_id is None:
        raise CodecError(f"{cls.__qualname__} is not a registered message type")
    out: list[bytes | memoryview] = [prefix, _U16.pack(type_id)]
    _plan(cls).encode(msg, out, cls.__name__)
    return out


@overload
def decode(buf: bytes | bytearray | memoryview) -> Any: ...
@overload
def decode(buf: bytes | bytearray | memoryview, expected: type[T]) -> T: ...
def decode(buf: bytes | bytearray | memoryview, expected: type[T] | None = None) -> Any:
    """Decode one framed message; the whole buffer must be consumed.

    When ``expected`` is given, a frame of another type is a CodecError.
    """
    view = memoryview(buf)
    if len(view) < 2:
        raise CodecError(
            f"message truncated: {len(view)} bytes, expected at least a 2-byte type id"
        )
    (type_id,) = _U16.unpack_from(view, 0)
    cls = _registry_by_id.get(type_id)
    if cls is None:
        raise CodecError(f"unknown message type id {type_id}")
    if expected is not None and cls is not expected:
        raise CodecError(
            f"expected a {expected.__name__} message, got {cls.__name__} (type id {type_id})"
        )
    return _decode_all(cls, view, 2)


def leading_int(buf: bytes | bytearray | memoryview) -> tuple[type, int] | None:
    """(message type, its first field) of a framed message whose first field is an
    int, read without decoding the rest (how a router finds a message's group); None
    when the type's first field is not an int. The field is range-checked as
    :func:`decode` checks it; a short or unknown frame is a CodecError."""
    view = memoryview(buf)
    if len(view) < 2 + _I64.size:
        raise CodecError(f"message truncated: {len(view)} bytes, expected a type id and a field")
    cls = type_of(view)
    first = _first_int_field(cls)
    if first is None:
        return None
    name, lo, hi = first
    (value,) = _I64.unpack_from(view, 2)
    if not lo <= value <= hi:
        raise _out_of_range(f"{cls.__name__}.{name}", value, lo, hi)
    return cls, value


@functools.cache
def _first_int_field(cls: type) -> tuple[str, int, int] | None:
    """(name, lo, hi) of ``cls``'s first field when it is an int (encoded first, as
    int64: the first value of the plan's first fixed run)."""
    fields = [f for f in dataclasses.fields(cls) if f.init]
    if not fields or typing.get_type_hints(cls)[fields[0].name] is not int:
        return None
    return (fields[0].name, *field_range(cls, fields[0].name))


def encode_body(msg: Any) -> bytes:
    """Encode a dataclass's fields without a frame (e.g. controller command payloads)."""
    out: list[bytes | memoryview] = []
    _plan(type(msg)).encode(msg, out, type(msg).__name__)
    return b"".join(out)


def decode_body(cls: type[T], buf: bytes | bytearray | memoryview) -> T:
    """Decode an unframed body of ``cls``; the whole buffer must be consumed."""
    return _decode_all(cls, memoryview(buf), 0)


def _decode_all(cls: type[T], view: memoryview, pos: int) -> T:
    try:
        value, end = _plan(cls).decode(view, pos, cls.__name__)
    except CodecError:
        raise
    except Exception as exc:  # a plan bug must still surface as a clear 400, not a crash
        raise CodecError(f"{cls.__name__}: undecodable body ({type(exc).__name__}: {exc})") from exc
    if end != len(view):
        raise CodecError(
            f"{cls.__name__}: {len(view) - end} unexpected trailing bytes after the message"
        )
    return value


# ---------------------------------------------------------------- plan building


def _need(view: memoryview, pos: int, n: int, path: str, what: str) -> None:
    if pos + n > len(view):
        raise CodecError(
            f"{path}: truncated, expected {what} ({n} bytes) at byte {pos}, "
            f"{max(0, len(view) - pos)} bytes left"
        )


def _enc_int(v: Any, out: list[bytes | memoryview], path: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise CodecError(f"{path}: expected an int, got {type(v).__name__}")
    try:
        out.append(_I64.pack(v))
    except struct.error as exc:
        raise CodecError(f"{path}: {v} does not fit in int64") from exc


def _dec_int(view: memoryview, pos: int, path: str) -> tuple[int, int]:
    _need(view, pos, 8, path, "an int64")
    return _I64.unpack_from(view, pos)[0], pos + 8


def _enc_float(v: Any, out: list[bytes | memoryview], path: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise CodecError(f"{path}: expected a float, got {type(v).__name__}")
    out.append(_F64.pack(float(v)))


def _dec_float(view: memoryview, pos: int, path: str) -> tuple[float, int]:
    _need(view, pos, 8, path, "a float64")
    return _F64.unpack_from(view, pos)[0], pos + 8


def _enc_bool(v: Any, out: list[bytes | memoryview], path: str) -> None:
    if not isinstance(v, bool):
        raise CodecError(f"{path}: expected a bool, got {type(v).__name__}")
    out.append(b"\x01" if v else b"\x00")


def _dec_bool(view: memoryview, pos: int, path: str) -> tuple[bool, int]:
    _need(view, pos, 1, path, "a bool byte")
    b = view[pos]
    if b > 1:
        raise CodecError(f"{path}: expected a bool byte 0 or 1, got {b}")
    return b == 1, pos + 1


def _dec_len(view: memoryview, pos: int, path: str, what: str) -> tuple[int, int]:
    _need(view, pos, 4, path, f"a uint32 {what}")
    n = _U32.unpack_from(view, pos)[0]
    return n, pos + 4


def _enc_bytes(v: Any, out: list[bytes | memoryview], path: str) -> None:
    if not isinstance(v, bytes | bytearray | memoryview):
        raise CodecError(f"{path}: expected bytes, got {type(v).__name__}")
    if len(v) > MAX_FIELD_BYTES:
        raise CodecError(f"{path}: {len(v)} bytes exceeds the limit of {MAX_FIELD_BYTES}")
    out.append(_U32.pack(len(v)))
    out.append(frozen_buffer(v))  # a payload is not copied to be sent


def _dec_span(view: memoryview, pos: int, path: str) -> tuple[memoryview, int]:
    """The bytes of a length-prefixed field, as a view of ``view``, and the end."""
    n, pos = _dec_len(view, pos, path, "byte length")
    if n > MAX_FIELD_BYTES:
        raise CodecError(f"{path}: byte length {n} exceeds the limit of {MAX_FIELD_BYTES}")
    _need(view, pos, n, path, f"{n} bytes")
    return view[pos : pos + n], pos + n


def _dec_bytes(view: memoryview, pos: int, path: str) -> tuple[bytes, int]:
    span, end = _dec_span(view, pos, path)
    return bytes(span), end


def _dec_view(view: memoryview, pos: int, path: str) -> tuple[bytes | memoryview, int]:
    span, end = _dec_span(view, pos, path)
    # a view only of a frozen (read-only) buffer: a reused receive buffer would change
    # under it (see storage.batch.frozen_buffer)
    return (span if view.readonly else bytes(span)), end


def _enc_str(v: Any, out: list[bytes | memoryview], path: str) -> None:
    if not isinstance(v, str):
        raise CodecError(f"{path}: expected a str, got {type(v).__name__}")
    _enc_bytes(v.encode("utf-8"), out, path)


def _dec_str(view: memoryview, pos: int, path: str) -> tuple[str, int]:
    raw, pos = _dec_bytes(view, pos, path)
    try:
        return raw.decode("utf-8"), pos
    except UnicodeDecodeError as exc:
        raise CodecError(f"{path}: expected UTF-8 text ({exc.reason} at byte {exc.start})") from exc


def _enc_batch(v: Any, out: list[bytes | memoryview], path: str) -> None:
    if not isinstance(v, RecordBatch):
        raise CodecError(f"{path}: expected a RecordBatch, got {type(v).__name__}")
    out.extend(v.encoded_parts())


def _out_of_range(path: str, value: int, lo: int, hi: int) -> CodecError:
    return CodecError(f"{path}: {value} is out of range, allowed {lo}..{hi}")


def _check_range(path: str, value: int, lo: int, hi: int) -> None:
    if not lo <= value <= hi:
        raise _out_of_range(path, value, lo, hi)


_BATCH_RANGES = (
    ("base_offset", 0, I64_MAX),
    ("term", -1, I64_MAX),
    ("producer_id", -1, I64_MAX),
    ("producer_epoch", -1, I16_MAX),
    ("first_sequence", -1, I32_MAX),
    ("timestamp_ms", -1, I64_MAX),
)


def _dec_batch(
    view: memoryview, pos: int, path: str, verify: bool = True
) -> tuple[RecordBatch, int]:
    try:
        batch, end = RecordBatch.decode(view, pos, verify=verify)
    except BatchError as exc:
        raise CodecError(f"{path}: {exc}") from exc
    for name, lo, hi in _BATCH_RANGES:
        _check_range(f"{path}.{name}", getattr(batch, name), lo, hi)
    if batch.base_offset > I64_MAX - batch.record_count + 1:
        raise CodecError(
            f"{path}.record_count: {batch.record_count} records from base_offset "
            f"{batch.base_offset} pass the largest offset {I64_MAX}"
        )
    return batch, end


def _ranged_int(lo: int, hi: int) -> _Codec:
    def dec(view: memoryview, pos: int, path: str) -> tuple[int, int]:
        value, pos = _dec_int(view, pos, path)
        _check_range(path, value, lo, hi)
        return value, pos

    return _Codec(_enc_int, dec, 8)


def field_range(cls: type, name: str) -> tuple[int, int]:
    """The allowed range of int field ``name`` of dataclass ``cls`` (see the module docstring)."""
    for f in dataclasses.fields(cls):
        if f.name == name and "range" in f.metadata:
            lo, hi = f.metadata["range"]
            return int(lo), int(hi)
    return FIELD_RANGES.get(name, DEFAULT_RANGE)


_FLOAT = _Codec(_enc_float, _dec_float, 8)
_BOOL = _Codec(_enc_bool, _dec_bool, 1)
_BYTES = _Codec(_enc_bytes, _dec_bytes, 4)
_VIEW = _Codec(_enc_bytes, _dec_view, 4)
_STR = _Codec(_enc_str, _dec_str, 4)
_BATCH = _Codec(_enc_batch, _dec_batch, HEADER_SIZE)
# a fetch answer's batches: the reader checks their CRCs (see the module doc)
_BATCH_FOR_READER = _Codec(
    _enc_batch, lambda view, pos, path: _dec_batch(view, pos, path, False), HEADER_SIZE
)

# Fixed-size scalars that can be merged into one struct: format char, checker.
_FIXED: dict[Any, str] = {int: "q", float: "d", bool: "?"}


def _list_codec(item: _Codec, item_name: str) -> _Codec:
    def enc(v: Any, out: list[bytes | memoryview], path: str) -> None:
        if not isinstance(v, list | tuple):
            raise CodecError(f"{path}: expected a list of {item_name}, got {type(v).__name__}")
        out.append(_U32.pack(len(v)))
        for i, x in enumerate(v):
            item.encode(x, out, f"{path}[{i}]")

    def dec(view: memoryview, pos: int, path: str) -> tuple[list[Any], int]:
        n, pos = _dec_len(view, pos, path, "list count")
        left = len(view) - pos
        if n * max(item.min_size, 1) > left:
            raise CodecError(
                f"{path}: list count {n} of {item_name} cannot fit in the {left} bytes left"
            )
        items = []
        for i in range(n):
            x, pos = item.decode(view, pos, f"{path}[{i}]")
            items.append(x)
        return items, pos

    return _Codec(enc, dec, 4)


def _optional_codec(item: _Codec, item_name: str) -> _Codec:
    def enc(v: Any, out: list[bytes | memoryview], path: str) -> None:
        if v is None:
            out.append(b"\x00")
        else:
            out.append(b"\x01")
            item.encode(v, out, path)

    def dec(view: memoryview, pos: int, path: str) -> tuple[Any, int]:
        _need(view, pos, 1, path, f"a presence byte for an optional {item_name}")
        flag = view[pos]
        if flag == 0:
            return None, pos + 1
        if flag != 1:
            raise CodecError(f"{path}: expected presence byte 0 or 1, got {flag}")
        return item.decode(view, pos + 1, path)

    return _Codec(enc, dec, 1)


def _enum_codec(cls: type[enum.IntEnum]) -> _Codec:
    def enc(v: Any, out: list[bytes | memoryview], path: str) -> None:
        try:
            out.append(_I64.pack(int(cls(v))))
        except ValueError as exc:
            raise CodecError(f"{path}: {v!r} is not a {cls.__name__}") from exc

    def dec(view: memoryview, pos: int, path: str) -> tuple[Any, int]:
        raw, pos = _dec_int(view, pos, path)
        try:
            return cls(raw), pos
        except ValueError as exc:
            names = ", ".join(f"{m.name}={m.value}" for m in cls)
            raise CodecError(f"{path}: {raw} is not a {cls.__name__} (one of {names})") from exc

    return _Codec(enc, dec, 8)


def _codec_for(
    tp: Any, int_range: tuple[int, int] = DEFAULT_RANGE, reader_checks_crc: bool = False
) -> _Codec:
    if tp is int:
        return _ranged_int(*int_range)
    if tp is float:
        return _FLOAT
    if tp is bool:
        return _BOOL
    if tp is bytes:
        return _BYTES
    if tp == bytes | memoryview:
        return _VIEW
    if tp is str:
        return _STR
    if tp is RecordBatch:
        return _BATCH_FOR_READER if reader_checks_crc else _BATCH
    if isinstance(tp, type) and issubclass(tp, enum.IntEnum):
        return _enum_codec(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _plan(tp)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is list and len(args) == 1:
        return _list_codec(
            _codec_for(args[0], int_range, reader_checks_crc),
            getattr(args[0], "__name__", str(args[0])),
        )
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            return _optional_codec(
                _codec_for(rest[0], int_range), getattr(rest[0], "__name__", str(rest[0]))
            )
    raise TypeError(f"the wire codec cannot encode fields of type {tp!r}")


def _plan(cls: type) -> _Codec:
    plan = _plans.get(cls)
    if plan is not None:
        return plan
    if not dataclasses.is_dataclass(cls):
        raise CodecError(f"{getattr(cls, '__qualname__', cls)!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]

    # Steps: ("fixed", Struct, [names], [types]) or ("var", name, codec).
    steps: list[tuple[Any, ...]] = []
    run_names: list[str] = []
    run_types: list[Any] = []

    def flush_run() -> None:
        if run_names:
            fmt = "<" + "".join(_FIXED[t] for t in run_types)
            # byte offsets of bool fields, validated on decode ("<" means no padding)
            bools = [
                (n, struct.calcsize("<" + "".join(_FIXED[t] for t in run_types[:i])))
                for i, (n, t) in enumerate(zip(run_names, run_types, strict=True))
                if t is bool
            ]
            # (index in the run, name, lo, hi) of every int field, range-checked on decode
            ranges = [
                (i, n, *field_range(cls, n))
                for i, (n, t) in enumerate(zip(run_names, run_types, strict=True))
                if t is int
            ]
            steps.append(
                ("fixed", struct.Struct(fmt), list(run_names), list(run_types), bools, ranges)
            )
            run_names.clear()
            run_types.clear()

    for f in fields:
        tp = hints[f.name]
        if tp in _FIXED:
            run_names.append(f.name)
            run_types.append(tp)
        else:
            flush_run()
            reader_checks_crc = f.metadata.get("crc") == "reader"
            steps.append(
                ("var", f.name, _codec_for(tp, field_range(cls, f.name), reader_checks_crc))
            )
    flush_run()

    name = cls.__name__
    min_size = sum(s[1].size if s[0] == "fixed" else s[2].min_size for s in steps)

    def enc(msg: Any, out: list[bytes | memoryview], path: str) -> None:
        if type(msg) is not cls:
            raise CodecError(f"{path}: expected a {name}, got {type(msg).__name__}")
        for step in steps:
            if step[0] == "fixed":
                values = []
                for fname, ftype in zip(step[2], step[3], strict=True):
                    v = getattr(msg, fname)
                    # bool is an int subclass; keep the two distinct on the wire
                    if ftype is bool and not isinstance(v, bool):
                        raise CodecError(f"{path}.{fname}: expected a bool, got {type(v).__name__}")
                    if ftype is int and (isinstance(v, bool) or not isinstance(v, int)):
                        raise CodecError(f"{path}.{fname}: expected an int, got {type(v).__name__}")
                    if ftype is float and (isinstance(v, bool) or not isinstance(v, int | float)):
                        raise CodecError(
                            f"{path}.{fname}: expected a float, got {type(v).__name__}"
                        )
                    values.append(v)
                try:
                    out.append(step[1].pack(*values))
                except struct.error as exc:
                    for fname, ftype, v in zip(step[2], step[3], values, strict=True):
                        if ftype is int and not -(1 << 63) <= v <= I64_MAX:
                            raise CodecError(f"{path}.{fname}: {v} does not fit in int64") from exc
                    raise CodecError(f"{path}.{{{','.join(step[2])}}}: {exc}") from exc
            else:
                step[2].encode(getattr(msg, step[1]), out, f"{path}.{step[1]}")

    def dec(view: memoryview, pos: int, path: str) -> tuple[Any, int]:
        kwargs: dict[str, Any] = {}
        for step in steps:
            if step[0] == "fixed":
                st: struct.Struct = step[1]
                if pos + st.size > len(view):
                    raise CodecError(
                        f"{path}.{step[2][0]}: truncated, expected {st.size} bytes of "
                        f"fixed fields ({', '.join(step[2])}) at byte {pos}, "
                        f"{max(0, len(view) - pos)} bytes left"
                    )
                for fname, off in step[4]:
                    if view[pos + off] > 1:
                        raise CodecError(
                            f"{path}.{fname}: expected a bool byte 0 or 1, got {view[pos + off]}"
                        )
                values = st.unpack_from(view, pos)
                for i, fname, lo, hi in step[5]:
                    if not lo <= values[i] <= hi:
                        raise _out_of_range(f"{path}.{fname}", values[i], lo, hi)
                kwargs.update(zip(step[2], values, strict=True))
                pos += st.size
            else:
                kwargs[step[1]], pos = step[2].decode(view, pos, f"{path}.{step[1]}")
        try:
            return cls(**kwargs), pos
        except (TypeError, ValueError) as exc:
            raise CodecError(f"{path}: invalid {name}: {exc}") from exc

    plan = _Codec(enc, dec, min_size)
    _plans[cls] = plan
    return plan
