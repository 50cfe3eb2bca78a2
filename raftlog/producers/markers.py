"""Control batches rm_stm writes: transaction markers and producer fences.

Markers and fences carry the producer id and epoch in the batch header and no
sequence (-1): they do not advance the producer's sequence.

A commit or abort marker's payload, format 1 (``<B q q i h B``)::

    format u8 (1), version i64 (the application version, -1: none),
    record_count i64 (-1: unchecked), last_sequence i32 (-1: unchecked),
    requested_epoch i16 (-1: none), reason u8

``record_count``/``last_sequence`` are what the writer saw acknowledged in
the transaction (a commit that does not match the open transaction aborts
it, see ``producer_table``). ``requested_epoch`` is the epoch the client's
request named: a commit marker is written at that epoch, an abort marker at
the next one (an abort bumps the epoch), so a retry of the same request can
be recognised after the bump. ``reason`` says who wrote the marker
(:data:`REASON_END_TXN` a client's end_transaction, :data:`REASON_TIMEOUT`
the leader's transaction timeout, :data:`REASON_FENCE` an init_producer of a
newer session). Format 0 (``<B q``: format, version), written before, still
decodes: its other fields read as -1 / :data:`REASON_UNSPECIFIED`.

A fence's payload is ``<B q``: format u8 (0) and the session's
``transaction_timeout_ms`` (-1: the server default). An empty payload (older
fences) means -1.
"""

from __future__ import annotations

import dataclasses
import struct

from raftlog.producers.serial import (
    EPOCH_MODULUS,
    NO_EPOCH,
    NO_SEQUENCE,
    SEQUENCE_MODULUS,
)
from raftlog.storage.batch import BatchKind, RecordBatch

NO_VERSION = -1
NO_COUNT = -1
DEFAULT_TIMEOUT = -1
"""A fence's transaction timeout meaning "the server's ``transaction_timeout_ms``"."""

REASON_UNSPECIFIED = 0
REASON_END_TXN = 1
REASON_TIMEOUT = 2
REASON_FENCE = 3
_REASONS = (REASON_UNSPECIFIED, REASON_END_TXN, REASON_TIMEOUT, REASON_FENCE)

_MARKER_V0 = struct.Struct("<Bq")
_MARKER_V1 = struct.Struct("<BqqihB")
_MARKER_FORMAT = 1
_FENCE = struct.Struct("<Bq")
_FENCE_FORMAT = 0


@dataclasses.dataclass(frozen=True, slots=True)
class MarkerPayload:
    """The decoded payload of a TX_COMMIT / TX_ABORT marker (see the module doc)."""

    version: int = NO_VERSION
    record_count: int = NO_COUNT
    last_sequence: int = NO_SEQUENCE
    requested_epoch: int = NO_EPOCH
    reason: int = REASON_UNSPECIFIED


def _check_marker_fields(p: MarkerPayload) -> None:
    if not isinstance(p.version, int) or not -1 <= p.version < 2**63:
        raise ValueError(f"version must be an int in [-1, 2**63 - 1], got {p.version!r}")
    if not isinstance(p.record_count, int) or not -1 <= p.record_count < 2**63:
        raise ValueError(
            f"record_count must be an int in [-1, 2**63 - 1] (-1: unchecked), "
            f"got {p.record_count!r}"
        )
    if not isinstance(p.last_sequence, int) or not -1 <= p.last_sequence < SEQUENCE_MODULUS:
        raise ValueError(
            f"last_sequence must be an int in [-1, {SEQUENCE_MODULUS - 1}] (-1: unchecked), "
            f"got {p.last_sequence!r}"
        )
    if not isinstance(p.requested_epoch, int) or not -1 <= p.requested_epoch < EPOCH_MODULUS:
        raise ValueError(
            f"requested_epoch must be an int in [-1, {EPOCH_MODULUS - 1}], "
            f"got {p.requested_epoch!r}"
        )
    if p.reason not in _REASONS:
        raise ValueError(f"reason must be one of {_REASONS}, got {p.reason!r}")


def encode_marker(payload: MarkerPayload) -> bytes:
    """A marker payload in the current format; raises ValueError naming a bad field."""
    _check_marker_fields(payload)
    return _MARKER_V1.pack(
        _MARKER_FORMAT,
        payload.version,
        payload.record_count,
        payload.last_sequence,
        payload.requested_epoch,
        payload.reason,
    )


def decode_marker(payload: bytes | memoryview) -> MarkerPayload:
    """Decode a marker payload (format 0 or 1); raises ValueError when malformed."""
    if len(payload) == _MARKER_V0.size:
        fmt, version = _MARKER_V0.unpack(payload)
        if fmt != 0:
            raise ValueError(f"transaction marker format must be 0 or 1, got {fmt}")
        return MarkerPayload(version)
    if len(payload) != _MARKER_V1.size:
        raise ValueError(
            f"transaction marker payload must be {_MARKER_V0.size} or {_MARKER_V1.size} bytes, "
            f"got {len(payload)}"
        )
    fmt, version, count, last, requested, reason = _MARKER_V1.unpack(payload)
    if fmt != _MARKER_FORMAT:
        raise ValueError(f"transaction marker format must be 0 or 1, got {fmt}")
    decoded = MarkerPayload(version, count, last, requested, reason)
    _check_marker_fields(decoded)
    return decoded


def encode_marker_payload(version: int) -> bytes:
    """The payload of a marker carrying only ``version`` (-1: none)."""
    return encode_marker(MarkerPayload(version))


def decode_marker_payload(payload: bytes | memoryview) -> int:
    """The application version in a marker payload; raises ValueError when malformed."""
    return decode_marker(payload).version


def make_marker(
    producer_id: int,
    epoch: int,
    *,
    commit: bool,
    version: int = NO_VERSION,
    timestamp_ms: int,
    record_count: int = NO_COUNT,
    last_sequence: int = NO_SEQUENCE,
    requested_epoch: int = NO_EPOCH,
    reason: int = REASON_UNSPECIFIED,
) -> RecordBatch:
    """A TX_COMMIT (``commit=True``) or TX_ABORT marker batch for ``producer_id`` at ``epoch``.

    ``epoch`` is the batch header's epoch: for an abort requested at epoch
    ``e`` the caller passes ``next_epoch(e)`` and ``requested_epoch=e``.
    """
    payload = MarkerPayload(version, record_count, last_sequence, requested_epoch, reason)
    return RecordBatch.create(
        encode_marker(payload),
        kind=BatchKind.TX_COMMIT if commit else BatchKind.TX_ABORT,
        transactional=True,
        producer_id=producer_id,
        producer_epoch=epoch,
        first_sequence=NO_SEQUENCE,
        timestamp_ms=timestamp_ms,
    )


def check_transaction_timeout(value: int, maximum: int) -> int:
    """Return ``value`` if it is a valid per-session transaction timeout (ms) up to
    ``maximum``, or -1 (the server default); else raise ValueError naming the field."""
    if value == DEFAULT_TIMEOUT:
        return value
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= maximum:
        raise ValueError(
            f"transaction_timeout_ms must be an int in [1, {maximum}] milliseconds "
            f"(or -1 for the server default), got {value!r}"
        )
    return value


def encode_fence_payload(transaction_timeout_ms: int = DEFAULT_TIMEOUT) -> bytes:
    """A fence's payload: the session's transaction timeout (-1: the server default)."""
    if not isinstance(transaction_timeout_ms, int) or not -1 <= transaction_timeout_ms < 2**63:
        raise ValueError(
            f"transaction_timeout_ms must be an int >= -1, got {transaction_timeout_ms!r}"
        )
    if transaction_timeout_ms == 0:
        raise ValueError("transaction_timeout_ms must be >= 1 or -1 (the server default), got 0")
    return _FENCE.pack(_FENCE_FORMAT, transaction_timeout_ms)


def decode_fence_payload(payload: bytes | memoryview) -> int:
    """A fence's transaction timeout (-1 for an empty payload); ValueError when malformed."""
    if not payload:
        return DEFAULT_TIMEOUT
    if len(payload) != _FENCE.size:
        raise ValueError(f"fence payload must be 0 or {_FENCE.size} bytes, got {len(payload)}")
    fmt, timeout = _FENCE.unpack(payload)
    timeout = int(timeout)  # struct's unpack is typed as Any
    if fmt != _FENCE_FORMAT:
        raise ValueError(f"fence payload format must be {_FENCE_FORMAT}, got {fmt}")
    if timeout == 0 or timeout < -1:
        raise ValueError(f"fence transaction_timeout_ms must be >= 1 or -1, got {timeout}")
    return timeout


def make_fence(
    producer_id: int,
    epoch: int,
    *,
    timestamp_ms: int,
    transaction_timeout_ms: int = DEFAULT_TIMEOUT,
) -> RecordBatch:
    """A PRODUCER_FENCE batch: ``producer_id``'s epoch becomes ``epoch`` on every replica,
    and its transactions time out after ``transaction_timeout_ms`` (-1: server default)."""
    return RecordBatch.create(
        encode_fence_payload(transaction_timeout_ms),
        kind=BatchKind.PRODUCER_FENCE,
        producer_id=producer_id,
        producer_epoch=epoch,
        first_sequence=NO_SEQUENCE,
        timestamp_ms=timestamp_ms,
    )
