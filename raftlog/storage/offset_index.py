"""The sparse offset index of one segment: batch base offset -> byte position.

An entry is added for the first batch that starts at least
``interval_bytes`` after the previous entry, so a lookup lands at most
about one interval (plus one batch) before the wanted batch; position 0 (the
segment's base offset) is implied and never stored.

The index file is a hint derived from the log file, written only for data
that is already fsynced (so an entry never points past durable data after a
crash): entries are appended on flush and the file is rewritten and fsynced
when the segment is sealed, truncated or recovered. Layout: a sequence of
16-byte little-endian entries ``offset:i64 position:i64``, both strictly
increasing.
"""

from __future__ import annotations

import bisect
import pathlib
import struct

from raftlog.storage.fs import REAL_FS, FileSystem

ENTRY = struct.Struct("<qq")


def read_index_file(path: pathlib.Path, fs: FileSystem = REAL_FS) -> list[tuple[int, int]] | None:
    """The whole entries of an index file (a torn trailing entry is ignored); None if missing."""
    data = fs.read_file(path)
    if data is None:
        return None
    whole = len(data) - len(data) % ENTRY.size
    return [ENTRY.unpack_from(data, pos) for pos in range(0, whole, ENTRY.size)]


def read_last_index_entry(path: pathlib.Path, fs: FileSystem = REAL_FS) -> tuple[int, int] | None:
    """Only the last whole entry of an index file (one small read); None if missing or empty."""
    try:
        f = fs.open(path)
    except FileNotFoundError:
        return None
    try:
        size = f.size()
        whole = size - size % ENTRY.size
        if whole == 0:
            return None
        return ENTRY.unpack(f.pread(ENTRY.size, whole - ENTRY.size))
    finally:
        f.close()


class OffsetIndex:
    """In-memory sparse index of one segment plus its on-disk file.

    Invariant: offsets and positions strictly increase; every entry points at
    the start of a batch whose base offset is the entry's offset.
    """

    def __init__(
        self,
        path: pathlib.Path,
        base_offset: int,
        interval_bytes: int,
        entries: list[tuple[int, int]] | None = None,
        *,
        persisted: bool = False,
        fs: FileSystem = REAL_FS,
    ) -> None:
        self.path = path
        self._fs = fs
        self._base = base_offset
        self._interval = interval_bytes
        self._offsets: list[int] = [o for o, _ in entries or ()]
        self._positions: list[int] = [p for _, p in entries or ()]
        # How many leading entries the file already holds; None forces a rewrite.
        self._persisted: int | None = len(self._offsets) if persisted else None

    def __len__(self) -> int:
        return len(self._offsets)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._offsets, self._positions, strict=True))

    def add(self, offset: int, position: int) -> None:
        """Note that a batch with base ``offset`` starts at ``position`` (called per batch)."""
        last = self._positions[-1] if self._positions else 0
        if position - last >= self._interval:
            self._offsets.append(offset)
            self._positions.append(position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """The (offset, position) of the last indexed batch starting at or before ``offset``."""
        i = bisect.bisect_right(self._offsets, offset) - 1
        if i < 0:
            return self._base, 0
        return self._offsets[i], self._positions[i]

    def truncate(self, offset: int) -> None:
        """Forget every entry at or after ``offset``."""
        i = bisect.bisect_left(self._offsets, offset)
        if i < len(self._offsets):
            del self._offsets[i:]
            del self._positions[i:]
            if self._persisted is not None and self._persisted > i:
                self._persisted = None

    def persist(self, *, fsync: bool, upto: int | None = None) -> None:
        """Bring the file up to date: append new entries, or rewrite it after a truncation.

        ``upto``: persist only the first ``upto`` entries (those of the data a flush
        made durable; later ones are for data written while it ran). The count
        persisted never goes back: entries already in the file stay.
        """
        end = len(self._offsets) if upto is None else min(upto, len(self._offsets))
        rewrite = self._persisted is None
        start = 0 if self._persisted is None else self._persisted
        if not rewrite and start >= end and not fsync:
            return
        data = b"".join(
            ENTRY.pack(o, p)
            for o, p in zip(self._offsets[start:end], self._positions[start:end], strict=True)
        )
        f = self._fs.open(self.path, create=True)
        try:
            if rewrite:
                f.truncate(0)
                at = 0
            else:
                # Append after the whole entries persisted so far (a torn entry is overwritten).
                at = start * ENTRY.size
            if data:
                f.pwrite(data, at)
            if f.size() > at + len(data):  # stale entries past the ones persisted
                f.truncate(at + len(data))
            if fsync:
                f.fsync()
        finally:
            f.close()
        self._persisted = max(start, end)
