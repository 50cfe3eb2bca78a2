"""The record batch: the unit of the log, of replication and of the wire.

A batch is a fixed 52-byte little-endian header followed by an opaque payload.
The storage and consensus layers never decode payloads (for data written from
Spark the payload is one Arrow IPC stream); only control batches (markers, raft
configuration, controller commands) carry payloads that the engine itself reads.
A node checks a produced data payload against its record count once, before it
enters the log (``raftlog.records.payload_check``).

Header layout (all little-endian)::

    crc            uint32   CRC32C over every header byte after this field, then the payload
    base_offset    int64    offset of the first record; offsets count records
    record_count   int32    >= 1
    term           int64    raft term of the leader that appended the batch
    attributes     int16    bit 0: transactional; bits 1-4: BatchKind; bits 5-7: the
                            payload's Compression (Kafka's codec ids)
    producer_id    int64    -1 when not an idempotent/transactional producer
    producer_epoch int16    -1 when none
    first_sequence int32    -1 when none
    timestamp_ms   int64    append time on the leader (ms since the epoch)
    payload_len    int32    bytes of payload that follow

The engine never rewrites a payload: a compressed payload is stored, replicated and
checksummed as the writer sent it (the CRC covers the compressed bytes), and
readers decompress (``raftlog.records.compression``; a node decompresses a produced
payload once, bounded, only to check it). Kafka keeps the codec in
the low three bits of its attributes; here bits 0-4 were taken before
compression existed, so the codec takes the next three, with Kafka's ids.

Invariants: ``last_offset == base_offset + record_count - 1``; a batch that
decodes without error has a matching CRC, so a torn or corrupt batch is always
detected.
"""

from __future__ import annotations

import dataclasses
import enum
import struct
import time
from collections.abc import Iterator
from typing import Any, NamedTuple

import crc32c

HEADER = struct.Struct("<IqiqhqhiqI")
HEADER_SIZE = HEADER.size  # 52
_CRC_FIELD = struct.Struct("<I")
# Everything after the crc field, used to (re)compute the checksum.
_BODY = struct.Struct("<qiqhqhiqI")

MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
"""Hard upper bound of one batch's payload; larger is rejected as corrupt or oversized."""

NO_PRODUCER = -1


class BatchKind(enum.IntEnum):
    """What a batch holds; stored in attribute bits 1-4."""

    DATA = 0
    TX_COMMIT = 1  # commit marker; payload: the application version (see producers)
    TX_ABORT = 2  # abort marker
    RAFT_CONFIG = 3  # raft group configuration (members, learners)
    CONTROLLER = 4  # controller command (topic metadata)
    NOOP = 5  # written by a new leader to commit entries of earlier terms
    PRODUCER_FENCE = 6  # init_producer: epoch bump, replicated so replicas rebuild state
    LOG_START = 7  # retention: moves the partition's log start; payload: the new start (int64)


class Compression(enum.IntEnum):
    """The payload's codec; stored in attribute bits 5-7 with Kafka's codec ids.

    Only NONE, LZ4 (lz4 frame) and ZSTD are written; GZIP and SNAPPY keep
    Kafka's ids reserved, and a batch is refused when created with them.
    """

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


SUPPORTED_COMPRESSION = (Compression.NONE, Compression.LZ4, Compression.ZSTD)

_TX_BIT = 0x1
_KIND_SHIFT = 1
_KIND_MASK = 0xF
_KIND_OF = {kind.value: kind for kind in BatchKind}
_COMPRESSION_SHIFT = 5
_COMPRESSION_MASK = 0x7


class BatchError(ValueError):
    """A batch could not be decoded; ``position`` is its byte position in the buffer."""

    def __init__(self, message: str, position: int) -> None:
        super().__init__(message)
        self.position = position


class TruncatedBatch(BatchError):
    """The buffer ends inside a batch (a torn write)."""


class CorruptBatch(BatchError):
    """The batch's CRC or fields are invalid."""


class BatchHeader(NamedTuple):
    """What a batch's header says of its place in the log, read without its payload
    (:func:`decode_header`): a segment's structure is checked from these alone."""

    base_offset: int
    record_count: int
    term: int
    timestamp_ms: int
    size_bytes: int  # header and payload

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1


def decode_header(buf: bytes | memoryview, pos: int = 0) -> BatchHeader:
    """The header of the batch at ``pos``, its fields checked as :meth:`RecordBatch.decode`
    checks them, but not its CRC, which covers the payload too.

    Raises :class:`TruncatedBatch` when ``buf`` ends inside the header and
    :class:`CorruptBatch` when a field is invalid. Whether the payload's bytes are all
    there is the caller's to check (``size_bytes``).
    """
    (_, base, count, term, _, _, _, _, ts, plen) = _unpack_header(buf, pos)
    return BatchHeader(base, count, term, ts, HEADER_SIZE + plen)


def _unpack_header(buf: bytes | memoryview, pos: int) -> tuple[Any, ...]:
    """The header's fields at ``pos``, the ones that place the batch checked."""
    if pos + HEADER_SIZE > len(buf):
        raise TruncatedBatch(
            f"truncated batch header at byte {pos}: "
            f"{len(buf) - pos} of {HEADER_SIZE} bytes present",
            pos,
        )
    fields = HEADER.unpack_from(buf, pos)
    base, count, plen = fields[1], fields[2], fields[9]
    if count < 1 or plen > MAX_PAYLOAD_BYTES or base < 0:
        raise CorruptBatch(
            f"corrupt batch header at byte {pos}: record_count={count}, "
            f"payload_len={plen}, base_offset={base}",
            pos,
        )
    return fields


def make_attributes(
    kind: BatchKind, transactional: bool = False, compression: Compression = Compression.NONE
) -> int:
    """The attributes field of a batch of ``kind``; see the module doc for the bits."""
    return (
        (int(compression) << _COMPRESSION_SHIFT)
        | (int(kind) << _KIND_SHIFT)
        | (_TX_BIT if transactional else 0)
    )


@dataclasses.dataclass(frozen=True, slots=True)
class RecordBatch:
    """One batch. Immutable: re-stamping offsets or term returns a new batch.

    A batch keeps its encoded form once it has one (decoded from immutable bytes,
    or encoded once): a leader's batch is encoded for its log and for every
    follower's append, a follower's is written as it arrived, and each of those
    would otherwise compute the CRC and copy the payload again. The cached form is
    not a field that compares, prints or pickles, and a re-stamped batch has none.

    ``payload`` is ``bytes``, or a read-only ``memoryview`` of immutable bytes: a
    DATA batch decoded from ``bytes`` (a frame, a segment read) views them instead
    of copying its payload, and a leader appends a produced payload as the view it
    arrived in. Both compare, hash and ``len()`` alike; call ``bytes()`` for
    ``str``-like methods. Control payloads, which the engine parses, are ``bytes``.
    A re-stamped batch is encoded as two buffers, a new header and the payload
    (:meth:`encoded_parts`), so placing a batch in a log never copies its payload.
    """

    base_offset: int
    record_count: int
    term: int
    attributes: int
    producer_id: int
    producer_epoch: int
    first_sequence: int
    timestamp_ms: int
    payload: bytes | memoryview
    # the encoded form: one buffer, or (header, payload) before anything joined them
    _encoded: bytes | memoryview | tuple[bytes, bytes | memoryview] | None = dataclasses.field(
        default=None, init=False, repr=False, compare=False
    )

    def __getstate__(self) -> tuple[object, ...]:
        # without the cached form, and the payload as bytes: a memoryview does not pickle
        return tuple(
            bytes(value) if isinstance(value, memoryview) else value
            for value in (getattr(self, f.name) for f in dataclasses.fields(self) if f.init)
        )

    def __setstate__(self, state: tuple[object, ...]) -> None:
        for f, value in zip((f for f in dataclasses.fields(self) if f.init), state, strict=True):
            object.__setattr__(self, f.name, value)
        object.__setattr__(self, "_encoded", None)

    @classmethod
    def create(
        cls,
        payload: bytes | bytearray | memoryview,
        record_count: int = 1,
        *,
        kind: BatchKind = BatchKind.DATA,
        transactional: bool = False,
        producer_id: int = NO_PRODUCER,
        producer_epoch: int = NO_PRODUCER,
        first_sequence: int = NO_PRODUCER,
        timestamp_ms: int | None = None,
        compression: int = Compression.NONE,
    ) -> RecordBatch:
        """A batch not yet placed in a log (offset and term 0; the leader stamps them).

        ``compression`` names the codec ``payload`` is already compressed with
        (the batch never compresses); ValueError for a codec not in
        :data:`SUPPORTED_COMPRESSION` or on a control batch.
        """
        if compression not in SUPPORTED_COMPRESSION:
            allowed = ", ".join(c.name.lower() for c in SUPPORTED_COMPRESSION)
            raise ValueError(f"compression: expected one of {allowed}, got codec id {compression}")
        if compression != Compression.NONE and kind is not BatchKind.DATA:
            # the engine reads control payloads itself and never decompresses
            raise ValueError(f"compression: a {kind.name} batch cannot be compressed")
        if record_count < 1:
            raise ValueError(f"record_count must be >= 1, got {record_count}")
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise ValueError(
                f"payload of {len(payload)} bytes exceeds the limit of {MAX_PAYLOAD_BYTES} bytes"
            )
        return cls(
            base_offset=0,
            record_count=record_count,
            term=0,
            attributes=make_attributes(kind, transactional, Compression(compression)),
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            first_sequence=first_sequence,
            timestamp_ms=int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
            # a control payload is parsed by the engine's state machines: bytes
            payload=frozen_buffer(payload) if kind is BatchKind.DATA else bytes(payload),
        )

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.record_count - 1

    @property
    def kind(self) -> BatchKind:
        value = (self.attributes >> _KIND_SHIFT) & _KIND_MASK
        # a dict lookup, not BatchKind(value): every apply, fetch and replicate asks
        kind = _KIND_OF.get(value)
        return kind if kind is not None else BatchKind(value)  # ValueError names it

    @property
    def compression(self) -> Compression:
        """The codec of the payload (ValueError for an id Kafka has not assigned)."""
        return Compression((self.attributes >> _COMPRESSION_SHIFT) & _COMPRESSION_MASK)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & _TX_BIT)

    @property
    def is_control(self) -> bool:
        return self.kind is not BatchKind.DATA

    @property
    def size_bytes(self) -> int:
        return HEADER_SIZE + len(self.payload)

    def with_payload(self, payload: bytes | memoryview, compression: Compression) -> RecordBatch:
        """The same batch holding ``payload``, compressed with ``compression`` (a reader's
        view after decompressing; the stored batch is never rewritten)."""
        attributes = (self.attributes & ~(_COMPRESSION_MASK << _COMPRESSION_SHIFT)) | (
            int(compression) << _COMPRESSION_SHIFT
        )
        return self._copy(self.base_offset, self.term, self.timestamp_ms, attributes, payload)

    def without_payload(self) -> RecordBatch:
        """The same header with an empty payload: what a state machine that never reads
        a DATA batch's payload is given (see ``raftlog.raft.state_machines``). Not the
        log's batch: it is never encoded, stored or sent."""
        return self._copy(self.base_offset, self.term, self.timestamp_ms, self.attributes, b"")

    def stamped(self, base_offset: int, term: int, timestamp_ms: int | None = None) -> RecordBatch:
        """The same batch placed at ``base_offset`` in ``term`` (what a leader appends),
        with ``timestamp_ms`` when given (the leader's append time)."""
        if timestamp_ms is None:
            timestamp_ms = self.timestamp_ms
        return self._copy(base_offset, term, timestamp_ms, self.attributes, self.payload)

    def _copy(
        self,
        base_offset: int,
        term: int,
        timestamp_ms: int,
        attributes: int,
        payload: bytes | memoryview,
    ) -> RecordBatch:
        # The constructor called directly, without the cached encoding: half the time of
        # dataclasses.replace (1.4 against 2.9 us), paid per batch on every node's
        # append path (stamped) and per state machine that skips payloads.
        return RecordBatch(
            base_offset,
            self.record_count,
            term,
            attributes,
            self.producer_id,
            self.producer_epoch,
            self.first_sequence,
            timestamp_ms,
            payload,
        )

    def encode(self) -> bytes | memoryview:
        """Header and payload as one buffer, the form on disk and on the wire (computed
        once). Gather writes take :meth:`encoded_parts` instead, which copies nothing."""
        cached = self._encoded
        if cached is not None and not isinstance(cached, tuple):
            return cached
        joined = b"".join(self.encoded_parts())
        object.__setattr__(self, "_encoded", joined)
        return joined

    def encoded_parts(self) -> tuple[bytes | memoryview, ...]:
        """The encoded form as buffers in order, whose concatenation is :meth:`encode`:
        the cached form when there is one, else a new header and the payload as it is.
        The CRC is computed once per batch either way."""
        cached = self._encoded
        if cached is None:
            cached = (self._header(), self.payload)
            object.__setattr__(self, "_encoded", cached)
        return cached if isinstance(cached, tuple) else (cached,)

    def _header(self) -> bytes:
        body = _BODY.pack(
            self.base_offset,
            self.record_count,
            self.term,
            self.attributes,
            self.producer_id,
            self.producer_epoch,
            self.first_sequence,
            self.timestamp_ms,
            len(self.payload),
        )
        crc = crc32c.crc32c(self.payload, crc32c.crc32c(body))
        return _CRC_FIELD.pack(crc) + body

    def check_crc(self) -> None:
        """Raise :class:`CorruptBatch` when the batch's encoded form (as received or
        stored) does not match its CRC: the reader's check of a batch decoded with
        ``verify=False`` (see :meth:`decode`). A batch with no encoded form of its own
        (built here, or copied from a writable buffer) is re-encoded, which cannot fail."""
        encoded = self._encoded
        if encoded is None or isinstance(encoded, tuple):
            return
        view = memoryview(encoded)
        (crc,) = _CRC_FIELD.unpack_from(view, 0)
        computed = crc32c.crc32c(view[4:])
        if computed != crc:
            raise CorruptBatch(
                f"CRC mismatch in batch at base offset {self.base_offset} "
                f"(offsets {self.base_offset}..{self.last_offset}): "
                f"stored {crc:#010x}, computed {computed:#010x}",
                0,
            )

    @classmethod
    def decode(
        cls, buf: bytes | memoryview, pos: int = 0, *, verify: bool = True
    ) -> tuple[RecordBatch, int]:
        """Decode the batch at ``pos``; return it and the position after it.

        Raises :class:`TruncatedBatch` when the buffer ends inside the batch and
        :class:`CorruptBatch` when the CRC or a field is invalid. ``verify=False``
        leaves out the CRC, and only for a read-only buffer (anything else is
        verified: a copied payload could not be checked later): the batch keeps its
        bytes as its encoded form, as they came, so it is sent on as it was stored
        and its reader checks it (:meth:`check_crc`). Only the fetch path does that
        (a node serving a client, the client until it checks; see ARCHITECTURE.md).
        """
        view = memoryview(buf)
        end_header = pos + HEADER_SIZE
        (crc, base, count, term, attrs, pid, epoch, seq, ts, plen) = _unpack_header(view, pos)
        end = end_header + plen
        if end > len(view):
            raise TruncatedBatch(
                f"truncated batch at byte {pos}: payload has {len(view) - end_header} "
                f"of {plen} bytes",
                pos,
            )
        if verify or not view.readonly:
            computed = crc32c.crc32c(
                view[end_header:end], crc32c.crc32c(view[pos + 4 : end_header])
            )
        else:
            computed = crc
        if computed != crc:
            raise CorruptBatch(
                f"CRC mismatch in batch at byte {pos} (base offset {base}): "
                f"stored {crc:#010x}, computed {computed:#010x}",
                pos,
            )
        # A read-only buffer is frozen (see frozen_buffer): bytes, or a stream frame's
        # buffer that nothing writes to once received (raftlog.rpc.frame_receiver).
        frozen = view.readonly
        if not frozen:  # the buffer may change: copy the payload
            payload: bytes | memoryview = bytes(view[end_header:end])
        elif (attrs >> _KIND_SHIFT) & _KIND_MASK == BatchKind.DATA:
            payload = view[end_header:end]  # immutable: a view stays valid
        else:
            payload = bytes(view[end_header:end])  # a control payload, parsed as bytes
        batch = cls(base, count, term, attrs, pid, epoch, seq, ts, payload)
        if frozen:
            object.__setattr__(batch, "_encoded", view[pos:end])
        return batch, end


def frozen_buffer(data: bytes | bytearray | memoryview) -> bytes | memoryview:
    """``data`` itself when it is ``bytes`` or a read-only ``memoryview`` (a view of
    bytes, or of an Arrow buffer: nothing changes it while it is held), else a copy
    as bytes. How a payload is kept or sent without a copy, and only then."""
    if isinstance(data, bytes) or (isinstance(data, memoryview) and data.readonly):
        return data
    return bytes(data)


def encode_batches(batches: list[RecordBatch]) -> bytes:
    """Concatenate encoded batches (the form used on disk and on the wire)."""
    return b"".join(b.encode() for b in batches)


def decode_batches(buf: bytes | memoryview) -> Iterator[RecordBatch]:
    """Decode a concatenation of batches; raises on any truncated or corrupt batch."""
    pos = 0
    view = memoryview(buf)
    while pos < len(view):
        batch, pos = RecordBatch.decode(view, pos)
        yield batch
