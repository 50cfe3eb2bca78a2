"""One segment: a file of contiguous record batches of a single term, plus its index.

A segment's file is named ``<base offset:020>-<term:020>.log`` (its index:
``.index``), so the log lists segments and knows every segment's term
without reading a byte. A segment holds batches of exactly one term
(segments roll on every term change), which is what lets ``term_at`` answer
from metadata.

Invariants: batches are contiguous from ``base_offset``; ``size`` is the
byte length of the valid batches; ``last_offset`` is the last offset of the
last batch (``base_offset - 1`` while empty); every batch has ``term``.

Timestamps (for ``retention.ms`` and ``segment.ms``): ``first_timestamp_ms``
is the first positive batch timestamp and ``max_timestamp_ms`` the largest
one, ``-1`` while unknown. They are exact for batches appended in this
process; for a segment opened from disk they come from the batches that
recovery reads (the first and the last ones), which is exact as long as the
leader's clock did not go back, since timestamps are its append times.
Batches with timestamp 0 (a new leader's no-op) never count.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import pathlib
import re
import struct
import threading
from collections.abc import Callable, Iterator, Sequence

from raftlog.storage.api import StorageCorruption
from raftlog.storage.batch import (
    HEADER_SIZE,
    BatchError,
    BatchHeader,
    RecordBatch,
    decode_header,
)
from raftlog.storage.fs import REAL_FS, DiskFull, FileHandle, FileSystem, is_disk_full
from raftlog.storage.offset_index import OffsetIndex, read_index_file
from raftlog.storage.time_index import (
    TIME_INDEX_SUFFIX,
    TimeIndex,
    read_time_index_file,
    valid_entries,
)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
_NAME = re.compile(r"^(\d{20})-(\d{20})\.log$")
_PAYLOAD_LEN = struct.Struct("<I")
_READ_CHUNK = 256 * 1024
# A header walk's read: a header and, when batches are small, the next few with it.
_HEADER_READ = 4096
CACHE_KEEP_BYTES = 16 * 1024 * 1024
"""Bytes of flushed data at the end of the active segment left in the page cache.

Flushed data further back is dropped from it (``FileHandle.drop_cache``), and a
sealed segment's all at once. A log written for hours would otherwise fill memory
with pages nobody reads: every write then takes a page the kernel has not handed
out before, and on a VM that first touch is a fault in the host (measured on the
2-core benchmark VM: 2.4 ms of kernel time per MiB written, against 0.3 ms when the
written pages are dropped once flushed). Redpanda bypasses the page cache (O_DIRECT)
and keeps recent batches in its own cache; this window serves the same readers,
those at the tail (the followers' recovery, the applier, consumers keeping up).

Two ranges that recovery reads on every open stay cached for good: a segment's
first batch and, once sealed, its bytes from the last index entry on
(``verify_sealed_segment`` reads headers in those ranges only). Dropping them made opening a
1 GiB log take 2.4 times as long as a 10 MiB one, every sealed segment costing
two reads from the disk."""
_AT_BYTE = re.compile(r"at byte \d+")


def segment_name(base_offset: int, term: int) -> str:
    return f"{base_offset:020d}-{term:020d}{LOG_SUFFIX}"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """(base offset, term) of a segment file name; None when ``name`` is not a segment."""
    match = _NAME.match(name)
    if match is None:
        return None
    return int(match.group(1)), int(match.group(2))


class SegmentDecodeError(Exception):
    """A batch in a segment is invalid at ``position`` (torn, corrupt or out of sequence)."""

    def __init__(self, message: str, path: pathlib.Path, position: int) -> None:
        super().__init__(message)
        self.path = path
        self.position = position

    def as_corruption(self) -> StorageCorruption:
        return StorageCorruption(str(self), str(self.path), self.position)


@dataclasses.dataclass(frozen=True, slots=True)
class SyncPoint:
    """What a flush of one segment covers, taken on the event loop before its fsync:
    the index entries of the data written by then (entries added later may point at
    data that fsync does not cover, so that flush does not persist them)."""

    segment: Segment
    size: int  # the bytes of data written by then
    index_entries: int
    time_index_entries: int | None  # None: the time index was not loaded


class Segment:
    """One segment file; reads and writes go through a lazily opened descriptor.

    Not thread-safe, except :meth:`sync`: one thread may fsync (and persist the
    indexes) while another appends; the index files are written under a lock.
    """

    def __init__(
        self,
        directory: pathlib.Path,
        base_offset: int,
        term: int,
        *,
        size: int,
        last_offset: int,
        index_interval_bytes: int,
        index: OffsetIndex | None = None,
        fs: FileSystem = REAL_FS,
    ) -> None:
        name = segment_name(base_offset, term)
        self.fs = fs
        self.path = directory / name
        self.base_offset = base_offset
        self.term = term
        self.size = size
        self.last_offset = last_offset
        self._interval = index_interval_bytes
        self._index = index  # None: not loaded yet (sealed segments load on first read)
        self._time_index: TimeIndex | None = None  # loaded on first append or time lookup
        self._fd: FileHandle | None = None
        # Called when the descriptor opens and closes (the log's count, for the node's
        # bound on open files: raftlog.storage.open_files); None: nobody counts.
        self.on_open: Callable[[], None] | None = None
        self.on_close: Callable[[], None] | None = None
        # Bytes before this position are out of the page cache (see CACHE_KEEP_BYTES),
        # except the first batch's, which are never dropped.
        self._cache_dropped_to = 0
        self._head_bytes = 0  # the first batch's size once known (0: not known yet)
        self.first_timestamp_ms = -1
        self.max_timestamp_ms = -1
        # Held while the index files are written: a flush's sync (in a thread) and a
        # roll's seal (on the event loop) may persist them at the same time.
        self._persist_lock = threading.Lock()
        # The size up to which data and both index files were fsynced ahead of a roll
        # (SegmentedLog.seal_ahead, in a thread); -1: never. The roll skips its seal
        # when nothing was appended since.
        self.sealed_size = -1

    # Made on first use: opening a log builds a Segment per file, and most never need them.
    @functools.cached_property
    def index_path(self) -> pathlib.Path:
        return self.path.with_suffix(INDEX_SUFFIX)

    @functools.cached_property
    def time_index_path(self) -> pathlib.Path:
        return self.path.with_suffix(TIME_INDEX_SUFFIX)

    @classmethod
    def create(
        cls,
        directory: pathlib.Path,
        base_offset: int,
        term: int,
        index_interval_bytes: int,
        fs: FileSystem = REAL_FS,
    ) -> Segment:
        """A new empty segment and its empty index file.

        Both names are new: the caller fsyncs the directory before relying on
        either (the index is created now so that the same directory fsync covers it).
        """
        seg = cls(
            directory,
            base_offset,
            term,
            size=0,
            last_offset=base_offset - 1,
            index_interval_bytes=index_interval_bytes,
            fs=fs,
        )
        seg._index = OffsetIndex(seg.index_path, base_offset, index_interval_bytes, fs=fs)
        seg._fd = fs.open(seg.path, exclusive=True)
        fs.open(seg.index_path, create=True).close()
        seg._time_index = TimeIndex(seg.time_index_path, index_interval_bytes, fs=fs)
        seg._time_index.persist(fsync=False)  # empty; a leftover file of that name is cut
        return seg

    # -- descriptors ------------------------------------------------------------------------

    @property
    def fd(self) -> FileHandle:
        """The open file (opened on first use)."""
        if self._fd is None:
            self._fd = self.fs.open(self.path)
            if self.on_open is not None:
                self.on_open()
        return self._fd

    @property
    def is_open(self) -> bool:
        return self._fd is not None

    def close(self) -> None:
        """Close the descriptor (reopened on next use); never while a thread uses it."""
        if self._fd is not None:
            self._fd.close()
            self._fd = None
            if self.on_close is not None:
                self.on_close()

    def delete(self) -> None:
        """Close and unlink the log and index files (the caller fsyncs the directory).

        The log file goes first: a crash in between leaves an orphan index, which
        open removes, never a segment without its index that looks sealed.
        """
        self.close()
        self.fs.unlink(self.path, missing_ok=True)
        self.fs.unlink(self.index_path, missing_ok=True)
        self.fs.unlink(self.time_index_path, missing_ok=True)

    # -- index --------------------------------------------------------------------------------

    @property
    def index(self) -> OffsetIndex:
        if self._index is None:
            self._index = self._load_sealed_index()
        return self._index

    def _load_sealed_index(self) -> OffsetIndex:
        """Load a sealed segment's index strictly: a malformed index is corruption.

        A missing index file (e.g. deleted by hand) is rebuilt by one scan of the
        segment, which also verifies every batch.
        """
        entries = read_index_file(self.index_path, self.fs)
        if entries is None:
            index = OffsetIndex(self.index_path, self.base_offset, self._interval, fs=self.fs)
            for pos, batch in self.scan(0, self.base_offset, self.size):
                index.add(batch.base_offset, pos)
            return index
        prev_offset, prev_pos = self.base_offset, 0
        for i, (offset, pos) in enumerate(entries):
            if not (prev_offset < offset <= self.last_offset and prev_pos < pos < self.size):
                raise StorageCorruption(
                    f"{self.index_path}: entry {i} at position {i * 16} "
                    f"(offset {offset} -> position {pos}) is out of order or outside "
                    f"{self.path.name} (offsets {self.base_offset}..{self.last_offset}, "
                    f"{self.size} bytes)",
                    str(self.index_path),
                    i * 16,
                )
            prev_offset, prev_pos = offset, pos
        return OffsetIndex(
            self.index_path, self.base_offset, self._interval, entries, persisted=True, fs=self.fs
        )

    def set_index(self, index: OffsetIndex) -> None:
        self._index = index

    @property
    def time_index(self) -> TimeIndex:
        """The time index: the file's entries when they fit this segment (else none, and
        the file is rewritten), extended by a scan of the batches after the last entry."""
        if self._time_index is None:
            entries = read_time_index_file(self.time_index_path, self.fs)
            ok = entries is not None and valid_entries(entries, self.base_offset, self.last_offset)
            index = TimeIndex(
                self.time_index_path,
                self._interval,
                entries if ok else None,
                persisted=ok,
                fs=self.fs,
            )
            after = index.last_offset
            if self.size > 0:
                start = self.base_offset if after is None else after + 1
                if start <= self.last_offset:
                    for pos, batch in self.iter_from(start):
                        if batch.base_offset >= start:
                            index.add(batch.timestamp_ms, batch.base_offset, pos)
            self._time_index = index
        return self._time_index

    def find_timestamp(self, timestamp_ms: int, last: int) -> tuple[int, int] | None:
        """(base offset, timestamp) of the first data batch with ``timestamp_ms >=
        timestamp_ms`` and base offset at most ``last``; None when there is none in this
        segment.

        Control batches are passed over: they hold no records, and their stamps need not
        follow the data's (rm_stm's sync barrier is stamped after the first write of a
        term was, yet written before it, so it may carry a later stamp than the data
        behind it: a reader positioned there would read records older than the
        timestamp). Starts from the time index's entry below ``timestamp_ms``, so it
        decodes about one index interval of batches that do not qualify.
        """
        if last < self.base_offset or self.size == 0:
            return None
        start = self.time_index.lookup(timestamp_ms)
        for _, batch in self.iter_from(self.base_offset if start is None else start + 1):
            if batch.base_offset > last:
                return None
            if batch.timestamp_ms >= timestamp_ms and not batch.is_control:
                return batch.base_offset, batch.timestamp_ms
        return None

    # -- writing ------------------------------------------------------------------------------

    def append(self, batches: Sequence[RecordBatch]) -> None:
        """Write ``batches`` (already checked contiguous, of this term) at the end; no fsync.

        All or nothing: when the write fails (a full disk: :class:`DiskFull`), what
        part of it reached the file is cut off again and the segment (size, offsets,
        indexes) is as it was before the call.
        """
        index = self.index
        times = self.time_index  # loaded (scanning the file as it is) before it grows
        chunks: list[bytes | memoryview] = []
        for batch in batches:
            chunks.extend(batch.encoded_parts())  # a payload is written as it arrived
        try:
            self.fd.pwritev(chunks, self.size)
        except OSError as exc:
            # A short write may have left part of the batches after ``size``: cut it, so
            # that no reader or recovery sees it, and its blocks are free again. The
            # index entries are added only after a whole write, so they need no undo.
            with contextlib.suppress(OSError):
                self.fd.truncate(self.size)
            if is_disk_full(exc):
                raise DiskFull(str(self.path), exc) from exc
            raise
        pos = self.size
        for batch in batches:
            index.add(batch.base_offset, pos)
            times.add(batch.timestamp_ms, batch.base_offset, pos)
            pos += batch.size_bytes
            self.note_timestamp(batch.timestamp_ms)
        if self.size == 0:
            self._head_bytes = batches[0].size_bytes
        self.size = pos
        self.last_offset = batches[-1].last_offset

    def note_timestamp(self, timestamp_ms: int) -> None:
        """Count a batch's timestamp in the segment's first and max (0 and below: none)."""
        if timestamp_ms <= 0:
            return
        if self.first_timestamp_ms < 0:
            self.first_timestamp_ms = timestamp_ms
        if timestamp_ms > self.max_timestamp_ms:
            self.max_timestamp_ms = timestamp_ms

    def sync_point(self) -> SyncPoint:
        """What a flush of this segment covers: the data written so far (no IO).

        Opens the descriptor if needed, so that the sync in another thread never does.
        """
        self.fd  # noqa: B018 (opened here, on the event loop)
        times = self._time_index
        return SyncPoint(self, self.size, len(self.index), None if times is None else len(times))

    def sync(
        self,
        *,
        index_fsync: bool = False,
        point: SyncPoint | None = None,
        data_synced: bool = False,
    ) -> None:
        """fsync the data, then bring the index files up to date (they only cover durable data).

        With ``point`` (taken before the fsync, while appends may go on during it) only
        the index entries of the data written by then are persisted; without it, all.
        ``data_synced``: a syncfs that started after ``point`` was taken made the data
        durable already; only the index files are brought up to date.
        Safe in a thread while the event loop appends: a write and an fsync of one
        file may run at once, and the index files are written under a lock.
        """
        if not data_synced:
            self.fd.fsync()
        upto = None if point is None else point.index_entries
        times_upto = None if point is None else point.time_index_entries
        with self._persist_lock:
            if point is None:
                # This seals the segment: no more appends, all goes but the tail from the
                # last index entry, which recovery reads (as it reads the first batch).
                self._drop_cache_before(self.index.lookup(self.last_offset)[1])
            else:
                self._drop_cache_before(point.size - CACHE_KEEP_BYTES)
            self.index.persist(fsync=index_fsync, upto=upto)
            times = self._time_index
            if times is not None and (point is None or point.time_index_entries is not None):
                times.persist(fsync=index_fsync, upto=times_upto)

    def _drop_cache_before(self, position: int) -> None:
        """Drop the page cache of the file before ``position`` (durable data only);
        under ``_persist_lock``, as a seal and a flush's sync may run at once."""
        start = max(self._cache_dropped_to, self._head_bytes)
        if position > start:
            self.fd.drop_cache(start, position - start)
            self._cache_dropped_to = position

    def truncate_at(self, position: int, last_offset: int) -> None:
        """Durably cut the file at ``position`` (a batch boundary); ``last_offset`` is what remains.

        The index file is rewritten and fsynced first, so it never points past the data.
        """
        self.sealed_size = -1  # appends after the cut may reach the same size again
        with self._persist_lock:
            self.index.truncate(last_offset + 1)
            self.index.persist(fsync=True)
            if self._time_index is not None:
                self._time_index.truncate(last_offset + 1)
                self._time_index.persist(fsync=True)
            elif self.fs.exists(self.time_index_path):
                # not loaded: its entries past the cut would outlive the data; the next load
                # finds the file inconsistent only if it points past the end, so drop it
                self.fs.unlink(self.time_index_path, missing_ok=True)
        self.fd.truncate(position)
        self.fd.fsync()
        self.size = position
        self.last_offset = last_offset
        self._cache_dropped_to = min(self._cache_dropped_to, position)
        if position < self._head_bytes:
            self._head_bytes = 0

    # -- reading ------------------------------------------------------------------------------

    def first_batch(self, limit: int) -> RecordBatch:
        """The segment's first batch (within the file's first ``limit`` bytes), checked as
        :meth:`scan` checks it; reads its bytes and no more (they stay in the page cache,
        see CACHE_KEEP_BYTES).

        Raises :class:`SegmentDecodeError` when it is invalid, StopIteration when the
        file is empty.
        """
        _, batch = next(self.scan(0, self.base_offset, limit, read_bytes=HEADER_SIZE))
        self._head_bytes = batch.size_bytes
        return batch

    def first_header(self, limit: int) -> BatchHeader:
        """The header of the segment's first batch, checked as :meth:`scan_headers`
        checks it (its bytes within the file's first ``limit``); reads the header only.

        Raises :class:`SegmentDecodeError` when it is invalid, StopIteration when the
        file is empty.
        """
        # a header's bytes only: those after it may be out of the page cache
        _, header = next(self.scan_headers(0, self.base_offset, limit, read_bytes=HEADER_SIZE))
        self._head_bytes = header.size_bytes
        return header

    def scan(
        self,
        position: int,
        expected_base: int,
        limit: int,
        *,
        read_bytes: int = _READ_CHUNK,
        verify: bool = True,
        fits: Callable[[int, int], bool] | None = None,
    ) -> Iterator[tuple[int, RecordBatch]]:
        """Yield (position, batch) from ``position`` up to byte ``limit``, checking each batch.

        Each batch must decode (CRC), start at the expected offset (contiguity) and
        carry this segment's term. Raises :class:`SegmentDecodeError` naming the file and
        the position of the first batch that does not. Reads ``read_bytes`` at a time,
        or a whole batch when it is larger. ``verify=False`` leaves out the CRC (a
        client's fetch: its reader checks it, see LogStorage.read); the header, the
        contiguity and the term are checked all the same. ``fits`` is asked with each
        batch's expected base offset and encoded size once its header is read, before
        the rest is: False ends the scan there (a read whose budget it would pass: its
        bytes are never read).
        """
        buf = b""
        buf_start = position
        expected = expected_base
        while position < limit:
            rel = position - buf_start
            if len(buf) - rel < HEADER_SIZE:
                buf = self.fd.pread(min(read_bytes, limit - position), position)
                buf_start, rel = position, 0
            if len(buf) - rel >= HEADER_SIZE:
                # A batch may be larger than one read chunk: once its header is in
                # hand, read the whole batch, or it would look torn.
                need = (
                    HEADER_SIZE
                    + _PAYLOAD_LEN.unpack_from(buf, rel + HEADER_SIZE - _PAYLOAD_LEN.size)[0]
                )
                if fits is not None and not fits(expected, need):
                    return
                if len(buf) - rel < need:
                    # The batch and the next one's header, so that the next turn reads
                    # that batch whole at once (large batches, a fetch's: each read
                    # once, not its first chunk twice), or a chunk when larger; a read of
                    # a header at a time (first_batch) reads nothing past its batch.
                    want = (
                        need if read_bytes <= HEADER_SIZE else max(need + HEADER_SIZE, read_bytes)
                    )
                    buf = self.fd.pread(min(want, limit - position), position)
                    buf_start, rel = position, 0
            try:
                batch, end = RecordBatch.decode(buf, rel, verify=verify)
            except BatchError as exc:
                raise self._invalid(exc, position, expected) from exc
            self._check_place(position, expected, batch.base_offset, batch.term)
            yield position, batch
            expected = batch.last_offset + 1
            position = buf_start + end

    def scan_headers(
        self, position: int, expected_base: int, limit: int, *, read_bytes: int = _HEADER_READ
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Yield (position, header) of each batch from ``position`` up to byte ``limit``,
        reading the headers and none of the payloads.

        Checks what :meth:`scan` checks but the CRC: each header's fields, that the
        batch starts at the expected offset and carries this segment's term, and that
        its bytes end within ``limit``; raises :class:`SegmentDecodeError` naming the
        file and the position of the first batch that does not. A file cut short, a
        batch missing or moved, a header overwritten are found; a payload's damaged
        bytes are not (their CRC is checked where they are read). Reads ``read_bytes``
        at a time: a header, and the next ones with it when batches are small.
        """
        buf = b""
        buf_start = position
        expected = expected_base
        while position < limit:
            rel = position - buf_start
            if len(buf) - rel < HEADER_SIZE:
                buf = self.fd.pread(min(read_bytes, limit - position), position)
                buf_start, rel = position, 0
            try:
                header = decode_header(buf, rel)
            except BatchError as exc:
                raise self._invalid(exc, position, expected) from exc
            end = position + header.size_bytes
            if end > limit:
                raise SegmentDecodeError(
                    f"{self.path}: invalid batch at position {position} (expected base "
                    f"offset {expected}): its {header.size_bytes} bytes end at byte {end}, "
                    f"past the end of the data at byte {limit}",
                    self.path,
                    position,
                )
            self._check_place(position, expected, header.base_offset, header.term)
            yield position, header
            expected = header.last_offset + 1
            position = end

    def _invalid(self, exc: BatchError, position: int, expected: int) -> SegmentDecodeError:
        reason = _AT_BYTE.sub(f"at position {position}", str(exc))
        return SegmentDecodeError(
            f"{self.path}: invalid batch at position {position} "
            f"(expected base offset {expected}): {reason}",
            self.path,
            position,
        )

    def _check_place(self, position: int, expected: int, base_offset: int, term: int) -> None:
        """Raise SegmentDecodeError unless the batch at ``position`` continues the
        segment's offsets and carries its term."""
        if base_offset != expected or term != self.term:
            raise SegmentDecodeError(
                f"{self.path}: batch at position {position} has base offset "
                f"{base_offset} and term {term}, expected base offset "
                f"{expected} and term {self.term}",
                self.path,
                position,
            )

    def iter_from(
        self,
        offset: int,
        *,
        verify: bool = True,
        fits: Callable[[int, int], bool] | None = None,
    ) -> Iterator[tuple[int, RecordBatch]]:
        """Yield (position, batch) from the batch holding ``offset`` to the segment's end,
        or until ``fits`` ends it (see :meth:`scan`).

        Uses the sparse index, so it decodes at most about one index interval of
        batches before the wanted one. Any invalid batch, or an index entry that
        does not point at the batch it names, raises :class:`StorageCorruption`.
        """
        indexed_offset, position = self.index.lookup(offset)
        last = indexed_offset - 1
        stopped = False

        def fits_here(base: int, size: int) -> bool:
            nonlocal stopped
            stopped = fits is not None and not fits(base, size)
            return not stopped

        try:
            for pos, batch in self.scan(
                position,
                indexed_offset,
                self.size,
                verify=verify,
                fits=None if fits is None else fits_here,
            ):
                last = batch.last_offset
                if last >= offset:
                    yield pos, batch
        except SegmentDecodeError as exc:
            if exc.position == position and position != 0:
                raise StorageCorruption(
                    f"{self.index_path}: index entry (offset {indexed_offset} -> position "
                    f"{position}) points at garbage in {self.path}: {exc}",
                    str(self.path),
                    position,
                ) from exc
            raise exc.as_corruption() from exc
        if last != self.last_offset and not stopped:
            raise StorageCorruption(
                f"{self.path}: data ends at position {self.size} after offset {last}, "
                f"but the segment should hold offsets up to {self.last_offset}",
                str(self.path),
                self.size,
            )
