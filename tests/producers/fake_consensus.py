"""An in-memory stand-in for raftlog.raft.consensus.Consensus, as rm_stm uses it.

One leader's view: ``replicate`` appends at once (``enqueued`` resolves, the
order is fixed). Committing is automatic unless ``auto_commit`` is off, when
the test calls :meth:`commit`. Committed batches are applied to every
registered state machine in order. :meth:`new_term` models an election:
uncommitted entries are kept (the new leader had them) or dropped (it did
not), and callers still waiting get LeadershipLostError. :meth:`read_barrier` is
the group's read barrier as this leader sees it; ``quorum_answers`` off models a
leader cut off from its followers (a quorum round never completes).
"""

from __future__ import annotations

import asyncio

from raftlog.raft.errors import (
    LeadershipLostError,
    NotLeaderError,
    ReadBarrierTimeout,
    TermMismatchError,
)
from raftlog.raft.replicate_batcher import Consistency, ReplicateResult, ReplicateStages
from raftlog.storage.batch import BatchKind, RecordBatch


class FakeConsensus:
    def __init__(self, *, auto_commit: bool = True) -> None:
        self.group = 0
        self.leader_id = 1
        self.term = 1
        self.is_leader = True
        self.auto_commit = auto_commit
        self.log: list[RecordBatch] = []
        self.commit_index = -1
        self.stms: list = []
        self.step_downs = 0
        self.fail_enqueue: Exception | None = None
        self._waiting: list[tuple[int, asyncio.Future[ReplicateResult], ReplicateResult]] = []
        self._readers: list[asyncio.Future[None]] = []  # read_barrier callers waiting
        self.quorum_answers = True
        self.quorum_rounds = 0  # read barriers that asked for a quorum round

    @property
    def high_watermark(self) -> int:
        return self.commit_index + 1

    @property
    def next_offset(self) -> int:
        return self.log[-1].last_offset + 1 if self.log else 0

    def add_state_machine(self, stm: object) -> None:
        self.stms.append(stm)

    def replicate(
        self, batches: list[RecordBatch], consistency: Consistency, expected_term: int
    ) -> ReplicateStages:
        error: Exception | None = None
        if self.fail_enqueue is not None:
            error, self.fail_enqueue = self.fail_enqueue, None
        elif not self.is_leader:
            error = NotLeaderError(self.group, -1)
        elif expected_term not in (-1, self.term):
            error = TermMismatchError(self.group, expected_term, self.term)
        if error is not None:
            return ReplicateStages.failed(error)
        stages = ReplicateStages.pending()
        placed = []
        for b in batches:
            placed.append(b.stamped(self.next_offset, self.term))
            self.log.append(placed[-1])
        result = ReplicateResult(placed[0].base_offset, placed[-1].last_offset, self.term)
        stages.enqueued.set_result(None)
        if consistency is Consistency.QUORUM_ACK:
            self._waiting.append((result.last_offset, stages.finished, result))
        else:
            stages.finished.set_result(result)
        if self.auto_commit:
            self.commit()
        return stages

    def commit(self, upto: int | None = None) -> None:
        """Commit the log through ``upto`` (default: all) and apply it."""
        target = self.next_offset - 1 if upto is None else upto
        for b in self.log:
            if self.commit_index < b.last_offset <= target:
                self.commit_index = b.last_offset
                for stm in self.stms:
                    stm.apply(b)
        still = []
        for last, fut, result in self._waiting:
            if last <= self.commit_index:
                if not fut.done():
                    fut.set_result(result)
            else:
                still.append((last, fut, result))
        self._waiting = still
        if self._committed_in_term():
            for reader in self._readers:
                if not reader.done():
                    reader.set_result(None)
            self._readers = []

    async def read_barrier(self, timeout_s: float, *, quorum_round: bool = False) -> int:
        """The real group's read barrier, as this one leader sees it: once an entry of
        the term is committed (here the leader's no-op is appended when first asked,
        committed with the rest) and so applied (commit applies at once), and with
        ``quorum_round`` once a quorum answered (never, with ``quorum_answers`` off);
        NotLeaderError on a follower or when the term ends first, ReadBarrierTimeout
        after ``timeout_s``."""
        if not self.is_leader:
            raise NotLeaderError(self.group, -1)
        if not any(b.term == self.term for b in self.log):
            noop = RecordBatch.create(b"", kind=BatchKind.NOOP, timestamp_ms=0)  # as the core's
            self.replicate([noop], Consistency.QUORUM_ACK, -1)
        if quorum_round:
            self.quorum_rounds += 1
        if self._committed_in_term() and (self.quorum_answers or not quorum_round):
            return self._read_index()
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._readers.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
        except TimeoutError:
            why = f"group {self.group}: nothing of term {self.term} committed"
            if quorum_round and not self.quorum_answers:
                why = f"group {self.group}: no quorum answered in term {self.term}"
            raise ReadBarrierTimeout(why) from None
        if quorum_round and not self.quorum_answers:
            raise ReadBarrierTimeout(f"group {self.group}: no quorum answered")
        return self._read_index()

    def _read_index(self) -> int:
        """The term's read index: its first entry (every earlier term's entry precedes it)."""
        return next(b.last_offset for b in self.log if b.term == self.term)

    def _committed_in_term(self) -> bool:
        return any(b.term == self.term and b.last_offset <= self.commit_index for b in self.log)

    def step_down(self) -> None:
        self.step_downs += 1
        self.is_leader = False

    def new_term(self, *, keep_uncommitted: bool) -> None:
        """An election won by this node again (or by a peer with the same committed log)."""
        for _, fut, _ in self._waiting:
            if not fut.done():
                fut.set_exception(LeadershipLostError(self.group, -1))
                fut.exception()
        self._waiting = []
        for reader in self._readers:
            if not reader.done():
                reader.set_exception(NotLeaderError(self.group, -1))
                reader.exception()
        self._readers = []
        if not keep_uncommitted:
            self.log = [b for b in self.log if b.last_offset <= self.commit_index]
        self.term += 1
        self.is_leader = True

    def read(self, start: int = 0) -> list[RecordBatch]:
        return [b for b in self.log if b.base_offset >= start]
