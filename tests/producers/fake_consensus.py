"""An in-memory stand-in for raftlog.raft.consensus.Consensus, as rm_stm uses it.

One leader's view: ``replicate`` appends at once (``enqueued`` resolves, the
order is fixed). Committing is automatic unless ``auto_commit`` is off, when
the test calls :meth:`commit`. Committed batches are applied to every
registered state machine in order. :meth:`new_term` models an election:
uncommitted entries are kept (the new leader had them) or dropped (it did
not), and callers still waiting get LeadershipLostError.
"""

from __future__ import annotations

import asyncio

from raftlog.raft.errors import LeadershipLostError, NotLeaderError, TermMismatchError
from raftlog.raft.replicate_batcher import Consistency, ReplicateResult, ReplicateStages
from raftlog.storage.batch import RecordBatch


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
        if not keep_uncommitted:
            self.log = [b for b in self.log if b.last_offset <= self.commit_index]
        self.term += 1
        self.is_leader = True

    def read(self, start: int = 0) -> list[RecordBatch]:
        return [b for b in self.log if b.base_offset >= start]
