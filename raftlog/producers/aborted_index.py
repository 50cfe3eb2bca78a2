"""The aborted-transaction index: which offset ranges of which producer were aborted.

Each entry is ``(producer_id, first_offset, last_offset)``: the first offset
of the aborted transaction and the offset of the marker (or fence, or
newer-epoch batch) that ended it. Ranges of one producer never overlap,
because a producer has at most one open transaction. Entries are added in log
order, so each producer's list is sorted by ``first_offset`` and a lookup is a
bisection. ``prefix_truncate`` drops ranges wholly below the log start, which
is what bounds the index (as Kafka's per-segment ``.txnindex`` is bounded by
retention).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator


class AbortedIndex:
    """Aborted transaction ranges per producer."""

    def __init__(self) -> None:
        # producer id -> (first offsets, last offsets), parallel sorted lists
        self._ranges: dict[int, tuple[list[int], list[int]]] = {}

    def add(self, producer_id: int, first_offset: int, last_offset: int) -> None:
        """Record an aborted range; ranges of one producer must come in offset order."""
        if last_offset < first_offset:
            raise ValueError(
                f"aborted range last_offset {last_offset} is before first_offset {first_offset}"
            )
        firsts, lasts = self._ranges.setdefault(producer_id, ([], []))
        if lasts and first_offset <= lasts[-1]:
            raise ValueError(
                f"aborted range [{first_offset}, {last_offset}] of producer {producer_id} "
                f"overlaps or precedes the previous range ending at {lasts[-1]}"
            )
        firsts.append(first_offset)
        lasts.append(last_offset)

    def is_aborted(self, producer_id: int, offset: int) -> bool:
        """Whether ``offset`` lies in an aborted range of ``producer_id``."""
        ranges = self._ranges.get(producer_id)
        if ranges is None:
            return False
        firsts, lasts = ranges
        i = bisect.bisect_right(firsts, offset) - 1
        return i >= 0 and offset <= lasts[i]

    def prefix_truncate(self, start_offset: int) -> None:
        """Drop ranges that end below ``start_offset`` (the log start after retention)."""
        for pid in list(self._ranges):
            firsts, lasts = self._ranges[pid]
            keep = bisect.bisect_left(lasts, start_offset)
            del firsts[:keep]
            del lasts[:keep]
            if not firsts:
                del self._ranges[pid]

    def entries(self) -> Iterator[tuple[int, int, int]]:
        """Every ``(producer_id, first_offset, last_offset)``, grouped by producer, in order."""
        for pid, (firsts, lasts) in self._ranges.items():
            for first, last in zip(firsts, lasts, strict=True):
                yield pid, first, last

    def __len__(self) -> int:
        return sum(len(firsts) for firsts, _ in self._ranges.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, AbortedIndex):
            return NotImplemented
        return self._ranges == other._ranges
