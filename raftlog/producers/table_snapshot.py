"""The producer table's snapshot format: compact, versioned, little-endian.

Layout (format 2)::

    magic b"RMST", format u8 (2), applied_offset i64, log_clock_ms i64, producer count u32
    per producer (least recently active first):
        producer_id i64, epoch i16, last_sequence i32, last_committed_version i64,
        last_activity_ms i64, open_tx_first_offset i64 (-1: none), open_tx_start_ms i64,
        open_tx_record_count i64, transaction_timeout_ms i64 (-1: server default),
        last marker: kind u8 (0 none, 1 commit, 2 abort), requested_epoch i16,
            offset i64, version i64, record_count i64, last_sequence i32,
        recent count u8, then per recent batch:
            first_sequence i32, last_sequence i32, base_offset i64, last_offset i64
    aborted range count u32, then per range: producer_id i64, first_offset i64, last_offset i64

Format 1 (without the open transaction's record count, the timeout and the
last marker) still restores, with those fields at their defaults. The order
of producers is kept, so a restored table evicts in the same order as the one
snapshotted.
"""

from __future__ import annotations

import struct

from raftlog.producers.aborted_index import AbortedIndex
from raftlog.producers.producer_state import (
    SEQUENCE_CACHE,
    LastMarker,
    OpenTransaction,
    ProducerState,
    SequenceRecord,
)

MAGIC = b"RMST"
FORMAT = 2
_HEAD = struct.Struct("<4sBqqI")
_PRODUCER_V1 = struct.Struct("<qhiqqqqB")
_PRODUCER = struct.Struct("<qhiqqqqqqBhqqqiB")
_RECENT = struct.Struct("<iiqq")
_COUNT = struct.Struct("<I")
_ABORTED = struct.Struct("<qqq")
_NO_MARKER, _COMMIT, _ABORT = 0, 1, 2


def encode(
    applied_offset: int, log_clock_ms: int, producers: list[ProducerState], aborted: AbortedIndex
) -> bytes:
    """Encode a table's parts; ``producers`` in recency order (least recent first)."""
    out = [_HEAD.pack(MAGIC, FORMAT, applied_offset, log_clock_ms, len(producers))]
    for p in producers:
        tx = p.open_tx
        m = p.last_marker
        out.append(
            _PRODUCER.pack(
                p.producer_id,
                p.epoch,
                p.last_sequence,
                p.last_committed_version,
                p.last_activity_ms,
                -1 if tx is None else tx.first_offset,
                0 if tx is None else tx.start_ms,
                0 if tx is None else tx.record_count,
                p.transaction_timeout_ms,
                _NO_MARKER if m is None else _COMMIT if m.commit else _ABORT,
                -1 if m is None else m.requested_epoch,
                -1 if m is None else m.offset,
                -1 if m is None else m.version,
                -1 if m is None else m.record_count,
                -1 if m is None else m.last_sequence,
                len(p.recent),
            )
        )
        out.extend(
            _RECENT.pack(r.first_sequence, r.last_sequence, r.base_offset, r.last_offset)
            for r in p.recent
        )
    entries = list(aborted.entries())
    out.append(_COUNT.pack(len(entries)))
    out.extend(_ABORTED.pack(*e) for e in entries)
    return b"".join(out)


def _decode_producer(view: memoryview, pos: int, fmt: int) -> tuple[ProducerState, int, int]:
    """One producer's fixed part; returns (state, recent count, new position)."""
    if fmt == 1:
        pid, epoch, last_seq, version, activity, tx_first, tx_start, n = _PRODUCER_V1.unpack_from(
            view, pos
        )
        tx_count, timeout, marker = 0, -1, None
        pos += _PRODUCER_V1.size
    else:
        (
            pid,
            epoch,
            last_seq,
            version,
            activity,
            tx_first,
            tx_start,
            tx_count,
            timeout,
            kind,
            m_epoch,
            m_offset,
            m_version,
            m_count,
            m_last,
            n,
        ) = _PRODUCER.unpack_from(view, pos)
        pos += _PRODUCER.size
        if kind not in (_NO_MARKER, _COMMIT, _ABORT):
            raise ValueError(f"rm_stm snapshot: producer {pid} has last marker kind {kind}")
        marker = (
            None
            if kind == _NO_MARKER
            else LastMarker(kind == _COMMIT, m_epoch, m_offset, m_version, m_count, m_last)
        )
    state = ProducerState(
        pid,
        epoch,
        last_sequence=last_seq,
        last_committed_version=version,
        open_tx=None if tx_first < 0 else OpenTransaction(tx_first, tx_start, tx_count),
        last_activity_ms=activity,
        transaction_timeout_ms=timeout,
        last_marker=marker,
    )
    return state, n, pos


def decode(data: bytes) -> tuple[int, int, list[ProducerState], AbortedIndex]:
    """Decode a snapshot; raises ValueError naming what is wrong when it is malformed."""
    view = memoryview(data)
    try:
        magic, fmt, applied, log_clock, count = _HEAD.unpack_from(view, 0)
        if magic != MAGIC:
            raise ValueError(f"rm_stm snapshot must start with {MAGIC!r}, got {bytes(magic)!r}")
        if fmt not in (1, FORMAT):
            raise ValueError(f"rm_stm snapshot format must be 1 or {FORMAT}, got {fmt}")
        pos = _HEAD.size
        producers = []
        for _ in range(count):
            state, n, pos = _decode_producer(view, pos, fmt)
            if n > SEQUENCE_CACHE:
                raise ValueError(
                    f"rm_stm snapshot: producer {state.producer_id} has {n} recent batches, "
                    f"at most {SEQUENCE_CACHE} allowed"
                )
            for _ in range(n):
                state.recent.append(SequenceRecord(*_RECENT.unpack_from(view, pos)))
                pos += _RECENT.size
            producers.append(state)
        (n_aborted,) = _COUNT.unpack_from(view, pos)
        pos += _COUNT.size
        aborted = AbortedIndex()
        for _ in range(n_aborted):
            aborted.add(*_ABORTED.unpack_from(view, pos))
            pos += _ABORTED.size
    except struct.error as exc:
        raise ValueError(f"rm_stm snapshot is truncated ({len(data)} bytes): {exc}") from exc
    if pos != len(data):
        raise ValueError(f"rm_stm snapshot has {len(data) - pos} trailing bytes after byte {pos}")
    return applied, log_clock, producers, aborted
