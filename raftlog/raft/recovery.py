"""``recovery``: catch up a follower that is behind, one request at a time.

A follower is in recovery while ``progress.recovering`` is set: the pipeline in
``replicate_entries`` leaves it alone and this stage reads chunks (default
512 KiB) from the leader log from ``progress.next_offset`` and sends them one
append at a time (each asks the follower to flush). A mismatch reply moves
``next_offset`` back (the core decides how far). When ``next_offset`` passes
the leader's dirty offset, recovery hands the follower back to the pipeline by
setting ``last_sent_offset`` to the dirty offset and clearing ``recovering``,
with no await in between, so no append can slip between the two and be
reordered. It stops when leadership or the term changes, and gives up after a
few consecutive transport failures (the next heartbeat reply restarts it).
"""

from __future__ import annotations

import asyncio

from raftlog.raft.errors import TransportError
from raftlog.raft.messages import APPEND_GROUP_UNAVAILABLE, AppendEntriesReply, AppendEntriesRequest
from raftlog.raft.stage_context import GroupContext

MAX_ROUNDS = 100_000
MAX_CONSECUTIVE_FAILURES = 3


class Recovery:
    def __init__(self, consensus: GroupContext) -> None:
        self._c = consensus
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self.requests_sent = 0

    def ensure(self, node: int) -> None:
        """Start recovering ``node`` unless it already is."""
        task = self._tasks.get(node)
        if task is None or task.done():
            self._tasks[node] = self._c.spawn(self._run(node, self._c.core.term))

    def cancel_all(self) -> None:
        for task in self._tasks.values():
            task.cancel()
        self._tasks.clear()

    async def _run(self, node: int, term: int) -> None:
        c = self._c
        failures = 0
        for _ in range(MAX_ROUNDS):
            core = c.core
            p = core.progress.get(node)
            if not (c.running and core.is_leader and core.term == term and p and p.recovering):
                return
            if p.next_offset > c.log.dirty_offset:
                # Caught up: hand the follower back to the pipeline atomically.
                p.last_sent_offset = c.log.dirty_offset
                p.recovering = False
                return
            start = max(p.next_offset, c.log.start_offset)
            batches = c.log.read(start, c.options.recovery_chunk_bytes)
            if not batches:
                return
            prev = batches[0].base_offset - 1
            prev_term = core.term_at(prev)
            if prev_term is None:
                return  # below the log start: would need a snapshot (not supported)
            req = AppendEntriesRequest(
                group=c.group,
                source_node=c.node_id,
                target_node=node,
                term=term,
                prev_log_offset=prev,
                prev_log_term=prev_term,
                leader_commit=core.commit_index,
                flush=True,
                batches=batches,
                seq=core.next_seq(node),
            )
            self.requests_sent += 1
            try:
                reply = await c.transport.send(node, req)
            except TransportError:
                reply = None
            if not isinstance(reply, AppendEntriesReply) or (
                reply.result == APPEND_GROUP_UNAVAILABLE
            ):
                failures += 1
                if failures >= MAX_CONSECUTIVE_FAILURES:
                    return
                await asyncio.sleep(c.options.tick_interval_s)
                continue
            failures = 0
            if not c.running:
                return
            c.core.handle_append_reply(node, term, prev, reply)
            c.process_ready()
