"""The segmented on-disk log of one Raft group (implements :class:`LogStorage`).

Directory layout::

    00000000000000000000-00000000000000000001.log    segment: base offset, term
    00000000000000000000-00000000000000000001.index  its sparse offset index
    vote             term/vote record          (atomic replace)
    commit_context   latest commit context     (atomic replace)
    start_offset     start after prefix truncation + term before it (atomic replace)

Durability: ``append`` only writes (page cache) and advances the dirty
offset; ``flush`` fsyncs the active segment (and the directory when a
segment was created) and advances the flushed offset. A flush is three
steps, so that appends go on during its fsync: ``prepare_flush`` (on the
event loop, no IO) records the dirty offset and the segment to sync,
``sync_flush`` (in a thread) fsyncs exactly that, ``finish_flush`` (on the
loop) marks the recorded offset flushed; batches appended meanwhile stay
dirty until the next flush. Truncations (``restart_at`` too) and ``close``
must not run during a ``sync_flush`` (the caller serializes them: the
flusher's truncation lock).
When the log rolls to
a new segment (``segment_bytes`` reached, ``segment_ms`` passed since the
segment's first timestamp, or a new term: a segment holds one term, as in
Redpanda) the old segment is sealed: fsynced with its index, and the flushed
offset advances to the end of the sealed segment. So only the last
segment can have a torn tail, and open checks older segments only at their
ends: open costs O(segments), not O(bytes).
"""

from __future__ import annotations

import bisect
import dataclasses
import functools
import itertools
import logging
import pathlib
from collections.abc import Callable, Sequence
from typing import Concatenate, ParamSpec, TypeVar

from raftlog.faults.failpoints import LOG_AFTER_FLUSH, LOG_BEFORE_FLUSH, failpoint
from raftlog.storage import contract_checks
from raftlog.storage.api import (
    CommitContext,
    FlushPlan,
    RecoveryReport,
    StorageCorruption,
    VoteState,
)
from raftlog.storage.batch import RecordBatch
from raftlog.storage.commit_context import CommitContextStore
from raftlog.storage.durable_record import TMP_SUFFIX
from raftlog.storage.fs import (
    REAL_FS,
    DiskFull,
    FileSystem,
    FsyncFailed,
    StorageFailed,
    is_disk_full,
)
from raftlog.storage.open_files import OpenFiles
from raftlog.storage.recovery import recover_last_segment, verify_sealed_segment
from raftlog.storage.segment import (
    INDEX_SUFFIX,
    Segment,
    SyncPoint,
    parse_segment_name,
    segment_name,
)
from raftlog.storage.start_record import StartRecord, StartRecordStore
from raftlog.storage.time_index import TIME_INDEX_SUFFIX
from raftlog.storage.vote_store import VoteStore

logger = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 128 * 1024 * 1024
MAX_SEGMENT_BYTES = 2**31 - 1  # Kafka's segment.bytes is an int

DEFAULT_INDEX_INTERVAL_BYTES = 4096


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentInfo:
    """One segment as retention sees it (``max_timestamp_ms``: -1 when unknown)."""

    base_offset: int
    last_offset: int
    size_bytes: int
    max_timestamp_ms: int


_P = ParamSpec("_P")
_R = TypeVar("_R")


def _stops_on_failed_fsync(
    method: Callable[Concatenate[SegmentedLog, _P], _R],
) -> Callable[Concatenate[SegmentedLog, _P], _R]:
    """Refuse the call once an fsync has failed; a failing fsync poisons the log.

    After a failed fsync the kernel may have dropped the dirty pages, so a retry
    could report success for data that is gone (fsyncgate): the log never fsyncs
    again, every later call raises :class:`StorageFailed`, and only a reopen
    (a restart, which recovers from what is on disk) clears it.
    """

    @functools.wraps(method)
    def guarded(self: SegmentedLog, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if self._failed is not None:
            raise StorageFailed(
                f"{self._dir}: log stopped after a failed fsync ({self._failed}); "
                "restart the node to recover from what is on disk"
            )
        try:
            return method(self, *args, **kwargs)
        except FsyncFailed as exc:
            self._failed = str(exc)
            raise

    return guarded


class SegmentedLog:
    """One Raft group's log on disk. Create with :meth:`open`.

    Not thread-safe, with one exception: :meth:`sync_flush` may run in a thread
    while the event loop appends and reads (never while it truncates or closes).

    Invariants: ``start_offset - 1 <= flushed_offset <= dirty_offset``; segments
    are contiguous, never empty, each of one term, terms non-decreasing.
    """

    def __init__(
        self,
        directory: pathlib.Path,
        segment_bytes: int,
        index_interval_bytes: int,
        fs: FileSystem = REAL_FS,
    ) -> None:
        self._dir = directory
        self._fs = fs
        self._failed: str | None = None  # why an fsync failed; the log refuses all calls
        self._segment_bytes = segment_bytes
        self._segment_ms: int | None = None  # no time-based roll until configure() sets one
        self._interval = index_interval_bytes
        self._segments: list[Segment] = []
        self._bases: list[int] = []
        self._start = 0
        self._prev_term: int | None = 0  # term of start_offset - 1; None when unknown
        self._dirty = -1
        self._flushed = -1
        # Files created in the directory, and how many of those a directory fsync covers:
        # a new name is durable only once the directory is fsynced after its creation.
        self._dir_version = 0
        self._dir_synced = 0
        # Suffix truncations so far: one since a flush was prepared voids its claim.
        self._truncations = 0
        self._votes = VoteStore(directory, fs)
        self._commit_contexts = CommitContextStore(directory, fs)
        self._start_records = StartRecordStore(directory, fs)
        # The committed offset of the last commit context saved or found on open (-1: none):
        # state machines restart from it, so retention never deletes past it.
        self._saved_commit = -1
        self.recovery_report = RecoveryReport(dirty_offset=-1, start_offset=0, segments=0)
        # Durability barriers issued since open: data fsyncs of a flush or of a segment
        # seal, durable truncations, and vote and commit context saves (each counts one,
        # whatever directory fsyncs go with it). Read by the node's metrics.
        self.fsyncs = 0
        # Called with the base offset of every segment created by an append (after the
        # roll, before the batch is written): retention's snapshots at segment ends.
        self.roll_listeners: list[Callable[[int], None]] = []
        # The node's bound on open segment files (None: unbounded), this log's open
        # descriptors, the flushes prepared and not finished (their fsync may be running
        # in a thread on a segment's descriptor: nothing is closed meanwhile), and the
        # sealed segments to close once they finish.
        self._files: OpenFiles | None = None
        self._files_open = 0
        self._flushing = 0
        self._close_after_flush: list[Segment] = []

    # -- open / close ---------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        directory: pathlib.Path,
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES,
        fs: FileSystem = REAL_FS,
    ) -> SegmentedLog:
        """Open (creating if needed) the log in ``directory`` and recover it.

        Recovery reads the commit context, the headers of each sealed segment's first
        and last batches (no payload: see raftlog.storage.recovery), and the last
        segment's tail after its last index entry; a torn or
        corrupt tail is truncated with a warning. Afterwards ``flushed_offset ==
        dirty_offset`` and :attr:`recovery_report` says what was found, including
        ``lost_committed_suffix``. Raises :class:`StorageCorruption` for damage
        before the tail, and for damage at or below the offset that the commit
        context records as flushed (never truncated: the replica must refetch).
        All IO goes through ``fs`` (the real filesystem unless a test passes a model).
        Sealed segments' descriptors are closed after recovery (and after each seal).
        """
        if not isinstance(segment_bytes, int) or segment_bytes < 1:
            raise ValueError(f"segment_bytes must be a positive int (bytes), got {segment_bytes!r}")
        if not isinstance(index_interval_bytes, int) or index_interval_bytes < 1:
            raise ValueError(
                f"index_interval_bytes must be a positive int (bytes), got {index_interval_bytes!r}"
            )
        directory = pathlib.Path(directory)
        for parent in fs.mkdirs(directory):
            fs.fsync_dir(parent)  # the new directory's name must survive a power cut
        log = cls(directory, segment_bytes, index_interval_bytes, fs)
        try:
            log._recover()
        except BaseException:
            log.close()
            raise
        for seg in log._segments[:-1]:  # read by recovery; sealed, used again seldom
            seg.close()
        return log

    def attach_files(self, files: OpenFiles) -> None:
        """Count this log's descriptors in the node's bound ``files`` from now on (on the
        event loop: :meth:`open` may run in a thread)."""
        self._files = files
        for _ in range(self._files_open):
            files.opened(self)

    def _recover(self) -> None:
        fs = self._fs
        changed_dir = False
        found: list[tuple[int, int]] = []
        for name in fs.listdir(self._dir):
            if name.endswith(TMP_SUFFIX):  # an interrupted atomic save
                fs.unlink(self._dir / name)
                changed_dir = True
            parsed = parse_segment_name(name)
            if parsed is not None:
                found.append(parsed)
        found.sort()
        for (base, term), (next_base, next_term) in itertools.pairwise(found):
            if next_base <= base or next_term < term:
                raise StorageCorruption(
                    f"{self._dir}: segment files out of order: base offset {base} term {term} "
                    f"is followed by base offset {next_base} term {next_term}",
                    str(self._dir),
                    0,
                )
        record = self._start_records.load()
        if record is not None:
            self._start, self._prev_term = record.start_offset, record.prev_term
            kept = []
            for i, (base, term) in enumerate(found):
                if base >= record.start_offset:
                    kept.append((base, term))
                    continue
                if i + 1 < len(found) and found[i + 1][0] > record.start_offset:
                    raise StorageCorruption(
                        f"{self._dir}: start record says the log starts at offset "
                        f"{record.start_offset}, inside segment with base offset {base}",
                        str(self._dir),
                        0,
                    )
                # Left over by a prefix truncation that crashed before deleting it.
                self._segment(base, term).delete()
                changed_dir = True
            found = kept
        elif found:
            self._start = found[0][0]
            self._prev_term = 0 if self._start == 0 else None
        self._segments = [self._segment(base, term) for base, term in found]
        for seg, nxt in itertools.pairwise(self._segments):
            verify_sealed_segment(seg, nxt.base_offset)
        # Recover the last segment; one emptied by a crash goes, and the previous
        # (sealed, hence durable) segment becomes the last. Damage at or below the
        # committed offset is corruption (raised), never cut as a torn tail.
        ctx = self._commit_contexts.load()
        committed = -1 if ctx is None else ctx.committed_offset
        self._saved_commit = committed
        warnings: list[str] = []
        truncated_file, truncated_position, truncated_bytes = None, None, 0
        while self._segments:
            if not fs.exists(self._segments[-1].index_path):
                changed_dir = True  # recovery creates it: make its name durable below
            tail = recover_last_segment(self._segments[-1], self._interval, committed)
            if tail.warning is not None:
                warnings.append(tail.warning)
                truncated_file = str(self._segments[-1].path)
                truncated_position = tail.truncated_position
                truncated_bytes += tail.truncated_bytes
            if self._segments[-1].size > 0:
                break
            self._segments.pop().delete()
            changed_dir = True
        stems = {s.path.stem for s in self._segments}
        for name in fs.listdir(self._dir):  # indexes whose segment is gone
            stem, dot, suffix = name.rpartition(".")
            if dot + suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and stem not in stems:
                fs.unlink(self._dir / name)
                changed_dir = True
        if changed_dir:
            fs.fsync_dir(self._dir)
        self._bases = [s.base_offset for s in self._segments]
        if self._segments:
            self._start = self._segments[0].base_offset
            self._dirty = self._segments[-1].last_offset
        else:
            self._dirty = self._start - 1
        self._flushed = self._dirty
        lost = ctx is not None and ctx.committed_offset > self._dirty
        if ctx is not None and lost:
            message = (
                f"{self._dir}: commit context says offset {ctx.committed_offset} was committed "
                f"but the log ends at offset {self._dirty}: the committed suffix was lost; "
                "this replica must resync"
            )
            logger.warning("%s", message)
            warnings.append(message)
        self.recovery_report = RecoveryReport(
            dirty_offset=self._dirty,
            start_offset=self._start,
            segments=len(self._segments),
            committed_offset=None if ctx is None else ctx.committed_offset,
            lost_committed_suffix=lost,
            truncated_file=truncated_file,
            truncated_position=truncated_position,
            truncated_bytes=truncated_bytes,
            warnings=tuple(warnings),
        )

    def _segment(self, base: int, term: int) -> Segment:
        return self._track(
            Segment(
                self._dir,
                base,
                term,
                size=0,
                last_offset=base - 1,
                index_interval_bytes=self._interval,
                fs=self._fs,
            )
        )

    def _track(self, seg: Segment) -> Segment:
        """Count ``seg``'s descriptor (open now, or when it opens) in this log's and
        the node's open files."""
        seg.on_open = self._on_file_open
        seg.on_close = self._on_file_close
        if seg.is_open:
            self._on_file_open()
        return seg

    def _on_file_open(self) -> None:
        self._files_open += 1
        if self._files is not None:
            self._files.opened(self)

    def _on_file_close(self) -> None:
        self._files_open -= 1
        if self._files is not None:
            self._files.closed()

    @property
    def files_open(self) -> int:
        """Segment descriptors this log holds open now."""
        return self._files_open

    def release_files(self) -> int:
        """Close every segment's descriptor (each reopens on its next use) when every
        write is flushed and no flush is under way; the number closed (0 otherwise).

        Never under a flush: its fsync may run in a thread on the active segment's
        descriptor. Never with unflushed writes: an fsync through a descriptor opened
        after a write-back error need not report it."""
        if self._flushing or self._flushed < self._dirty or self._files_open == 0:
            return 0
        before = self._files_open
        for seg in self._segments:
            seg.close()
        return before - self._files_open

    def close(self) -> None:
        """Close file descriptors. Does not fsync: unflushed data is as a crash leaves it."""
        for seg in self._segments:
            seg.close()
        if self._files is not None:
            self._files.forget(self)

    def __enter__(self) -> SegmentedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- offsets --------------------------------------------------------------------------

    @property
    def directory(self) -> pathlib.Path:
        return self._dir

    @property
    def fs(self) -> FileSystem:
        """The file system this log writes through (the crash tests' model, or the real one)."""
        return self._fs

    @property
    def start_offset(self) -> int:
        return self._start

    @property
    def dirty_offset(self) -> int:
        return self._dirty

    @property
    def flushed_offset(self) -> int:
        return self._flushed

    @property
    def last_term(self) -> int:
        if self._segments:
            return self._segments[-1].term
        return self._prev_term or 0

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def size_bytes(self) -> int:
        """Bytes of batches in the log's segments (indexes and records not counted)."""
        return sum(s.size for s in self._segments)

    @property
    def commit_context_offset(self) -> int:
        """The committed offset of the latest commit context saved (or found on open).

        State machines are restored from that context after a restart and replay the
        log after it, so a prefix truncation must never go past it + 1.
        """
        return self._saved_commit

    def segment_infos(self) -> list[SegmentInfo]:
        """Every segment, oldest first; the last one is the active (open) segment."""
        return [
            SegmentInfo(s.base_offset, s.last_offset, s.size, s.max_timestamp_ms)
            for s in self._segments
        ]

    def configure(self, *, segment_bytes: int, segment_ms: int | None) -> None:
        """Change when the log rolls (a topic's ``segment.bytes`` and ``segment.ms``).

        Takes effect from the next append; segments already written keep their
        size. ``segment_ms`` None: no time-based roll. ValueError names a bad value.
        """
        if not isinstance(segment_bytes, int) or not 1 <= segment_bytes <= MAX_SEGMENT_BYTES:
            raise ValueError(
                f"segment_bytes must be an int from 1 to {MAX_SEGMENT_BYTES}, got {segment_bytes!r}"
            )
        if segment_ms is not None and (not isinstance(segment_ms, int) or segment_ms < 1):
            raise ValueError(f"segment_ms must be a positive int or None, got {segment_ms!r}")
        self._segment_bytes = segment_bytes
        self._segment_ms = segment_ms

    def term_at(self, offset: int) -> int | None:
        """The term holding ``offset``, from segment metadata (no read).

        ``term_at(start_offset - 1)`` is the term of the last prefix-truncated entry
        (0 for a log that starts at offset 0); None when unknown or outside the log.
        """
        if self._start <= offset <= self._dirty:
            return self._segments[bisect.bisect_right(self._bases, offset) - 1].term
        if offset == self._start - 1:
            return self._prev_term
        return None

    # -- writing --------------------------------------------------------------------------

    @_stops_on_failed_fsync
    def append(self, batches: Sequence[RecordBatch]) -> int:
        """Write ``batches`` without fsync; return the new dirty offset.

        All batches are checked before anything is written: each must start at the
        offset after the previous one (the first at ``dirty_offset + 1``) and terms
        must not decrease; otherwise ValueError names the expected and got values.

        All or nothing: when the disk is full (:class:`DiskFull`) the log is left as
        it was before the call (a segment this call created is removed, batches it
        wrote before a roll are truncated away) and the error is raised; the log stays
        usable, and the same append succeeds once space is freed.
        """
        contract_checks.check_append(batches, self._dirty, self.last_term)
        if self._files is not None:
            self._files.touch(self)
        before = self._dirty
        segments_before = len(self._segments)
        try:
            return self._append(batches)
        except OSError as exc:
            if not is_disk_full(exc):
                raise
            # Also when the roll's seal found no room for an index file's entries.
            self._undo_append(before, segments_before)
            if isinstance(exc, DiskFull):
                raise
            raise DiskFull(str(self._dir), exc) from exc

    def _undo_append(self, before: int, segments_before: int) -> None:
        """Bring the log back to ``before`` (its dirty offset before a failed append)."""
        while len(self._segments) > segments_before and self._segments[-1].size == 0:
            # created by this append and left empty: the invariant wants no empty segment
            self._segments.pop().delete()
            self._bases.pop()
        self._dirty = self._segments[-1].last_offset if self._segments else self._start - 1
        if self._dirty > before:
            # batches written before a roll (sealed, durable): cut them, so that the
            # call has no effect (a leader's core placed all of them or none)
            self.truncate(before + 1)

    def _append(self, batches: Sequence[RecordBatch]) -> int:
        pending: list[RecordBatch] = []
        pending_bytes = 0
        active = self._segments[-1] if self._segments else None
        # the active segment's first timestamp, counting the batches pending for it
        first_ts = active.first_timestamp_ms if active is not None else -1
        for batch in batches:
            used = active.size + pending_bytes if active is not None else 0
            full = used > 0 and used + batch.size_bytes > self._segment_bytes
            # segment.ms: measured on the batches' own (leader-assigned) timestamps, so
            # every replica rolls at the same batch, whatever its clock says
            aged = (
                used > 0
                and self._segment_ms is not None
                and first_ts > 0
                and batch.timestamp_ms - first_ts >= self._segment_ms
            )
            if active is None or active.term != batch.term or full or aged:
                if active is not None and pending:
                    active.append(pending)
                active = self._roll(batch.base_offset, batch.term)
                pending, pending_bytes, first_ts = [], 0, -1
            pending.append(batch)
            pending_bytes += batch.size_bytes
            if first_ts <= 0 and batch.timestamp_ms > 0:
                first_ts = batch.timestamp_ms
        if active is not None and pending:
            active.append(pending)
        if batches:
            self._dirty = batches[-1].last_offset
        return self._dirty

    @_stops_on_failed_fsync
    def seal_ahead(self, term: int) -> Callable[[], None] | None:
        """See :meth:`LogStorage.seal_ahead`: the active segment's data, both index files
        and the directory fsynced in the caller's thread, up to the data written now.

        A node's groups all change term at once after a failover or a creation, and
        each roll's seal made four fsyncs on the event loop (45% of a node's loop while
        3,000 partitions were created on the shared machine): the node stopped
        answering, its peers declared it dead, and its groups churned. Sealed ahead,
        the roll finds ``sealed_size == size`` and only creates the new segment; an
        append of the old term meanwhile makes the roll seal on the loop as before."""
        if not self._segments:
            return None
        seg = self._segments[-1]
        if seg.term == term or seg.size == 0 or seg.sealed_size == seg.size:
            return None
        point = seg.sync_point()  # opens the descriptor here, on the loop
        dir_version = self._dir_version

        def seal() -> None:
            try:
                seg.sync(index_fsync=True, point=point)
                if dir_version > self._dir_synced:
                    self._fs.fsync_dir(self._dir)
                    # from a thread: a lost update can only lower it (an fsync again)
                    self._dir_synced = max(self._dir_synced, dir_version)
            except FsyncFailed as exc:
                self._failed = str(exc)
                raise
            seg.sealed_size = point.size

        return seal

    def _roll(self, base_offset: int, term: int) -> Segment:
        """Seal the active segment (fsync data and index) and start a new one.

        Sealing makes everything before ``base_offset`` durable (the sealed
        segment's data, and its directory entry), so the flushed offset moves to
        ``base_offset - 1``.
        """
        if self._segments:
            sealed = self._segments[-1]
            if sealed.sealed_size != sealed.size:  # not sealed ahead (see seal_ahead)
                sealed.sync(index_fsync=True)
                self.fsyncs += 1
            if self._dir_version > self._dir_synced:
                self._fs.fsync_dir(self._dir)
                self._dir_synced = self._dir_version
            self._flushed = max(self._flushed, base_offset - 1)
            # Sealed: read again seldom (a lagging reader, recovery of a follower), so
            # its descriptor goes; a flush's fsync may still use it in a thread.
            if self._flushing:
                self._close_after_flush.append(sealed)
            else:
                sealed.close()
        try:
            seg = Segment.create(self._dir, base_offset, term, self._interval, self._fs)
        except OSError as exc:
            # No room for the new files (their names, the empty time index): remove what
            # was made, so that no half-created segment is left for recovery to find.
            Segment(
                self._dir, base_offset, term, size=0, last_offset=base_offset - 1,
                index_interval_bytes=self._interval, fs=self._fs,
            ).delete()  # fmt: skip
            if is_disk_full(exc) and not isinstance(exc, DiskFull):
                raise DiskFull(str(self._dir / segment_name(base_offset, term)), exc) from exc
            raise
        self._dir_version += 1
        self._segments.append(self._track(seg))
        self._bases.append(base_offset)
        for listener in self.roll_listeners:
            listener(base_offset)
        return seg

    def flush(self) -> int:
        """fsync the active segment (and the directory after a roll); return the flushed offset.

        The three steps below in one call (nothing can append in between).
        """
        plan = self.prepare_flush()
        self.sync_flush(plan)
        return self.finish_flush(plan)

    @_stops_on_failed_fsync
    def prepare_flush(self) -> FlushPlan:
        """Record what a flush makes durable: the dirty offset now and the active segment
        (only it can hold unflushed data: a roll seals the one before); no IO."""
        files: tuple[SyncPoint, ...] = ()
        if self._dirty > self._flushed and self._segments:
            files = (self._segments[-1].sync_point(),)
            self._flushing += 1  # its descriptor stays open until finish_flush
            if self._files is not None:
                self._files.touch(self)
        dir_version = self._dir_version if self._dir_version > self._dir_synced else None
        return FlushPlan(self._dirty, self._truncations, files, dir_version)

    @_stops_on_failed_fsync
    def sync_flush(self, plan: FlushPlan) -> None:
        """fsync the segment of ``plan`` (and the directory when it asks); blocking.

        Runs in a thread while the event loop may append: a write racing the fsync
        may or may not be covered, which is why only ``plan.offset`` is claimed. A
        segment created meanwhile is not in ``plan``; its name is synced by the next
        flush (or by the roll after it, which seals it).
        """
        if plan.by_barrier:  # the node's syncfs made it durable (and ran the failpoints)
            for point in plan.files:
                assert isinstance(point, SyncPoint)
                point.segment.sync(point=point, data_synced=True)
            return
        work = bool(plan.files) or plan.dir_version is not None
        if work:
            failpoint(LOG_BEFORE_FLUSH)
        for point in plan.files:
            assert isinstance(point, SyncPoint)
            point.segment.sync(point=point)
        if plan.dir_version is not None:
            self._fs.fsync_dir(self._dir)
        if work:
            failpoint(LOG_AFTER_FLUSH)

    @_stops_on_failed_fsync
    def finish_flush(self, plan: FlushPlan) -> int:
        """Mark ``plan.offset`` flushed (see :func:`contract_checks.flushed_after_flush`)."""
        if plan.files:
            self._flushing -= 1
            if not self._flushing:
                for seg in self._close_after_flush:
                    seg.close()
                self._close_after_flush.clear()
        if plan.files and not plan.by_barrier:
            self.fsyncs += 1
        if plan.dir_version is not None:
            self._dir_synced = max(self._dir_synced, plan.dir_version)
        self._flushed = contract_checks.flushed_after_flush(
            self._flushed, plan.offset, self._dirty, plan.truncations != self._truncations
        )
        contract_checks.check_offsets(self._start, self._flushed, self._dirty)
        return self._flushed

    @_stops_on_failed_fsync
    def truncate(self, offset: int) -> None:
        """Durably drop every batch at or after ``offset``, which must be a batch boundary.

        Later segments are deleted (and the directory fsynced) before the segment
        holding ``offset`` is cut, so a crash mid-way leaves a contiguous log.
        ``flushed_offset`` is clamped to ``offset - 1``.
        """
        if offset == self._dirty + 1:
            return
        contract_checks.check_truncate_offset(offset, self._start, self._dirty)
        i = bisect.bisect_right(self._bases, offset) - 1
        seg = self._segments[i]
        position, batch = next(seg.iter_from(offset))
        contract_checks.check_batch_boundary(offset, batch)
        self._truncations += 1  # before any change: a flush prepared before claims nothing
        for later in reversed(self._segments[i + 1 :]):
            later.delete()
        del self._segments[i + 1 :]
        if position == 0:
            self._segments.pop().delete()
        self._fs.fsync_dir(self._dir)
        self._dir_synced = self._dir_version
        if position > 0:
            seg.truncate_at(position, offset - 1)
        self.fsyncs += 1
        self._bases = [s.base_offset for s in self._segments]
        self._dirty = offset - 1
        self._flushed = min(self._flushed, self._dirty)
        contract_checks.check_offsets(self._start, self._flushed, self._dirty)

    @_stops_on_failed_fsync
    def prefix_truncate(self, offset: int) -> None:
        """Drop the whole segments that lie entirely below ``offset`` (retention).

        ``start_offset`` becomes the first remaining segment's base (or
        ``dirty_offset + 1`` when every segment went); the term of the entry
        before it is kept for ``term_at(start_offset - 1)``. The start record is
        saved before files are deleted, so a crash mid-way is finished on open.
        """
        if offset <= self._start:
            return
        contract_checks.check_prefix_truncate_offset(offset, self._dirty)
        dropped = 0
        while dropped < len(self._segments) and self._segments[dropped].last_offset < offset:
            dropped += 1
        if dropped == 0:
            return
        remaining = self._segments[dropped:]
        new_start = remaining[0].base_offset if remaining else self._dirty + 1
        prev_term = self._segments[dropped - 1].term
        self._start_records.save(StartRecord(new_start, prev_term))
        for seg in self._segments[:dropped]:
            seg.delete()
        self._fs.fsync_dir(self._dir)
        self._dir_synced = self._dir_version
        self._segments = remaining
        self._bases = [s.base_offset for s in remaining]
        self._start, self._prev_term = new_start, prev_term
        self._flushed = max(self._flushed, new_start - 1)

    @_stops_on_failed_fsync
    def restart_at(self, offset: int, prev_term: int) -> None:
        """Durably drop every segment and start the log empty at ``offset`` (see
        :meth:`raftlog.storage.api.LogStorage.restart_at`). The newest segment goes
        first and the directory is fsynced before the start record is saved, so a
        crash mid-way leaves a contiguous log, then an empty one at the old start."""
        if offset < self._start:
            raise ValueError(f"restart offset {offset} is below the log start {self._start}")
        self._truncations += 1  # a whole-log cut: a flush prepared before claims nothing
        for seg in reversed(self._segments):
            seg.delete()
        self._segments, self._bases = [], []
        self._fs.fsync_dir(self._dir)
        self._dir_synced = self._dir_version
        self._dirty = self._flushed = self._start - 1
        self._start_records.save(StartRecord(offset, prev_term))
        self.fsyncs += 1
        self._start, self._prev_term = offset, prev_term
        self._dirty = self._flushed = offset - 1

    # -- reading --------------------------------------------------------------------------

    @_stops_on_failed_fsync
    def read(
        self, start: int, max_bytes: int, end: int | None = None, *, verify: bool = True
    ) -> list[RecordBatch]:
        """Whole batches from the one holding ``start``, up to ``max_bytes`` of encoded size.

        At least one batch is returned when any exists at ``start``; none whose base
        offset is beyond ``end`` (inclusive) when given. Reading below
        ``start_offset`` raises ValueError (that prefix is gone); at or past the end
        returns ``[]``. Damaged data raises :class:`StorageCorruption`; with
        ``verify=False`` (a client's fetch, see LogStorage.read) a batch whose header
        holds but whose CRC does not is returned as stored, for its reader to refuse.
        """
        contract_checks.check_read_start(start, self._start)
        hi = self._dirty if end is None else min(end, self._dirty)
        out: list[RecordBatch] = []
        if start > hi:
            return out
        if self._files is not None:
            self._files.touch(self)
        total = 0
        full = False

        def fits(base: int, size: int) -> bool:
            # a batch that cannot be returned is not read (its header says so)
            nonlocal full
            full = base > hi or bool(out and total + size > max_bytes)
            return not full

        for seg in self._segments[bisect.bisect_right(self._bases, start) - 1 :]:
            for _, batch in seg.iter_from(max(start, seg.base_offset), verify=verify, fits=fits):
                if batch.base_offset > hi or (out and total + batch.size_bytes > max_bytes):
                    return out
                out.append(batch)
                total += batch.size_bytes
                # stop before decoding a batch that cannot be returned anyway
                if total >= max_bytes or batch.last_offset >= hi:
                    return out
            if full:
                return out
        return out

    @_stops_on_failed_fsync
    def offset_for_timestamp(self, timestamp_ms: int, end: int) -> tuple[int, int] | None:
        """(base offset, timestamp) of the first batch at or below offset ``end`` whose
        timestamp is at least ``timestamp_ms``; None when there is none.

        Segments whose largest timestamp is below ``timestamp_ms`` are skipped from
        their metadata; inside a segment the sparse time index
        (:mod:`raftlog.storage.time_index`) says where to start, so at most about one
        index interval of batches is decoded that does not qualify.
        """
        hi = min(end, self._dirty)
        for seg in self._segments:
            if seg.base_offset > hi:
                break
            # max_timestamp_ms is -1 when unknown (no positive timestamp seen): look inside
            if 0 <= seg.max_timestamp_ms < timestamp_ms:
                continue
            found = seg.find_timestamp(timestamp_ms, hi)
            if found is not None:
                return found
        return None

    # -- records --------------------------------------------------------------------------

    @_stops_on_failed_fsync
    def save_commit_context(self, ctx: CommitContext) -> None:
        """Durably replace the commit context (only the latest is kept).

        A context older than the one already saved (one taken before a snapshot
        install's, saved after it) is not written: committed offsets only grow, and
        the file must never go back below what the log was restarted at.
        """
        if ctx.committed_offset < self._saved_commit:
            return
        self._commit_contexts.save(ctx)
        self.fsyncs += 1
        self._saved_commit = ctx.committed_offset

    @_stops_on_failed_fsync
    def commit_context_record(self, ctx: CommitContext) -> tuple[pathlib.Path, bytes]:
        """The commit context file's path and new bytes, for the node's
        :class:`~raftlog.storage.record_writer.RecordWriter` (many groups' contexts
        behind shared syncs, off the event loop); call :meth:`commit_context_saved`
        once they are durable."""
        return self._commit_contexts.framed(ctx)

    def commit_context_saved(self, ctx: CommitContext) -> None:
        """``ctx`` (from :meth:`commit_context_record`) is durable: it is the context a
        prefix truncation may now go up to (see ``saved_commit_offset``)."""
        self.fsyncs += 1
        self._saved_commit = max(self._saved_commit, ctx.committed_offset)

    def load_commit_context(self) -> CommitContext | None:
        return self._commit_contexts.load()

    @_stops_on_failed_fsync
    def save_vote(self, vote: VoteState) -> None:
        """Durably replace the vote record (write, fsync, rename, fsync the directory)."""
        self._votes.save(vote)
        self.fsyncs += 1

    def vote_record(self, vote: VoteState) -> tuple[pathlib.Path, bytes]:
        """The vote file's path and new bytes, for the node's
        :class:`~raftlog.storage.record_writer.RecordWriter` (it saves many groups'
        votes behind one shared sync, off the event loop)."""
        return self._votes.framed(vote)

    def load_vote(self) -> VoteState:
        return self._votes.load()
