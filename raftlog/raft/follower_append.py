"""The follower's side of append entries: check with the core, apply, flush, reply.

The core checks a request and plans it (``check_append``: truncate here,
append these); this stage applies the plan with no await between check and
mutation, so appends never interleave; flushes when the request asks
(``quorum_ack``), otherwise notes the bytes for the coalesced flush; and asks
the core for the reply (``finish_append``). An append runs while a flush's
fsync does; a request that may truncate (one of its batches starts at or below
the dirty offset) first takes the flusher's truncation lock, so no suffix is
cut under an fsync. A request that overtook its predecessor on the network
waits for it (at most a tick) instead of being refused.
"""

from __future__ import annotations

import asyncio

from raftlog.faults.failpoints import RAFT_FOLLOWER_BEFORE_REPLY, failpoint
from raftlog.raft.core import AppendPlan
from raftlog.raft.errors import RaftError
from raftlog.raft.messages import APPEND_SUCCESS, AppendEntriesReply, AppendEntriesRequest
from raftlog.raft.stage_context import GroupContext


class FollowerAppend:
    def __init__(self, consensus: GroupContext) -> None:
        self._c = consensus
        # Set (and replaced) on every local append: a request that arrived before its
        # predecessor waits on it (see _await_predecessor). None until started.
        self._appended: asyncio.Event | None = None

    def start(self) -> None:
        self._appended = asyncio.Event()

    def appended(self) -> None:
        """The local log grew: wake requests waiting for their predecessor."""
        if self._appended is not None:
            self._appended.set()
            self._appended = asyncio.Event()

    async def _await_predecessor(self, req: AppendEntriesRequest) -> None:
        """Wait (at most a tick) for the appends before ``req`` when it overtook them.

        The leader pipelines appends over several connections, so one can arrive
        before its predecessor. Rejecting it would hand the follower to recovery
        (one request per round trip) for no reason: the predecessor is on its way.
        """
        c = self._c
        core = c.core
        deadline = asyncio.get_running_loop().time() + c.options.tick_interval_s
        for _ in range(c.options.max_in_flight_appends + 1):
            if not (
                c.running
                and self._appended is not None
                and req.term == core.term
                and req.source_node == core.leader_id
                and req.prev_log_offset > c.log.dirty_offset
            ):
                return
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._appended.wait(), remaining)
            except TimeoutError:
                return

    async def handle(self, req: AppendEntriesRequest) -> AppendEntriesReply:
        """Check, apply (truncate, append), flush when asked, and the reply to send."""
        c = self._c
        if req.prev_log_offset > c.log.dirty_offset:
            await self._await_predecessor(req)
        if req.batches:
            await c.seal_ahead(req.batches[0].term)
        if req.batches and req.batches[0].base_offset <= c.log.dirty_offset:
            # Overlaps the log: a conflicting suffix may be cut, never under an fsync.
            async with c.flusher.truncation_lock:
                plan = self._apply(req, may_truncate=True)
        else:
            plan = self._apply(req, may_truncate=False)
        if isinstance(plan, AppendEntriesReply):
            return plan
        if req.flush and c.log.flushed_offset < c.log.dirty_offset:
            await c.flusher.flush_now()
        elif plan.batches:
            c.flusher.note_append(sum(b.size_bytes for b in plan.batches))
        if not c.running:
            raise RaftError(f"group {c.group} on node {c.node_id} stopped")
        reply = c.core.finish_append(req)
        c.process_ready()
        if reply.result == APPEND_SUCCESS:
            failpoint(RAFT_FOLLOWER_BEFORE_REPLY)
        return reply

    def _apply(
        self, req: AppendEntriesRequest, may_truncate: bool
    ) -> AppendPlan | AppendEntriesReply:
        """Check ``req`` and apply its plan (truncate, append), with no await in between.

        ``may_truncate`` says whether the caller holds the truncation lock; without it
        the plan cannot truncate (no batch of ``req`` starts at or below the dirty
        offset, checked with no await before this call), which is asserted.
        """
        c = self._c
        if not c.running:
            raise RaftError(f"group {c.group} on node {c.node_id} stopped")
        plan = c.core.check_append(req)
        if isinstance(plan, AppendEntriesReply):
            c.process_ready()
            return plan
        if plan.truncate_at != -1:
            if not may_truncate:
                raise RaftError(
                    f"group {c.group} on node {c.node_id}: a truncation at {plan.truncate_at} "
                    "was planned without the truncation lock (dirty offset "
                    f"{c.log.dirty_offset}, first batch {req.batches[0].base_offset})"
                )
            c.truncate_local(plan.truncate_at)
        if plan.batches:
            c.append_local(plan.batches)
        c.process_ready()
        return plan
