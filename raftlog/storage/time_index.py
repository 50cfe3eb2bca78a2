"""The sparse time index of one segment: largest batch timestamp so far -> batch base offset.

It answers "from which offset can the first batch with ``timestamp_ms >= T``
be found" without scanning the segment from its start (the source's
``startingTimestamp``; Kafka's ListOffsets by timestamp).

An entry ``(max_ts, offset)`` says: every batch of the segment up to and
including the one with base ``offset`` has a timestamp at most ``max_ts``
(``max_ts`` is the running maximum, so the rule holds even when a leader's
clock stepped back). Entries are added for the first batch at least
``interval_bytes`` after the previous entry whose running maximum grew, so
both fields strictly increase. A lookup for ``T`` starts at the last entry
with ``max_ts < T``: nothing at or before it qualifies, so the scan from
there finds the first batch with ``timestamp_ms >= T`` after decoding about
one interval of batches.

Like the offset index, the file is a hint derived from the log, written only
for fsynced data and through the :mod:`raftlog.storage.fs` seam (appended on
flush, rewritten on truncation). It is never trusted blindly: a missing,
torn or inconsistent file is dropped and rebuilt by scanning the segment, and
the part of the segment after the file's last entry (written since the last
flush) is scanned when the index is loaded. Layout: 16-byte little-endian
entries ``max_ts:i64 offset:i64``. The file is ``<segment>.timeindex``.
"""

from __future__ import annotations

import bisect
import pathlib
import struct

from raftlog.storage.fs import REAL_FS, FileSystem

ENTRY = struct.Struct("<qq")
TIME_INDEX_SUFFIX = ".timeindex"


def read_time_index_file(
    path: pathlib.Path, fs: FileSystem = REAL_FS
) -> list[tuple[int, int]] | None:
    """The whole entries of a time index file (a torn trailing entry is ignored); None if
    missing."""
    data = fs.read_file(path)
    if data is None:
        return None
    whole = len(data) - len(data) % ENTRY.size
    return [ENTRY.unpack_from(data, pos) for pos in range(0, whole, ENTRY.size)]


def valid_entries(entries: list[tuple[int, int]], base_offset: int, last_offset: int) -> bool:
    """Whether ``entries`` can belong to a segment holding ``base_offset..last_offset``:
    timestamps positive and offsets inside it, both strictly increasing."""
    prev_ts, prev_off = 0, base_offset - 1
    for ts, off in entries:
        if not (ts > prev_ts and prev_off < off <= last_offset):
            return False
        prev_ts, prev_off = ts, off
    return True


class TimeIndex:
    """In-memory sparse time index of one segment plus its on-disk file.

    Invariant: timestamps and offsets strictly increase; for every entry
    ``(ts, off)`` no batch at or below ``off`` has a timestamp above ``ts``.
    """

    def __init__(
        self,
        path: pathlib.Path,
        interval_bytes: int,
        entries: list[tuple[int, int]] | None = None,
        *,
        persisted: bool = False,
        fs: FileSystem = REAL_FS,
    ) -> None:
        self.path = path
        self._fs = fs
        self._interval = interval_bytes
        self._stamps: list[int] = [t for t, _ in entries or ()]
        self._offsets: list[int] = [o for _, o in entries or ()]
        self._positions: list[int] = []  # positions of entries added in this process (hint)
        self._last_position = -interval_bytes  # so the first eligible batch gets an entry
        self._running_max = self._stamps[-1] if self._stamps else 0
        # How many leading entries the file already holds; None forces a rewrite.
        self._persisted: int | None = len(self._stamps) if persisted else None

    def __len__(self) -> int:
        return len(self._stamps)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._stamps, self._offsets, strict=True))

    @property
    def last_offset(self) -> int | None:
        """The offset of the last entry (None when empty)."""
        return self._offsets[-1] if self._offsets else None

    def add(self, timestamp_ms: int, offset: int, position: int) -> None:
        """Note the batch with base ``offset`` at byte ``position`` (called per batch, in order)."""
        if timestamp_ms > self._running_max:
            self._running_max = timestamp_ms
        if (
            self._running_max > (self._stamps[-1] if self._stamps else 0)
            and position - self._last_position >= self._interval
            and (not self._offsets or offset > self._offsets[-1])
        ):
            self._stamps.append(self._running_max)
            self._offsets.append(offset)
            self._last_position = position

    def lookup(self, timestamp_ms: int) -> int | None:
        """The offset of the last entry whose timestamp is below ``timestamp_ms`` (None: scan
        from the segment's start). No batch at or before it has a timestamp >= ``timestamp_ms``."""
        i = bisect.bisect_left(self._stamps, timestamp_ms) - 1
        return self._offsets[i] if i >= 0 else None

    def truncate(self, offset: int) -> None:
        """Forget every entry at or after ``offset`` (the batches there are gone)."""
        i = bisect.bisect_left(self._offsets, offset)
        if i < len(self._offsets):
            del self._offsets[i:]
            del self._stamps[i:]
            if self._persisted is not None and self._persisted > i:
                self._persisted = None
        # The running maximum stays: an upper bound keeps the entry rule true.

    def persist(self, *, fsync: bool, upto: int | None = None) -> None:
        """Bring the file up to date: append new entries, or rewrite it after a truncation.

        ``upto``: persist only the first ``upto`` entries (those of the data a flush
        made durable; later ones are for data written while it ran). The count
        persisted never goes back: entries already in the file stay.
        """
        end = len(self._stamps) if upto is None else min(upto, len(self._stamps))
        rewrite = self._persisted is None
        start = 0 if self._persisted is None else self._persisted
        if not rewrite and start >= end and not fsync:
            return
        data = b"".join(
            ENTRY.pack(t, o)
            for t, o in zip(self._stamps[start:end], self._offsets[start:end], strict=True)
        )
        f = self._fs.open(self.path, create=True)
        try:
            at = 0 if rewrite else start * ENTRY.size
            if rewrite:
                f.truncate(0)
            if data:
                f.pwrite(data, at)
            if f.size() > at + len(data):  # stale or torn entries past the ones kept
                f.truncate(at + len(data))
            if fsync:
                f.fsync()
        finally:
            f.close()
        self._persisted = max(start, end)
