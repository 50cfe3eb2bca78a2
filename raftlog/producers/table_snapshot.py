"""The producer table's snapshot format: compact, versioned, little-endian.

Layout::

    magic b"RMST", format u8 (1), applied_offset i64, log_clock_ms i64, producer count u32
    per producer (least recently active first):
        producer_id i64, epoch i16, last_sequence i32, last_committed_version i64,
        last_activity_ms i64, open_tx_first_offset i64 (-1: none), open_tx_start_ms i64,
        recent count u8, then per recent batch:
            first_sequence i32, last_sequence i32, base_offset i64, last_offset i64
    aborted range count u32, then per range: producer_id i64, first_offset i64, last_offset i64

The order of producers is kept, so a restored table evicts in the same order
as the one snapshotted.
"""

from __future__ import annotations

import struct

from raftlog.producers.aborted_index import AbortedIndex
from raftlog.producers.producer_state import (
    SEQUENCE_CACHE,
    OpenTransaction,
    ProducerState,
    SequenceRecord,
)

MAGIC = b"RMST"
FORMAT = 1
_HEAD = struct.Struct("<4sBqqI")
_PRODUCER = struct.Struct("<qhiqqqqB")
_RECENT = struct.Struct("<iiqq")
_COUNT = struct.Struct("<I")
_ABORTED = struct.Struct("<qqq")


def encode(
    applied_offset: int, log_clock_ms: int, producers: list[ProducerState], aborted: AbortedIndex
) -> bytes:
    """Encode a table's parts; ``producers`` in recency order (least recent first)."""
    out = [_HEAD.pack(MAGIC, FORMAT, applied_offset, log_clock_ms, len(producers))]
    for p in producers:
        tx = p.open_tx
        out.append(
            _PRODUCER.pack(
                p.producer_id,
                p.epoch,
                p.last_sequence,
                p.last_committed_version,
                p.last_activity_ms,
                -1 if tx is None else tx.first_offset,
                0 if tx is None else tx.start_ms,
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


def decode(data: bytes) -> tuple[int, int, list[ProducerState], AbortedIndex]:
    """Decode a snapshot; raises ValueError naming what is wrong when it is malformed."""
    view = memoryview(data)
    try:
        magic, fmt, applied, log_clock, count = _HEAD.unpack_from(view, 0)
        if magic != MAGIC:
            raise ValueError(f"rm_stm snapshot must start with {MAGIC!r}, got {bytes(magic)!r}")
        if fmt != FORMAT:
            raise ValueError(f"rm_stm snapshot format must be {FORMAT}, got {fmt}")
        pos = _HEAD.size
        producers = []
        for _ in range(count):
            pid, epoch, last_seq, version, activity, tx_first, tx_start, n = _PRODUCER.unpack_from(
                view, pos
            )
            pos += _PRODUCER.size
            if n > SEQUENCE_CACHE:
                raise ValueError(
                    f"rm_stm snapshot: producer {pid} has {n} recent batches, "
                    f"at most {SEQUENCE_CACHE} allowed"
                )
            state = ProducerState(
                pid,
                epoch,
                last_sequence=last_seq,
                last_committed_version=version,
                open_tx=None if tx_first < 0 else OpenTransaction(tx_first, tx_start),
                last_activity_ms=activity,
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
