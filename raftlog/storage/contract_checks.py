"""The argument checks of the LogStorage contract, shared by every implementation.

The on-disk log and the simulator's in-memory log must refuse the same inputs
with the same messages: the simulator stands in for the disk only as long as
the two agree. Each check raises ValueError naming the expected and got values.
"""

from __future__ import annotations

from collections.abc import Sequence

from raftlog.storage.batch import RecordBatch


def check_append(batches: Sequence[RecordBatch], dirty_offset: int, last_term: int) -> None:
    """Each batch starts right after the previous one (the first at ``dirty_offset + 1``)
    and terms do not decrease. Checked for all batches before any is written."""
    expected, term = dirty_offset + 1, last_term
    for i, batch in enumerate(batches):
        if batch.base_offset != expected:
            raise ValueError(
                f"batch {i} is not contiguous with the log: expected base offset "
                f"{expected}, got {batch.base_offset}"
            )
        if batch.term < term:
            raise ValueError(
                f"batch {i} has term {batch.term}, lower than the log's term {term}; "
                "terms must not decrease"
            )
        expected, term = batch.last_offset + 1, batch.term


def check_read_start(start: int, start_offset: int) -> None:
    if start < start_offset:
        raise ValueError(
            f"read start {start} is below the log start offset {start_offset} (prefix-truncated)"
        )


def check_truncate_offset(offset: int, start_offset: int, dirty_offset: int) -> None:
    """``offset`` lies within the log (truncating at ``dirty_offset + 1`` is a no-op the
    caller handles before calling this)."""
    if not start_offset <= offset <= dirty_offset:
        raise ValueError(
            f"truncate offset must be within the log [{start_offset}, {dirty_offset + 1}], "
            f"got {offset}"
        )


def check_batch_boundary(offset: int, batch: RecordBatch) -> None:
    """``offset`` is the base offset of ``batch``, the batch that holds it."""
    if batch.base_offset != offset:
        raise ValueError(
            f"truncate offset {offset} is not a batch boundary: it lies inside the batch "
            f"of offsets {batch.base_offset}..{batch.last_offset}"
        )


def check_prefix_truncate_offset(offset: int, dirty_offset: int) -> None:
    if offset > dirty_offset + 1:
        raise ValueError(
            f"prefix_truncate offset must be at most dirty_offset + 1 = {dirty_offset + 1}, "
            f"got {offset}"
        )


def flushed_after_flush(flushed: int, recorded: int, dirty: int, truncated_since: bool) -> int:
    """The flushed offset once a flush prepared at dirty offset ``recorded`` has fsynced.

    Only ``recorded`` becomes durable: batches appended while the fsync ran stay
    dirty until the next flush. A suffix truncation since the flush was prepared
    voids its claim (the offsets above the cut may hold other batches by now);
    the offset never goes back (a roll may have sealed more meanwhile) and never
    passes ``dirty``.
    """
    if truncated_since:
        return flushed
    return max(flushed, min(recorded, dirty))


def check_offsets(start_offset: int, flushed_offset: int, dirty_offset: int) -> None:
    """The offsets invariant ``start_offset - 1 <= flushed_offset <= dirty_offset``."""
    if not start_offset - 1 <= flushed_offset <= dirty_offset:
        raise ValueError(
            f"log offsets broken: start {start_offset}, flushed {flushed_offset}, dirty "
            f"{dirty_offset}; want start - 1 <= flushed <= dirty"
        )
