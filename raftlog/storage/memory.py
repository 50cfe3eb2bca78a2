"""An in-memory :class:`LogStorage` for unit tests and the Raft simulator.

It keeps the same offsets, errors and read semantics as
:class:`~raftlog.storage.log.SegmentedLog`, with one difference of grain:
``prefix_truncate`` drops whole *batches* below the offset (each batch is
its own "segment" here). Crashes are explicit: :meth:`crash` loses what was
written after the last flush, :meth:`tear_tail` keeps only part of it (as a
disk that wrote some pages before the power went). Commit context and vote
saves are durable at once, as the on-disk atomic replace is.
"""

from __future__ import annotations

import bisect
import errno
from collections.abc import Callable, Sequence

from raftlog.storage import contract_checks
from raftlog.storage.api import CommitContext, FlushPlan, RecoveryReport, VoteState
from raftlog.storage.batch import RecordBatch
from raftlog.storage.fs import DiskFull


class MemoryLog:
    """Batches in a list; offsets and invariants as in :mod:`raftlog.storage.api`."""

    def __init__(self, capacity_bytes: int | None = None) -> None:
        # The disk's room for batches (None: unbounded); an append past it is refused
        # whole with DiskFull, as SegmentedLog undoes a write that found the disk full.
        self.capacity_bytes = capacity_bytes
        self._batches: list[RecordBatch] = []
        self._bases: list[int] = []
        self._start = 0
        self._prev_term: int | None = 0
        self._dirty = -1
        self._flushed = -1
        self._commit_context: CommitContext | None = None
        self._vote = VoteState()
        self.recovery_report = RecoveryReport(dirty_offset=-1, start_offset=0, segments=0)
        self.fsyncs = 0  # flushes that had something to make durable (as SegmentedLog counts)
        self._truncations = 0  # suffix cuts (truncations, crashes): void a flush prepared before

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
        if self._batches:
            return self._batches[-1].term
        return self._prev_term or 0

    def term_at(self, offset: int) -> int | None:
        if self._start <= offset <= self._dirty:
            return self._batches[bisect.bisect_right(self._bases, offset) - 1].term
        if offset == self._start - 1:
            return self._prev_term
        return None

    def append(self, batches: Sequence[RecordBatch]) -> int:
        """As :meth:`SegmentedLog.append`: all-or-nothing contiguity and term checks."""
        contract_checks.check_append(batches, self._dirty, self.last_term)
        if self.capacity_bytes is not None:
            used = sum(b.size_bytes for b in self._batches)
            if used + sum(b.size_bytes for b in batches) > self.capacity_bytes:
                raise DiskFull(
                    "memory log",
                    OSError(errno.ENOSPC, "No space left on device (model)"),
                )
        for batch in batches:
            self._batches.append(batch)
            self._bases.append(batch.base_offset)
        if batches:
            self._dirty = batches[-1].last_offset
        return self._dirty

    def flush(self) -> int:
        """As :meth:`SegmentedLog.flush`: the three steps below in one call."""
        plan = self.prepare_flush()
        self.sync_flush(plan)
        return self.finish_flush(plan)

    def seal_ahead(self, term: int) -> Callable[[], None] | None:
        """No segments here: nothing to seal ahead (see LogStorage.seal_ahead)."""
        return None

    def prepare_flush(self) -> FlushPlan:
        """Record the dirty offset a flush makes durable (``files``: one marker when any)."""
        files: tuple[object, ...] = ("log",) if self._dirty > self._flushed else ()
        return FlushPlan(self._dirty, self._truncations, files)

    def sync_flush(self, plan: FlushPlan) -> None:
        """Nothing to do in memory: durability is the flushed offset (a crash keeps up to it)."""

    def finish_flush(self, plan: FlushPlan) -> int:
        """Mark ``plan.offset`` flushed, never what was appended since it was prepared."""
        if plan.files and not plan.by_barrier:
            self.fsyncs += 1
        self._flushed = contract_checks.flushed_after_flush(
            self._flushed, plan.offset, self._dirty, plan.truncations != self._truncations
        )
        contract_checks.check_offsets(self._start, self._flushed, self._dirty)
        return self._flushed

    def read(
        self, start: int, max_bytes: int, end: int | None = None, *, verify: bool = True
    ) -> list[RecordBatch]:
        # verify: nothing to check, the batches are held decoded
        contract_checks.check_read_start(start, self._start)
        hi = self._dirty if end is None else min(end, self._dirty)
        out: list[RecordBatch] = []
        if start > hi:
            return out
        total = 0
        for batch in self._batches[bisect.bisect_right(self._bases, start) - 1 :]:
            if batch.base_offset > hi or (out and total + batch.size_bytes > max_bytes):
                break
            out.append(batch)
            total += batch.size_bytes
            # stop before decoding a batch that cannot be returned anyway
            if total >= max_bytes or batch.last_offset >= hi:
                break
        return out

    def truncate(self, offset: int) -> None:
        if offset == self._dirty + 1:
            return
        contract_checks.check_truncate_offset(offset, self._start, self._dirty)
        i = bisect.bisect_right(self._bases, offset) - 1
        batch = self._batches[i]
        contract_checks.check_batch_boundary(offset, batch)
        self._drop_from(i)

    def _drop_from(self, i: int) -> None:
        if i < len(self._batches):
            self._truncations += 1
        del self._batches[i:]
        del self._bases[i:]
        self._dirty = self._batches[-1].last_offset if self._batches else self._start - 1
        self._flushed = min(self._flushed, self._dirty)

    def prefix_truncate(self, offset: int) -> None:
        """Drop the batches entirely below ``offset`` (batch grain; see the module doc)."""
        if offset <= self._start:
            return
        contract_checks.check_prefix_truncate_offset(offset, self._dirty)
        dropped = 0
        while dropped < len(self._batches) and self._batches[dropped].last_offset < offset:
            dropped += 1
        if dropped == 0:
            return
        self._prev_term = self._batches[dropped - 1].term
        self._start = (
            self._batches[dropped].base_offset
            if dropped < len(self._batches)
            else (self._dirty + 1)
        )
        del self._batches[:dropped]
        del self._bases[:dropped]
        self._flushed = max(self._flushed, self._start - 1)

    def restart_at(self, offset: int, prev_term: int) -> None:
        """Drop every batch and start empty at ``offset`` (see ``LogStorage.restart_at``)."""
        if offset < self._start:
            raise ValueError(f"restart offset {offset} is below the log start {self._start}")
        self._truncations += 1
        self._batches, self._bases = [], []
        self._start, self._prev_term = offset, prev_term
        self._dirty = self._flushed = offset - 1

    # -- crashes --------------------------------------------------------------------------

    def crash(self) -> int:
        """Lose everything written after ``flushed_offset``; return the new dirty offset."""
        return self.tear_tail(0)

    def lose_flushed(self, keep_upto: int) -> int:
        """Crash on a lying disk: lose every batch past ``keep_upto``, flushed or not.

        The vote and commit context survive (they live in other files), so the
        commit context may now name an offset the log no longer has: the replica
        lost data it had acknowledged. Returns the new dirty offset.
        """
        i = bisect.bisect_right(self._bases, keep_upto)
        if i > 0 and self._batches[i - 1].last_offset > keep_upto:
            i -= 1  # a batch is lost whole
        self._drop_from(i)
        return self.tear_tail(0)

    def tear_tail(self, keep_unflushed_batches: int) -> int:
        """Crash keeping only the first ``keep_unflushed_batches`` unflushed batches.

        Models a disk that persisted part of the unflushed data (a torn batch is
        dropped whole, as CRC-checked recovery does). After it, as after a real
        open, ``flushed_offset == dirty_offset`` and :attr:`recovery_report` tells
        whether the commit context now points past the log.
        """
        if keep_unflushed_batches < 0:
            raise ValueError(f"keep_unflushed_batches must be >= 0, got {keep_unflushed_batches}")
        first_unflushed = bisect.bisect_right(self._bases, self._flushed)
        self._drop_from(min(first_unflushed + keep_unflushed_batches, len(self._batches)))
        self._flushed = self._dirty
        ctx = self._commit_context
        self.recovery_report = RecoveryReport(
            dirty_offset=self._dirty,
            start_offset=self._start,
            segments=len(self._batches),
            committed_offset=None if ctx is None else ctx.committed_offset,
            lost_committed_suffix=ctx is not None and ctx.committed_offset > self._dirty,
        )
        return self._dirty

    # -- records --------------------------------------------------------------------------

    def save_commit_context(self, ctx: CommitContext) -> None:
        """As the on-disk log's: a context older than the saved one is not written."""
        if (
            self._commit_context is None
            or ctx.committed_offset >= self._commit_context.committed_offset
        ):
            self._commit_context = ctx

    @property
    def commit_context_offset(self) -> int:
        """The committed offset of the latest commit context (-1: none), as the on-disk log's."""
        return -1 if self._commit_context is None else self._commit_context.committed_offset

    def load_commit_context(self) -> CommitContext | None:
        return self._commit_context

    def save_vote(self, vote: VoteState) -> None:
        self._vote = vote

    def load_vote(self) -> VoteState:
        return self._vote

    def close(self) -> None:
        """Nothing to release; the log stays usable (the simulator reuses it after a crash)."""
