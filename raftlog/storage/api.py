"""The storage contract that Raft is written against.

Two implementations exist: the segmented on-disk log (:mod:`raftlog.storage.log`)
and the simulator's in-memory disk (which loses un-flushed data on a crash).
Raft's stages only ever see these protocols, so the same code runs over both.

Offsets count records (as Kafka's do). An empty log has
``dirty_offset == flushed_offset == start_offset - 1``.

Invariants every implementation keeps:

- ``start_offset - 1 <= flushed_offset <= dirty_offset``;
- a flush makes durable only what was written when it was prepared: batches
  appended while its fsync runs stay dirty until the next flush;
- batches are contiguous: each appended batch's ``base_offset`` is
  ``dirty_offset + 1`` at the time of the append;
- terms never decrease along the log.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Protocol

from raftlog.storage.batch import RecordBatch


@dataclasses.dataclass(frozen=True, slots=True)
class CommitContext:
    """The latest commit context (varlog-style: only the latest is kept).

    ``committed_offset`` is the last committed offset this replica knows of
    (its high watermark minus one) in ``term``; ``snapshot`` is opaque state
    machine state (the rm_stm producer table) as of ``committed_offset``.
    Invariant on open: ``committed_offset <= dirty_offset`` once recovery has
    run, otherwise the replica has lost acknowledged data and must resync.
    """

    committed_offset: int
    term: int
    snapshot: bytes = b""


class StorageCorruption(Exception):
    """Data before the log's tail is damaged; ``path`` and ``position`` say where.

    Raised instead of silently dropping anything: only a torn or corrupt *tail*
    of the last segment is repaired (truncated) on open.
    """

    def __init__(self, message: str, path: str, position: int) -> None:
        super().__init__(message)
        self.path = path
        self.position = position


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryReport:
    """What open-time recovery found and did.

    ``lost_committed_suffix`` is True when the commit context says offsets up
    to ``committed_offset`` were committed but the log (after tail recovery)
    ends at ``dirty_offset < committed_offset``: this replica broke the
    invariant "committed end == local high watermark" and Raft must resync
    it. Storage does not crash on this; it only reports.
    """

    dirty_offset: int
    start_offset: int
    segments: int
    committed_offset: int | None = None
    lost_committed_suffix: bool = False
    truncated_file: str | None = None
    truncated_position: int | None = None
    truncated_bytes: int = 0
    warnings: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class FlushPlan:
    """One flush, as :meth:`LogStorage.prepare_flush` recorded it (on the event loop, no IO).

    ``offset`` is the dirty offset when the flush was prepared: what
    :meth:`LogStorage.finish_flush` marks flushed, never more. ``truncations``
    counts the log's suffix truncations at that time: a truncation since voids
    the claim (the offsets above the cut may hold other batches by then).
    ``files`` are what :meth:`LogStorage.sync_flush` fsyncs (the implementation's
    own, opaque here; empty: no file data to sync), and ``dir_version`` is set
    when the log's directory must be fsynced too (a file was created since its
    last fsync): the implementation's count of creations it covers.
    ``by_barrier``: a syncfs of the log's filesystem (:class:`~raftlog.storage.fs.FsBarrier`)
    that started after the plan was prepared has returned, so ``files`` and the
    directory are durable already: :meth:`LogStorage.sync_flush` fsyncs nothing and
    does only what follows an fsync (the index files).
    """

    offset: int
    truncations: int
    files: tuple[object, ...] = ()
    dir_version: int | None = None
    by_barrier: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class VoteState:
    """Raft's persistent vote: the current term and whom this node voted for (-1: none)."""

    term: int = 0
    voted_for: int = -1


class LogStorage(Protocol):
    """One Raft group's log."""

    @property
    def start_offset(self) -> int: ...

    @property
    def dirty_offset(self) -> int:
        """The last offset written (maybe not yet fsynced); ``start_offset - 1`` when empty."""
        ...

    @property
    def flushed_offset(self) -> int:
        """The last offset known durable."""
        ...

    @property
    def last_term(self) -> int:
        """The term of the last batch, or of the log's start when empty (0 for a new log)."""
        ...

    def term_at(self, offset: int) -> int | None:
        """The term of the batch holding ``offset``; None when outside the log.

        ``term_at(start_offset - 1)`` returns the term of the prefix-truncated
        entry when known, so that a follower at the log start can be matched.
        """
        ...

    def append(self, batches: Sequence[RecordBatch]) -> int:
        """Write batches without fsync; return the new dirty offset.

        Raises ValueError when a batch is not contiguous with the log.
        """
        ...

    def flush(self) -> int:
        """fsync everything written; return the new flushed offset.

        The three steps below in one call, for callers that run them in one thread.
        """
        ...

    def seal_ahead(self, term: int) -> Callable[[], None] | None:
        """When appending an entry of ``term`` would roll the active segment (a new
        term), a blocking function that makes it durable now, as the roll would (to run
        in a thread before the append, so that the roll does not fsync on the event
        loop); None when no roll is due or there is nothing to make durable."""
        ...

    def prepare_flush(self) -> FlushPlan:
        """A flush's first step (on the event loop; no IO): record the dirty offset to
        make durable and the files whose fsync makes it so."""
        ...

    def sync_flush(self, plan: FlushPlan) -> None:
        """A flush's blocking step (in a thread): fsync exactly the files of ``plan``.

        May run while the event loop appends (writes to the active segment, a roll
        that creates a segment, which is not in ``plan``). Must not run while the log
        is truncated (suffix, prefix, :meth:`restart_at`) or closed: the caller
        serializes those.
        """
        ...

    def finish_flush(self, plan: FlushPlan) -> int:
        """A flush's last step (on the event loop): mark ``plan.offset`` flushed (never
        more, never past the dirty end, nothing after a truncation since ``plan`` was
        prepared); return the flushed offset."""
        ...

    def read(
        self, start: int, max_bytes: int, end: int | None = None, *, verify: bool = True
    ) -> list[RecordBatch]:
        """Whole batches from the one holding ``start``, up to ``max_bytes``.

        At least one batch is returned when any exists at ``start`` (even if it
        is larger than ``max_bytes``); none beyond ``end`` (inclusive) when given.
        ``verify=False`` (a client's fetch only) leaves out each batch's CRC check
        (its header is still checked): the bytes go to a reader, which checks the
        CRC itself, as Kafka's broker leaves it to the consumer (ARCHITECTURE.md).
        Such a batch keeps its stored bytes as its encoded form, so a damaged one
        is sent as stored and its reader detects it.
        """
        ...

    def truncate(self, offset: int) -> None:
        """Drop every batch at or after ``offset`` (a batch boundary)."""
        ...

    def prefix_truncate(self, offset: int) -> None:
        """Drop whole segments that lie entirely below ``offset`` (retention)."""
        ...

    def restart_at(self, offset: int, prev_term: int) -> None:
        """Durably drop the whole log and start it empty at ``offset`` (a snapshot
        install: the snapshot holds what precedes it), ``term_at(offset - 1)`` being
        ``prev_term``. ``offset`` is at least ``start_offset``. Batches go before the
        start record is saved: a crash mid-way leaves an empty log at the old start."""
        ...

    def save_commit_context(self, ctx: CommitContext) -> None: ...

    def load_commit_context(self) -> CommitContext | None: ...

    def save_vote(self, vote: VoteState) -> None:
        """Durably replace the vote record (write, fsync, rename, fsync the directory)."""
        ...

    def load_vote(self) -> VoteState: ...

    def close(self) -> None: ...
