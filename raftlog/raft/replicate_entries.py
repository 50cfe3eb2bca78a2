"""``replicate_entries``: the leader's append and dispatch stage.

For one drained batch of requests from the ``replicate_batcher``:

1. requests whose expected term is not the current term fail with
   ``TermMismatchError`` without being appended; everything fails with
   ``NotLeaderError`` when this node does not accept writes;
2. the core places the batches (a ``Propose`` step: offset, term) and
   decides, per follower, whether the append is streamed to it (``REPLICATE``
   with room in its in-flight window), waits (a full window: the follower is
   paused until a reply frees a slot) or the follower goes to ``recovery``;
   the group carries out that ready: the local append (no flush), then the
   leader's flush (at once when a ``quorum_ack`` request is present;
   otherwise coalesced) in parallel with the append entries (:meth:`send`);
   ``leader_ack``/``no_ack`` callers are answered after the local append;
3. the batcher's memory units are released once the requests are handed to
   the transport; ``quorum_ack`` callers are answered when the commit index
   passes their last offset.

Each send's outcome goes back to the core (stepped in as an ``AppendAnswered``),
which frees the request's slot in the follower's window, applies the reply and,
for a paused follower, sends what it missed as one append.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from raftlog.raft.errors import TermMismatchError, TransportError
from raftlog.raft.local_messages import AppendAnswered, Propose
from raftlog.raft.messages import AppendEntriesReply, AppendEntriesRequest
from raftlog.raft.replicate_batcher import Consistency, ReplicateRequest, ReplicateResult
from raftlog.raft.stage_context import GroupContext


class ReplicateEntries:
    def __init__(self, consensus: GroupContext) -> None:
        self._c = consensus
        self.appends = 0

    async def __call__(self, reqs: list[ReplicateRequest]) -> None:
        c = self._c
        units = sum(r.units for r in reqs)
        try:
            await self._replicate(reqs)
        finally:
            c.batcher.memory.release(units)

    async def _replicate(self, reqs: list[ReplicateRequest]) -> None:
        # No wait for a follower whose in-flight window is full: the core pauses it, and
        # the reply that frees a slot sends it all it missed as one append. (Waiting here
        # for a slot, up to a tick, cost the sink's load 7 % more node CPU per row.)
        # No lock: the append runs while a flush's fsync does (that flush covers only
        # what was written before it started; the next one covers this append).
        appended = self._append(reqs)
        if appended:
            # Let the send tasks reach the transport before the memory units go back.
            await asyncio.sleep(0)

    def _append(self, reqs: list[ReplicateRequest]) -> bool:
        """Steps 1-2 (no await: placing and appending are atomic); True when appended."""
        c = self._c
        core = c.core
        if not (c.running and core.accepting_writes):
            err = c.not_leader_error()
            for r in reqs:
                if not r.stages.finished.done():
                    r.stages.finished.set_exception(err)
            return False
        term = core.term
        accepted: list[ReplicateRequest] = []
        for r in reqs:
            if r.stages.finished.done():
                # The caller gave up (cancelled ``finished``) while the request waited
                # in the batcher: it is not appended.
                continue
            if r.expected_term not in (-1, term):
                r.stages.finished.set_exception(TermMismatchError(c.group, r.expected_term, term))
            else:
                accepted.append(r)
        if not accepted:
            return False
        quorum = any(r.consistency is Consistency.QUORUM_ACK for r in accepted)
        # The placed copies are carried out (appended locally, sent) in this call; a
        # commit can only come from a later ready (a flush or a reply), after the
        # waiters below are registered.
        batches = [b for r in accepted for b in r.batches]
        ready = c.step(Propose(batches, flush=quorum))
        # This proposal's copies are the last ones placed: a ready may also list what an
        # earlier Propose placed if its ready was not taken (the core's unstable tail).
        placed = ready.append[len(ready.append) - len(batches) :]
        results = []
        i = 0
        for r in accepted:
            mine = placed[i : i + len(r.batches)]
            i += len(r.batches)
            result = ReplicateResult(mine[0].base_offset, mine[-1].last_offset, term)
            results.append(result)
            if r.consistency is Consistency.QUORUM_ACK:
                c.register_commit_waiter(result, r.stages.finished)
        self.appends += 1
        for r, result in zip(accepted, results, strict=True):
            if r.consistency is not Consistency.QUORUM_ACK and not r.stages.finished.done():
                r.stages.finished.set_result(result)
        return True

    def send(self, node: int, req: AppendEntriesRequest) -> None:
        """Send one pipelined append the core decided on, written to the follower's
        stream in this call where the transport can (``send_now``); its outcome goes
        back to the core."""
        c = self._c
        c.spawn(self._send(node, req, c.transport.send_now(node, req)))

    async def _send(
        self, node: int, req: AppendEntriesRequest, sent: Awaitable[object] | None
    ) -> None:
        c = self._c
        try:
            reply = await (sent if sent is not None else c.transport.send(node, req))
        except TransportError:
            reply = None
        if not c.running:
            return
        c.step(AppendAnswered(node, req, reply if isinstance(reply, AppendEntriesReply) else None))
