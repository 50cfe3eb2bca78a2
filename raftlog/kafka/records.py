"""Kafka's RecordBatch v2 <-> raftlog's stored batches: one log, two front doors.

A Kafka producer's batch is decoded (CRC checked, decompression bounded, record count
checked against the bytes before anything is sized by it) and its records (key, value,
headers, timestamp) are stored in raftlog's own *keyed* payload
(:func:`raftlog.records.framing.frame_keyed`), uncompressed, one raftlog batch per Kafka
batch with the same record count. So ``raftlog consume`` and the Spark source read them
as they read ``raftlog produce``'s, and a raftlog batch at offset ``o`` with ``n``
records is answered to a Kafka fetch as one RecordBatch v2 with base offset ``o`` and
offset deltas ``0..n-1``: Kafka's offsets are raftlog's.

A produced batch is checked by its 61-byte header (kafka-python's layout of it), its
CRC-32C (the ``crc32c`` package, in C) and a walk of its records section in columns
(:mod:`raftlog.kafka.record_walk`, written against KIP-98's record layout: no object
per record, ~0.5 us a record where kafka-python's reader took ~3). A fetch is answered
with the producer's own bytes while :class:`ProducedBytes` holds them; otherwise a
keyed payload without headers is built in columns too (the same bytes as kafka-python's
``DefaultRecordBatchBuilder`` makes, ~0.7 us a record against its ~3), and anything
else (headers, plain payloads) by that builder. The bounds (sizes,
counts, the decompression cap) are this module's.

Errors are :class:`KafkaRecordError` carrying the Kafka error code a broker answers for
the partition (CORRUPT_MESSAGE, UNSUPPORTED_COMPRESSION_TYPE, INVALID_RECORD, ...).
"""

from __future__ import annotations

import collections
import dataclasses
import struct
import zlib

import numpy as np
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from raftlog.kafka.record_walk import (
    MIN_RECORD_BYTES,
    RecordWalkError,
    build_records,
    keyed_payload,
    walk,
)
from raftlog.records.compression import decompress
from raftlog.records.framing import KEYED_MAGIC, Record, unframe_any
from raftlog.records.payload_check import ARROW_MARKER, PayloadError, keyed_layout
from raftlog.storage.batch import MAX_PAYLOAD_BYTES, Compression, RecordBatch

# Kafka error codes a partition's produce or fetch answer carries (Kafka's Errors.java)
CORRUPT_MESSAGE = 2
INVALID_RECORD = 87
UNSUPPORTED_COMPRESSION_TYPE = 76
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43

_HEADER = DefaultRecordBatch.HEADER_STRUCT
HEADER_SIZE = _HEADER.size  # 61 bytes: base offset .. record count
_LENGTH = struct.Struct(">qi")  # base offset, batch length (the bytes after this field)
_PATCH = struct.Struct(">qii")  # base offset, batch length, partition leader epoch
_GZIP = 1
_SNAPPY = 2
_CONTROL = 0x20  # RecordBatch v2 attributes: a control batch
_CRC_AT, _ATTRIBUTES_AT = 17, 21  # the CRC-32C covers the bytes from the attributes on
#: a control record's key and value (Kafka's ControlRecordType): version 0, COMMIT (1);
#: value: version 0, coordinator epoch 0
_COMMIT_KEY = struct.pack(">hh", 0, 1)
_COMMIT_VALUE = struct.pack(">hi", 0, 0)


class KafkaRecordError(ValueError):
    """A Kafka batch that is not stored, or a stored batch Kafka cannot be given;
    ``code`` is the Kafka error code for the partition, the message says what and why."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclasses.dataclass(frozen=True, slots=True)
class ProducedBatch:
    """One Kafka batch as raftlog stores it: a keyed payload of ``record_count`` records,
    and the batch's producer fields (-1 when it has none)."""

    payload: bytes
    record_count: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    #: the producer's batch as it came, when a fetch may answer it as is (uncompressed,
    #: create-time timestamps: its records are exactly ``payload``'s); else None
    wire: bytes | None = None


def split_batches(records: bytes | memoryview, max_batches: int = 1024) -> list[memoryview]:
    """The RecordBatches of a produce request's ``records`` field, each a view.

    KafkaRecordError(CORRUPT_MESSAGE) when a declared length does not fit the bytes
    (a truncated batch), a batch is shorter than its header, or there are more than
    ``max_batches`` of them.
    """
    view = memoryview(records)
    out: list[memoryview] = []
    pos = 0
    while pos < len(view):
        if len(out) >= max_batches:
            raise KafkaRecordError(CORRUPT_MESSAGE, f"more than {max_batches} record batches")
        if pos + _LENGTH.size > len(view):
            raise KafkaRecordError(CORRUPT_MESSAGE, "a record batch is truncated in its header")
        _, length = _LENGTH.unpack_from(view, pos)
        end = pos + _LENGTH.size + length
        if length < HEADER_SIZE - _LENGTH.size or end > len(view):
            raise KafkaRecordError(
                CORRUPT_MESSAGE,
                f"a record batch declares {length} bytes after its length field; "
                f"{len(view) - pos - _LENGTH.size} follow it",
            )
        out.append(view[pos:end])
        pos = end
    if not out:
        raise KafkaRecordError(CORRUPT_MESSAGE, "the partition's records hold no batch")
    return out


def _inflate_gzip(data: bytes | memoryview, limit: int) -> bytes:
    """gzip, stopping past ``limit`` bytes (a small bomb costs no more than that)."""
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limit + 1)
    except zlib.error as exc:
        raise KafkaRecordError(CORRUPT_MESSAGE, f"gzip records are corrupt: {exc}") from None
    if len(out) > limit:
        raise KafkaRecordError(
            CORRUPT_MESSAGE, f"gzip records expand past the limit of {limit} bytes"
        )
    if not inflater.eof:
        raise KafkaRecordError(CORRUPT_MESSAGE, "gzip records are truncated")
    return out


def decode_batch(batch: bytes | memoryview, max_bytes: int = MAX_PAYLOAD_BYTES) -> ProducedBatch:
    """The records of one Kafka RecordBatch v2 as a raftlog keyed payload.

    Checked before anything is stored: magic 2, the CRC-32C, not a control batch,
    a supported codec (none, gzip, lz4, zstd), decompression into at most
    ``max_bytes``, a record count that the bytes can hold (at least 7 bytes a record)
    and that the records fill exactly, a last offset delta of count-1, each record's
    fields ending at its length, and offset deltas 0..count-1
    (:func:`raftlog.kafka.record_walk.walk`, which reads the records as columns
    without an object per record). KafkaRecordError says which, with its code.
    """
    if len(batch) < HEADER_SIZE:
        raise KafkaRecordError(
            CORRUPT_MESSAGE, f"a record batch of {len(batch)} bytes is shorter than its header"
        )
    data = bytes(batch)
    head = _HEADER.unpack_from(data, 0)
    magic, crc, attributes, first_timestamp, count = head[3], head[4], head[5], head[7], head[12]
    last_offset_delta = head[6]
    producer_id, producer_epoch, base_sequence = head[9], head[10], head[11]
    if magic != 2:
        raise KafkaRecordError(
            UNSUPPORTED_FOR_MESSAGE_FORMAT, f"record batch magic {magic}: only v2 is accepted"
        )
    if calc_crc32c(memoryview(data)[_ATTRIBUTES_AT:]) != crc:
        raise KafkaRecordError(CORRUPT_MESSAGE, "record batch CRC-32C does not match its bytes")
    if attributes & _CONTROL:
        raise KafkaRecordError(INVALID_RECORD, "a producer may not write a control batch")
    codec = attributes & DefaultRecordBatch.CODEC_MASK
    body: bytes | memoryview = memoryview(data)[HEADER_SIZE:]
    if codec == _GZIP:
        body = _inflate_gzip(body, max_bytes)
    elif codec in (Compression.LZ4, Compression.ZSTD):
        try:
            body = decompress(Compression(codec), body, limit=max_bytes)
        except ValueError as exc:
            raise KafkaRecordError(CORRUPT_MESSAGE, str(exc)) from None
    elif codec == _SNAPPY:
        raise KafkaRecordError(
            UNSUPPORTED_COMPRESSION_TYPE,
            "snappy is not accepted: compress with none, gzip, lz4 or zstd",
        )
    elif codec != 0:
        raise KafkaRecordError(UNSUPPORTED_COMPRESSION_TYPE, f"unknown codec id {codec}")
    if not 1 <= count <= max(1, len(body) // MIN_RECORD_BYTES):
        raise KafkaRecordError(
            CORRUPT_MESSAGE,
            f"record count {count} does not fit the batch's {len(body)} bytes of records "
            f"(each record takes at least {MIN_RECORD_BYTES})",
        )
    if last_offset_delta != count - 1:
        # Kafka's LogValidator: the batch's offset range must hold its count; a fetch of
        # the producer's bytes would hand consumers this header as is
        raise KafkaRecordError(
            CORRUPT_MESSAGE,
            f"last offset delta {last_offset_delta} does not match the record count "
            f"{count} (expected {count - 1})",
        )
    try:
        columns = walk(body, count)
    except RecordWalkError as exc:
        raise KafkaRecordError(CORRUPT_MESSAGE, f"records do not decode: {exc}") from None
    log_append = bool(attributes & DefaultRecordBatch.TIMESTAMP_TYPE_MASK)
    return ProducedBatch(
        keyed_payload(body, columns, None if log_append else first_timestamp),
        count,
        producer_id,
        producer_epoch,
        base_sequence,
        bool(attributes & DefaultRecordBatch.TRANSACTIONAL_MASK),
        data if codec == 0 and not log_append else None,
    )


#: The produced bytes a node's listener keeps for fetches (:class:`ProducedBytes`).
PRODUCED_CACHE_BYTES = 64 << 20


class ProducedBytes:
    """The Kafka bytes of recently produced batches, so that a fetch answers a stored
    batch with its producer's RecordBatch (base offset and leader epoch set) instead of
    rebuilding it record by record (:func:`encode_batch`, ~6 us a record): what a
    Kafka broker does, and what a consumer tailing its producers reads.

    Invariant: :meth:`encoded` answers bytes only for a stored batch whose payload,
    record count and producer fields equal those the bytes were decoded into
    (:func:`decode_batch`), so an answer from here is the same records, offsets and
    producer fields as :func:`encode_batch`'s; a truncated log, a new leader's batch at
    the same offset, or a guessed offset that was wrong is a miss, never a wrong answer.
    Bounded: at most ``max_bytes`` of Kafka bytes (oldest dropped first); ``gauge``
    (a prometheus Gauge, or None) is set to the bytes held.
    """

    def __init__(self, max_bytes: int = PRODUCED_CACHE_BYTES, gauge: object = None) -> None:
        self.max_bytes = max_bytes
        self.held = 0
        self._gauge = gauge
        self._entries: collections.OrderedDict[tuple[str, int, int], ProducedBatch] = (
            collections.OrderedDict()
        )

    def add(self, topic: str, partition: int, base_offset: int, batch: ProducedBatch) -> None:
        """Keep ``batch``'s bytes as those of the stored batch at ``base_offset``."""
        if batch.wire is None or len(batch.wire) > self.max_bytes:
            return
        key = (topic, partition, base_offset)
        old = self._entries.pop(key, None)
        if old is not None and old.wire is not None:
            self.held -= len(old.wire)
        self._entries[key] = batch
        self.held += len(batch.wire)
        while self.held > self.max_bytes:
            _, dropped = self._entries.popitem(last=False)
            self.held -= len(dropped.wire or b"")
        self._set_gauge()

    def encoded(self, batch: RecordBatch, topic: str, partition: int) -> bytes | None:
        """``batch`` as Kafka bytes from a produced batch that stored exactly it, or None."""
        kept = self._entries.get((topic, partition, batch.base_offset))
        if (
            kept is None
            or kept.wire is None
            or batch.compression != Compression.NONE
            or kept.record_count != batch.record_count
            or kept.producer_id != batch.producer_id
            or kept.producer_epoch != batch.producer_epoch
            or kept.base_sequence != batch.first_sequence
            or kept.transactional != batch.is_transactional
            or kept.payload != batch.payload
        ):
            return None
        out = bytearray(kept.wire)
        # outside the CRC'd bytes, as in encode_batch
        _PATCH.pack_into(out, 0, batch.base_offset, len(out) - _LENGTH.size, batch.term)
        return bytes(out)

    def _set_gauge(self) -> None:
        if self._gauge is not None:
            self._gauge.set(self.held)  # type: ignore[attr-defined]


def encode_batch(batch: RecordBatch, topic: str = "") -> bytes:
    """``batch`` (a data batch read from the log) as one Kafka RecordBatch v2 with base
    offset ``batch.base_offset``, one record per stored record, leader epoch = its term.

    KafkaRecordError(UNSUPPORTED_FOR_MESSAGE_FORMAT) for an Arrow IPC payload (a typed
    topic, written by the Spark sink with a schema) or one that holds neither layout.
    """
    payload = decompress(Compression(batch.compression), batch.payload)
    if bytes(payload[:4]) == KEYED_MAGIC:
        built = _encode_keyed(batch, payload)
        if built is not None:
            return built
    records = unframe_any(bytes(payload), batch.record_count)
    if records is None:
        if bytes(payload[:4]) == ARROW_MARKER:
            raise KafkaRecordError(
                UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"topic {topic!r} holds Arrow IPC record batches (a typed topic); Kafka "
                "clients read only topics of keyed or plain records",
            )
        if batch.record_count != 1:
            raise KafkaRecordError(
                UNSUPPORTED_FOR_MESSAGE_FORMAT,
                f"the batch at offset {batch.base_offset} of topic {topic!r} holds "
                f"{batch.record_count} records in no layout Kafka clients read",
            )
        records = [Record(bytes(payload))]  # one opaque value (framing's plain rule)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=batch.is_transactional,
        producer_id=batch.producer_id,
        producer_epoch=batch.producer_epoch,
        base_sequence=batch.first_sequence,
        batch_size=2**31 - 1,
    )
    for i, r in enumerate(records):
        stamp = r.timestamp_ms if r.timestamp_ms is not None else batch.timestamp_ms
        builder.append(i, int(stamp), r.key, r.value, list(r.headers))
    out = builder.build()
    # base offset, length and leader epoch precede the CRC'd bytes: set them after
    _PATCH.pack_into(out, 0, batch.base_offset, len(out) - _LENGTH.size, batch.term)
    return bytes(out)


def _encode_keyed(batch: RecordBatch, payload: bytes | memoryview) -> bytes | None:
    """:func:`encode_batch` of a keyed payload without headers, in columns
    (:func:`raftlog.kafka.record_walk.build_records`, ~0.7 us a record where
    kafka-python's builder takes ~3): the same bytes as the builder makes. None when
    the payload has headers or does not check as keyed (the builder's path answers)."""
    try:
        layout = keyed_layout(payload, batch.record_count)
    except PayloadError:
        return None
    if layout.header_counts is not None and layout.header_counts.any():
        return None
    n = batch.record_count
    values = layout.value_lens
    keys = layout.key_lens if layout.key_lens is not None else np.full(n, -1, np.int32)
    stamps = layout.timestamps
    if stamps is None:
        stamps = np.full(n, batch.timestamp_ms, dtype=np.int64)
    first, top = int(stamps[0]), int(stamps.max())
    if top - int(stamps.min()) >= 2**62:
        return None  # deltas past int64's zig-zag: the builder's Python ints answer
    key_bytes = int(np.maximum(keys, 0).sum())
    value_bytes = int(np.maximum(values, 0).sum())
    at = layout.data_start
    view = memoryview(payload)
    section = build_records(
        keys,
        values,
        stamps,
        view[at : at + key_bytes],
        view[at + key_bytes : at + key_bytes + value_bytes],
    )
    out = bytearray(HEADER_SIZE) + section
    attributes = DefaultRecordBatch.TRANSACTIONAL_MASK if batch.is_transactional else 0
    # kafka-python's header layout, filled as its DefaultRecordBatchBuilder fills it
    _HEADER.pack_into(
        out,
        0,
        batch.base_offset,
        len(out) - _LENGTH.size,
        batch.term,
        2,
        0,
        attributes,
        n - 1,
        first,
        top,
        batch.producer_id,
        batch.producer_epoch,
        batch.first_sequence,
        n,
    )
    struct.pack_into(">I", out, _CRC_AT, calc_crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    return bytes(out)


def skip_batch(first_offset: int, last_offset: int, timestamp_ms: int) -> bytes:
    """A Kafka control batch covering offsets ``first_offset .. last_offset``, which a
    reader never sees: raftlog's own control batches (transaction markers, fences,
    Raft's configuration and no-op batches) and, read committed, aborted data, which
    the node leaves out of a fetch (:mod:`raftlog.producers.fetch_filter`).

    Kafka consumers never hand a control batch to the application, and move their
    position past its last offset (as past a transaction marker of a Kafka broker's
    log); without it a consumer whose position sits on such offsets would fetch them
    again and again, and its lag would never drain. It holds one COMMIT control record
    of no producer (-1) at ``last_offset``: commit markers are ignored by every
    client, at every isolation level, and no aborted transaction is listed for it.
    """
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=True,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=2**31 - 1,
    )
    builder.append(last_offset - first_offset, timestamp_ms, _COMMIT_KEY, _COMMIT_VALUE, [])
    out = builder.build()
    (attributes,) = struct.unpack_from(">h", out, _ATTRIBUTES_AT)
    struct.pack_into(">h", out, _ATTRIBUTES_AT, attributes | _CONTROL)
    struct.pack_into(">I", out, _CRC_AT, calc_crc32c(memoryview(out)[_ATTRIBUTES_AT:]))
    _PATCH.pack_into(out, 0, first_offset, len(out) - _LENGTH.size, -1)
    return bytes(out)
