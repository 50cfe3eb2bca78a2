"""Planning Spark input partitions from per-partition offset ranges.

One Spark input partition per topic partition with data, as Kafka's source
does. With ``minPartitions`` larger than that, ranges are cut further, in
proportion to their size (every non-empty range keeps at least one split), so
one big partition can be read by several tasks in parallel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from _typeshed import SupportsRichComparison

__all__ = ["Split", "split_ranges"]

#: a partition's key: its number, or (topic, number); keys are sorted
K = TypeVar("K", bound="SupportsRichComparison")

Split = tuple[K, int, int]
"""(topic partition, start offset, end offset): read offsets ``[start, end)``."""


def split_ranges(
    ranges: Mapping[K, tuple[int, int]], min_partitions: int | None = None
) -> list[Split[K]]:
    """Splits covering every non-empty range exactly once, in partition and offset order.

    Empty ranges (``end <= start``) are dropped. Splits of one partition are
    contiguous and nearly equal (sizes differ by at most one offset).
    """
    sizes = {p: end - start for p, (start, end) in sorted(ranges.items()) if end > start}
    if not sizes:
        return []
    total = sum(sizes.values())
    want = max(min_partitions or 0, len(sizes))
    out: list[Split[K]] = []
    for p, size in sizes.items():
        start = ranges[p][0]
        pieces = min(size, max(1, round(want * size / total)))
        step, extra = divmod(size, pieces)
        for i in range(pieces):
            length = step + (1 if i < extra else 0)
            out.append((p, start, start + length))
            start += length
    return out
