"""The state machines of one group: restored from the commit context, fed committed batches.

``apply(batch)`` (plain or async) is called for every committed batch in log
order, exactly once per process lifetime from the restored snapshot on;
``snapshot()`` is saved with the commit context and given back to
``restore()`` on start. The commit context only ever records an offset this
replica has flushed (and, with state machines, applied).

The applier takes the batches this replica appended from memory
(:meth:`Applier.appended`, up to ``PENDING_MAX_BYTES`` not yet applied) rather
than reading them back from its log: reading back decoded and checksummed every
byte a partition took once more, on every replica. A batch is taken from memory
only while no truncation or snapshot install came after it was queued and its
term is the log's at its offset (log matching: then it is the log's batch);
otherwise, and past the budget, the applier reads the log as before.

A state machine that never looks at the payload of a DATA batch (rm_stm reads
producer ids, sequences and offsets; the log start's state machine reads its
own kind) says so with ``reads_data_payloads = False``.
When every state machine of a group says so, a DATA batch waits in memory as its
header alone (:meth:`RecordBatch.without_payload`) and counts only that against
the budget: a follower with several MiB-sized appends in flight before it learns
the commit index no longer reads them back from its log (with 4 MiB batches,
4 in flight, each follower of a partition read back every byte it wrote).

A state machine whose ``apply`` raises on a batch skips that batch: the error is
logged with the group, the offsets and the state machine, counted in
:attr:`Applier.apply_errors` (``raftlog_stm_apply_errors_total``), and the applier
goes on. ``apply`` is a function of the committed log, so every replica fails on
the same batch and skipping it keeps them identical. Retrying could not help: the
batch never changes, and an applier that stops holds back ``last_applied``, so the
read barrier, the coordinator's waiters and every later batch of the group would
wait for good (one bad value would stop the partition).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from raftlog.raft import group_snapshot
from raftlog.raft.stage_context import GroupContext
from raftlog.storage.api import CommitContext
from raftlog.storage.batch import BatchKind, RecordBatch


class StateMachine(Protocol):
    """``reads_data_payloads`` (optional, True when absent): False promises that
    ``apply`` never reads the payload of a DATA batch, which may then come without
    it (see the module doc)."""

    def apply(self, batch: RecordBatch) -> object:
        """Apply one committed batch (may return an awaitable)."""
        ...

    def snapshot(self) -> bytes: ...

    def restore(self, data: bytes) -> None: ...


log_ = logging.getLogger(__name__)

PENDING_MAX_BYTES = 8 * 1024 * 1024
"""Bytes of appended, not yet applied batches the applier keeps in memory; an applier
further behind reads the rest from the log."""
#: The share of the event loop that building a group's commit-context snapshots may
#: take: a save waits until the last one's build time is this share of the time since
#: (see Applier._defer_save).
SNAPSHOT_LOOP_SHARE = 0.02


class Applier:
    def __init__(self, consensus: GroupContext, last_applied: int, saved_commit: int) -> None:
        """``saved_commit``: the offset of the commit context on disk (or the promise a
        replica behind its promise must keep durable: no context below it is saved)."""
        self._c = consensus
        self.stms: list[StateMachine] = []  # add() only
        self.last_applied = last_applied
        self._saved_commit = saved_commit
        # Bumped by install(): an apply in progress when a snapshot replaced the state
        # machines must not move last_applied afterwards.
        self._generation = 0
        # Called with each applied batch's last offset, once every state machine applied it.
        self.applied_listeners: list[Callable[[int], None]] = []
        # Appended batches not yet applied, contiguous, in log order; valid while the
        # group's truncation count is still _pending_truncations.
        self._pending: collections.deque[RecordBatch] = collections.deque()
        self._pending_bytes = 0
        self._pending_truncations = consensus.truncations
        # Every state machine declared reads_data_payloads = False: DATA batches wait
        # as headers (see the module doc). Set by add(), as the set is fixed at start.
        self._headers_only = False
        # Batches a state machine's apply() raised on (each skipped by it; see the module doc).
        self.apply_errors = 0
        # The last snapshot saved off the loop: how long it took to build and when it
        # was (loop time); a later save that waits for it (see _defer_save).
        self._last_build_s = 0.0
        self._last_save_at = float("-inf")
        self._save_due: asyncio.TimerHandle | None = None

    def add(self, stm: StateMachine) -> None:
        """Feed ``stm`` too (before the group starts: the set is fixed from then on)."""
        self.stms.append(stm)
        self._headers_only = not any(getattr(m, "reads_data_payloads", True) for m in self.stms)

    def appended(self, batches: Sequence[RecordBatch]) -> None:
        """This replica appended ``batches`` to its log (the next ones after the last
        appended): keep them for :meth:`run`, within ``PENDING_MAX_BYTES``."""
        if not self.stms or not batches:
            return
        if self._headers_only:
            batches = [b.without_payload() if b.kind is BatchKind.DATA else b for b in batches]
        pending = self._pending
        if self._pending_truncations != self._c.truncations or (
            pending and pending[-1].last_offset + 1 != batches[0].base_offset
        ):
            self._drop_pending()
        for b in batches:
            pending.append(b)
            self._pending_bytes += b.size_bytes
        while self._pending_bytes > PENDING_MAX_BYTES:
            self._pending_bytes -= pending.popleft().size_bytes

    def _drop_pending(self) -> None:
        self._pending.clear()
        self._pending_bytes = 0
        self._pending_truncations = self._c.truncations

    def _take_pending(self, start: int, last: int) -> list[RecordBatch] | None:
        """The kept batches from the one holding ``start`` through committed offset
        ``last``, in order; None when the first of them is not kept (read the log)."""
        c = self._c
        pending = self._pending
        if self._pending_truncations != c.truncations:
            self._drop_pending()
            return None
        while pending and pending[0].last_offset < start:
            self._pending_bytes -= pending.popleft().size_bytes
        if not pending or pending[0].base_offset > start:
            return None
        out: list[RecordBatch] = []
        while pending and pending[0].last_offset <= last:
            b = pending[0]
            if c.core.term_at(b.base_offset) != b.term:  # not the log's batch any more
                self._drop_pending()
                break
            out.append(pending.popleft())
            self._pending_bytes -= b.size_bytes
        return out or None

    def restore(self, ctx: CommitContext | None) -> None:
        """Restore every state machine from ``ctx``'s snapshot, or replay from the log start."""
        c = self._c
        if not self.stms:
            return
        if ctx is None or not ctx.snapshot or ctx.committed_offset > c.log.dirty_offset:
            self.last_applied = c.log.start_offset - 1
            return
        blobs = group_snapshot.split(ctx.snapshot)[1:]  # [0] is the configuration
        if len(blobs) != len(self.stms):
            self.last_applied = c.log.start_offset - 1
            return
        for stm, blob in zip(self.stms, blobs, strict=True):
            stm.restore(blob)
        self.last_applied = ctx.committed_offset

    def install(self, ctx: CommitContext) -> None:
        """A snapshot replaced the log up to ``ctx.committed_offset``: restore every state
        machine from it (the log holds nothing before it any more)."""
        self._generation += 1
        self.restore(ctx)
        if not self.stms:
            self.last_applied = ctx.committed_offset
        self._saved_commit = max(self._saved_commit, ctx.committed_offset)

    async def run(self) -> None:
        """The applier service: apply committed batches in log order, forever."""
        c = self._c
        while True:
            if self.last_applied >= c.core.commit_index:
                await c.commit_changed()
                continue
            start = self.last_applied + 1
            batches = self._take_pending(start, c.core.commit_index) or c.read(
                start, group_snapshot.SCAN_CHUNK
            )
            if not batches:
                await asyncio.sleep(c.options.tick_interval_s)
                continue
            generation = self._generation
            for b in batches:
                if b.last_offset <= self.last_applied:
                    continue
                for stm in self.stms:
                    await self._apply_one(stm, b)
                if generation != self._generation:
                    break  # a snapshot was installed meanwhile: its state stands
                self.last_applied = b.last_offset
                for listener in self.applied_listeners:
                    listener(b.last_offset)

    async def _apply_one(self, stm: StateMachine, batch: RecordBatch) -> None:
        """``stm.apply(batch)``; an exception skips the batch for ``stm``, loudly."""
        try:
            res = stm.apply(batch)
            # most apply() are plain and return None: skip the ABC check for them
            if res is not None and inspect.isawaitable(res):
                await res
        except Exception:
            self.apply_errors += 1
            log_.error(
                "group %d on node %s: %s.apply raised on the committed %s batch at offsets "
                "%d-%d; that state machine skips it (as every replica does) and goes on",
                self._c.group, self._c.node_id, type(stm).__name__, batch.kind.name,
                batch.base_offset, batch.last_offset, exc_info=True,
            )  # fmt: skip

    def snapshot(self) -> tuple[int, bytes]:
        """(offset, data): the group's state as of ``offset`` (the configuration effective
        there and every state machine's snapshot), in the commit context's format. The
        offset is the last applied one, or without state machines the commit index (as far
        as this replica has flushed it)."""
        offset = self._snapshot_offset()
        return offset, self._snapshot_at(offset)

    def _snapshot_at(self, offset: int) -> bytes:
        """The snapshot data as of ``offset``, which must be :meth:`_snapshot_offset` now
        (the state machines can only give their current state)."""
        cfg_offset, cfg = self._c.configs.at(offset)
        blobs = [stm.snapshot() for stm in self.stms]
        return group_snapshot.join([group_snapshot.config_blob(cfg_offset, cfg), *blobs])

    def _snapshot_offset(self) -> int:
        c = self._c
        if self.stms:
            return self.last_applied
        return max(min(c.core.commit_index, c.log.flushed_offset), self.last_applied)

    def save_commit_context(self, now: bool = False) -> None:
        """Save the latest commit context (only offsets this replica has flushed): off
        the loop through the group's ``commit_context_saver`` when it has one, unless
        ``now`` (then durable on return).

        Off the loop because thousands of groups quiesce at once after a failover or a
        creation, each saving its context: three fsyncs each on the event loop stalled
        it for seconds, long enough for its peers to declare this node dead. A save
        still in flight is a save not yet made: a crash keeps the previous context,
        which is what the replica recovers from anyway (contexts only move forward, one
        at a time per group through the writer)."""
        c = self._c
        committed = self._snapshot_offset()
        if committed > c.log.flushed_offset or committed <= self._saved_commit:
            return
        saver = c.commit_context_saver
        if saver is not None and not now and self._defer_save():
            return
        started = time.perf_counter()
        snapshot = self._snapshot_at(committed)
        term = c.core.term_at(committed)
        ctx = CommitContext(committed, term or 0, snapshot)
        if saver is None or now:
            c.log.save_commit_context(ctx)
            self._saved_commit = committed
            return
        self._last_build_s = time.perf_counter() - started
        self._last_save_at = asyncio.get_running_loop().time()
        previous, self._saved_commit = self._saved_commit, committed
        c.spawn(self._save_off_loop(saver, ctx, previous))

    def _defer_save(self) -> bool:
        """Whether this save waits: building the last snapshot took more than
        SNAPSHOT_LOOP_SHARE of the time since it. Then one save is due when that share
        is reached (a second call meanwhile adds none), with whatever is committed then.

        The controller's snapshot is the whole cluster's placement, built and encoded on
        the loop (about 0.1 s at 7,000 partitions); saved each time the group quiesced
        and every ``commit_context_interval_ticks`` while active, it took a tenth of each
        node's loop while topics were created one after the other. A partition's builds
        in well under a millisecond: its saves never wait. A deferred save is a save in
        flight: a crash keeps the previous context, as after any save not made yet."""
        loop = asyncio.get_running_loop()
        wait = self._last_save_at + self._last_build_s / SNAPSHOT_LOOP_SHARE - loop.time()
        if wait <= 0:
            return False
        if self._save_due is None:
            self._save_due = loop.call_later(wait, self._due_save)
        return True

    def _due_save(self) -> None:
        self._save_due = None
        if self._c.running:
            self.save_commit_context()

    async def _save_off_loop(
        self, saver: Callable[[CommitContext], Awaitable[None]], ctx: CommitContext, previous: int
    ) -> None:
        try:
            await saver(ctx)
        except BaseException as exc:
            # Not saved (a disk error, or the group stopping: its stop saves at once):
            # the next save writes it again.
            if self._saved_commit == ctx.committed_offset:
                self._saved_commit = previous
            if isinstance(exc, Exception):
                log_.warning("%s: saving the commit context failed: %r", self._c.group, exc)
                return
            raise
