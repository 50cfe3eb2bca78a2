"""The ``quorum_ack`` callers of one group, waiting for the commit index to pass their entry.

Waiters are registered in log order (``replicate_entries`` appends, then
registers), so resolving them is a walk from the front. A waiter whose entry
was replaced by another term's (truncated after a leadership change) gets
:class:`LeadershipLostError`: the outcome of its write is uncertain.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from raftlog.raft.errors import LeadershipLostError
from raftlog.raft.replicate_batcher import ReplicateResult


@dataclasses.dataclass(slots=True)
class _Waiter:
    result: ReplicateResult
    future: asyncio.Future[ReplicateResult]


class CommitWaiters:
    def __init__(self, group: int) -> None:
        self.group = group
        self._waiters: list[_Waiter] = []

    def register(self, result: ReplicateResult, future: asyncio.Future[ReplicateResult]) -> None:
        """Resolve ``future`` with ``result`` once the commit index passes its last offset."""
        self._waiters.append(_Waiter(result, future))

    def on_commit(
        self, commit_index: int, term_at: Callable[[int], int | None], leader_id: int
    ) -> None:
        """Resolve every waiter at or below ``commit_index`` (its entry's term decides how)."""
        done = 0
        for w in self._waiters:
            if w.result.last_offset > commit_index:
                break
            done += 1
            if w.future.done():
                continue
            if term_at(w.result.last_offset) == w.result.term:
                w.future.set_result(w.result)
            else:
                w.future.set_exception(LeadershipLostError(self.group, leader_id))
        del self._waiters[:done]

    def leadership_lost(self, leader_id: int) -> None:
        """Stepped down: every waiter's outcome is uncertain."""
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.future.done():
                w.future.set_exception(
                    LeadershipLostError(
                        self.group,
                        leader_id,
                        f"group {self.group}: leadership lost before offset "
                        f"{w.result.last_offset} was known committed (outcome uncertain)",
                    )
                )

    def fail_all(self, exc: BaseException) -> None:
        waiters, self._waiters = self._waiters, []
        for w in waiters:
            if not w.future.done():
                w.future.set_exception(exc)
