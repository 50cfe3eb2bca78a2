"""The one-line summary the sink logs when Spark commits (or aborts) a write."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["summarize"]


def summarize(topic: str, label: str, messages: Sequence[object | None]) -> str:
    """E.g. ``raftlog sink: topic 'events' batch 7: 1200 records, 96.0 KiB in 4 tasks to
    partitions p0 [0..299], p1 [0..299]; 2 tasks replayed; 1 task failed``.

    ``messages`` are the tasks' commit messages (objects with ``.write``, a
    PartitionWrite) or None for a task that failed. Offset ranges are merged per
    topic partition.
    """
    ok = [m for m in messages if m is not None]
    failed = len(messages) - len(ok)
    # a task that wrote several topic partitions lists them all in `.writes` (the
    # messages are typed object: the sink's commit message classes, read by duck typing)
    writes = [w for m in ok for w in (getattr(m, "writes", ()) or (m.write,))]  # type: ignore[attr-defined]
    records = sum(w.records for w in writes)
    size = sum(w.bytes for w in writes)
    replayed = sum(1 for w in writes if w.replayed)
    ranges: dict[tuple[str, int], tuple[int, int]] = {}
    for w in writes:
        if w.base_offset < 0:
            continue
        where = ("" if getattr(w, "topic", "") in ("", topic) else w.topic, w.topic_partition)
        lo, hi = ranges.get(where, (w.base_offset, w.last_offset))
        ranges[where] = (min(lo, w.base_offset), max(hi, w.last_offset))
    parts = ", ".join(
        f"{t + ':' if t else ''}p{p} [{lo}..{hi}]" for (t, p), (lo, hi) in sorted(ranges.items())
    )
    line = (
        f"raftlog sink: topic {topic!r} {label}: {records} records, {_size(size)} "
        f"in {len(ok)} tasks"
    )
    if parts:
        line += f" to partitions {parts}"
    if replayed:
        line += f"; {replayed} tasks replayed (already committed, skipped)"
    if failed:
        line += f"; {failed} tasks failed"
    return line


def _size(n: int) -> str:
    value: float = n  # still the int n when printed in B
    for unit in ("B", "KiB", "MiB"):
        if value < 1024 or unit == "MiB":
            return f"{value} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value} B"  # unreachable: the loop returns at MiB
