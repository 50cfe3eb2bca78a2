"""The follower's side of append entries: check with the core, apply, flush, reply.

The stage steps a request into the core, which answers at once (a refusal, in
the ready's ``replies``) or plans it (``Ready.persist``: truncate here, append
these); ``Consensus.process_ready`` carries the plan out in the same call, so
appends never interleave. The stage then flushes when the plan asks
(``quorum_ack``; otherwise the core put the bytes in the ready for the
coalesced flush) and steps :class:`AppendPersisted`, whose ready holds the
reply. An append runs while a flush's fsync does; a request that may truncate
(one of its batches starts at or below the dirty offset) first takes the
flusher's truncation lock, so no suffix is cut under an fsync. A request that
overtook its predecessor on the network waits for it (at most a tick) instead
of being refused.
"""

from __future__ import annotations

import asyncio

from raftlog.faults.failpoints import RAFT_FOLLOWER_BEFORE_REPLY, failpoint
from raftlog.raft.core import reply_in
from raftlog.raft.errors import RaftError
from raftlog.raft.local_messages import AppendPersisted
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
        """Step ``req`` into the core, carry out the plan it persists (truncate, append;
        ``Consensus.process_ready``), flush when the plan asks, tell the core it is
        persisted; the reply the core made (a refusal comes at once)."""
        c = self._c
        if req.prev_log_offset > c.log.dirty_offset:
            await self._await_predecessor(req)
        if req.batches:
            await c.seal_ahead(req.batches[0].term)
        if not c.running:
            raise RaftError(f"group {c.group} on node {c.node_id} stopped")
        if req.batches and req.batches[0].base_offset <= c.log.dirty_offset:
            # Overlaps the log: a conflicting suffix may be cut, never under an fsync.
            async with c.flusher.truncation_lock:
                ready = c.step(req)
        else:
            ready = c.step(req)
        if ready.replies:
            return _append_reply(reply_in(ready))
        (plan,) = ready.persist
        if plan.flush and c.log.flushed_offset < c.log.dirty_offset:
            await c.flusher.flush_now()
        if not c.running:
            raise RaftError(f"group {c.group} on node {c.node_id} stopped")
        reply = _append_reply(reply_in(c.step(AppendPersisted(req))))
        if reply.result == APPEND_SUCCESS:
            failpoint(RAFT_FOLLOWER_BEFORE_REPLY)
        return reply


def _append_reply(reply: object) -> AppendEntriesReply:
    if not isinstance(reply, AppendEntriesReply):
        raise TypeError(f"an append answered with {reply!r}")
    return reply
