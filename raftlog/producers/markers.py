"""Control batches rm_stm writes: transaction markers and producer fences.

A commit or abort marker's payload is ``<B q``: a format version (0) and the
application version (a Spark batch id; -1 for none). A fence's payload is
empty. Markers and fences carry the producer id and epoch in the batch header
and no sequence (-1): they do not advance the producer's sequence.
"""

from __future__ import annotations

import struct

from raftlog.producers.serial import NO_SEQUENCE
from raftlog.storage.batch import BatchKind, RecordBatch

NO_VERSION = -1
_MARKER = struct.Struct("<Bq")
_MARKER_FORMAT = 0


def encode_marker_payload(version: int) -> bytes:
    """The payload of a TX_COMMIT / TX_ABORT marker carrying ``version`` (-1: none)."""
    if not isinstance(version, int) or not -1 <= version < 2**63:
        raise ValueError(f"version must be an int in [-1, 2**63 - 1], got {version!r}")
    return _MARKER.pack(_MARKER_FORMAT, version)


def decode_marker_payload(payload: bytes) -> int:
    """The application version in a marker payload; raises ValueError when malformed."""
    if len(payload) != _MARKER.size:
        raise ValueError(
            f"transaction marker payload must be {_MARKER.size} bytes, got {len(payload)}"
        )
    fmt, version = _MARKER.unpack(payload)
    if fmt != _MARKER_FORMAT:
        raise ValueError(f"transaction marker format must be {_MARKER_FORMAT}, got {fmt}")
    return version


def make_marker(
    producer_id: int, epoch: int, *, commit: bool, version: int = NO_VERSION, timestamp_ms: int
) -> RecordBatch:
    """A TX_COMMIT (``commit=True``) or TX_ABORT marker batch for ``producer_id`` at ``epoch``."""
    return RecordBatch.create(
        encode_marker_payload(version),
        kind=BatchKind.TX_COMMIT if commit else BatchKind.TX_ABORT,
        transactional=True,
        producer_id=producer_id,
        producer_epoch=epoch,
        first_sequence=NO_SEQUENCE,
        timestamp_ms=timestamp_ms,
    )


def make_fence(producer_id: int, epoch: int, *, timestamp_ms: int) -> RecordBatch:
    """A PRODUCER_FENCE batch: ``producer_id``'s epoch becomes ``epoch`` on every replica."""
    return RecordBatch.create(
        b"",
        kind=BatchKind.PRODUCER_FENCE,
        producer_id=producer_id,
        producer_epoch=epoch,
        first_sequence=NO_SEQUENCE,
        timestamp_ms=timestamp_ms,
    )
