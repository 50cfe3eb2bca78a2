"""``replicate_entries``: the leader's append and dispatch stage.

For one drained batch of requests from the ``replicate_batcher``:

1. requests whose expected term is not the current term fail with
   ``TermMismatchError`` without being appended; everything fails with
   ``NotLeaderError`` when this node does not accept writes;
2. the batches are stamped (offset, term) and appended to the leader log
   *without* a flush; ``leader_ack``/``no_ack`` callers are answered now;
3. append_entries go to every follower in parallel with the leader's flush
   (requested only when a ``quorum_ack`` request is present; otherwise the
   flush is coalesced). A follower is sent the request only when its
   ``last_sent_offset`` equals the request's ``prev_log_offset``, it is not
   recovering and it has fewer than ``max_in_flight`` appends outstanding;
   otherwise ``recovery`` takes it over (so the two never reorder appends);
4. the batcher's memory units are released once the requests are handed to
   the transport; ``quorum_ack`` callers are answered when the commit index
   passes their last offset.
"""

from __future__ import annotations

import asyncio

from raftlog.raft.errors import TermMismatchError, TransportError
from raftlog.raft.messages import APPEND_GROUP_UNAVAILABLE, AppendEntriesReply, AppendEntriesRequest
from raftlog.raft.progress import FollowerProgress
from raftlog.raft.replicate_batcher import Consistency, ReplicateRequest, ReplicateResult
from raftlog.raft.stage_context import GroupContext
from raftlog.storage.batch import RecordBatch


class ReplicateEntries:
    def __init__(self, consensus: GroupContext) -> None:
        self._c = consensus
        self.appends = 0
        # Set (and replaced) whenever a pipelined append to a follower completes.
        self._slot_freed = asyncio.Event()

    async def __call__(self, reqs: list[ReplicateRequest]) -> None:
        c = self._c
        units = sum(r.units for r in reqs)
        try:
            await self._replicate(reqs)
        finally:
            c.batcher.memory.release(units)

    async def _await_follower_slots(self) -> None:
        """Wait (at most a tick) while a follower in the pipeline has no append slot free.

        The leader appends faster than a follower that fsyncs can reply. Sending
        anyway would hand that follower to recovery (one request per round trip,
        which then chases the leader); waiting instead lets the queued requests
        build up in the batcher and go as one larger append: fewer requests, fewer
        fsyncs. A follower still saturated after the wait goes to recovery.
        """
        c = self._c
        limit = c.options.max_in_flight_appends
        deadline = asyncio.get_running_loop().time() + c.options.tick_interval_s
        for _ in range(limit * 8):
            if not any(not p.recovering and p.in_flight >= limit for p in c.core.progress.values()):
                return
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(self._slot_freed.wait(), remaining)
            except TimeoutError:
                return

    async def _replicate(self, reqs: list[ReplicateRequest]) -> None:
        await self._await_follower_slots()
        async with self._c.flusher.mutation_lock:
            dispatch = self._append(reqs)
        if dispatch is not None:
            self._dispatch(*dispatch)
            # Let the send tasks reach the transport before the memory units go back.
            await asyncio.sleep(0)

    def _append(
        self, reqs: list[ReplicateRequest]
    ) -> tuple[int, int, list[RecordBatch], bool] | None:
        """Steps 1-2 (no await: offsets and the append are atomic); what to dispatch."""
        c = self._c
        core = c.core
        if not (c.running and core.accepting_writes):
            err = c.not_leader_error()
            for r in reqs:
                if not r.stages.finished.done():
                    r.stages.finished.set_exception(err)
            return None
        term = core.term
        accepted: list[ReplicateRequest] = []
        for r in reqs:
            if r.stages.finished.done():
                # The caller gave up (cancelled ``finished``) while the request waited
                # for a follower slot or the flush lock: it is not appended.
                continue
            if r.expected_term not in (-1, term):
                r.stages.finished.set_exception(TermMismatchError(c.group, r.expected_term, term))
            else:
                accepted.append(r)
        if not accepted:
            return None
        prev = c.log.dirty_offset
        offset = prev + 1
        stamped = []
        spans = []
        for r in accepted:
            base = offset
            for b in r.batches:
                nb = b.stamped(offset, term)
                stamped.append(nb)
                offset = nb.last_offset + 1
            spans.append((r, base, offset - 1))
        c.append_local(stamped)
        self.appends += 1
        quorum = False
        for r, base, last in spans:
            result = ReplicateResult(base, last, term)
            if r.consistency is Consistency.QUORUM_ACK:
                quorum = True
                c.register_commit_waiter(result, r.stages.finished)
            elif not r.stages.finished.done():
                r.stages.finished.set_result(result)
        return prev, term, stamped, quorum

    def _dispatch(self, prev: int, term: int, stamped: list[RecordBatch], quorum: bool) -> None:
        """Step 3: the leader flush in parallel with append_entries to every follower."""
        c = self._c
        core = c.core
        if not (c.running and core.is_leader and core.term == term):
            return
        prev_term = core.term_at(prev)
        nbytes = sum(b.size_bytes for b in stamped)
        if quorum:
            c.spawn(c.flusher.flush_now())
        else:
            c.flusher.note_append(nbytes)
        last_offset = stamped[-1].last_offset
        for p in list(core.progress.values()):
            if (
                not p.recovering
                and p.last_sent_offset == prev
                and p.in_flight < c.options.max_in_flight_appends
            ):
                req = AppendEntriesRequest(
                    group=c.group,
                    source_node=c.node_id,
                    target_node=p.node,
                    term=term,
                    prev_log_offset=prev,
                    prev_log_term=prev_term if prev_term is not None else 0,
                    leader_commit=core.commit_index,
                    flush=quorum,
                    batches=stamped,
                    seq=core.next_seq(p.node),
                )
                p.last_sent_offset = last_offset
                p.in_flight += 1
                c.spawn(self._send(p, req))
            else:
                if not p.recovering:
                    p.recovering = True
                    p.next_offset = min(p.next_offset, p.last_sent_offset + 1)
                c.recovery.ensure(p.node)
        c.process_ready()

    async def _send(self, p: FollowerProgress, req: AppendEntriesRequest) -> None:
        c = self._c
        try:
            reply = await c.transport.send(p.node, req)
        except TransportError:
            reply = None
        finally:
            p.in_flight -= 1
            self._slot_freed.set()
            self._slot_freed = asyncio.Event()
        if not c.running:
            return
        if not isinstance(reply, AppendEntriesReply) or reply.result == APPEND_GROUP_UNAVAILABLE:
            c.core.on_send_failed(p.node, req.term)
        else:
            c.core.handle_append_reply(p.node, req.term, req.prev_log_offset, reply)
        c.process_ready()
