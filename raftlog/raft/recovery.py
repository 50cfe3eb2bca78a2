"""``recovery``: catch up a follower that is behind, one request at a time.

A follower is recovered while the core has it in ``PROBE`` (see
:mod:`raftlog.raft.progress`): the pipeline in ``replicate_entries`` leaves it
alone, and this stage asks the core for the next chunk
(:meth:`RaftCore.recovery_chunk`: from where, how many bytes), reads it from
the leader log, has the core build the append (:meth:`RaftCore.recovery_request`,
which asks the follower to flush) and sends it; the reply goes back to the
core, which moves ``next_offset`` (back on a mismatch). When the core finds the
follower caught up it puts it back in ``REPLICATE`` and answers "stop". The
stage also stops when leadership or the term changes or the follower needs a
snapshot, and gives up after a few consecutive transport failures (the next
heartbeat reply restarts it).
"""

from __future__ import annotations

import asyncio

from raftlog.raft.errors import TransportError
from raftlog.raft.messages import APPEND_GROUP_UNAVAILABLE, AppendEntriesReply
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
            if not c.running:
                return
            chunk = c.core.recovery_chunk(node, term)
            if chunk is None:
                return
            batches = c.log.read(chunk.start, chunk.max_bytes)
            req = c.core.recovery_request(node, term, batches)
            if req is None:
                return
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
            c.core.handle_append_reply(node, term, req.prev_log_offset, reply)
            c.process_ready()
