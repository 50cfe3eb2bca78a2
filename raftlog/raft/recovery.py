"""``recovery``: catch up a follower that is behind, several chunks in flight at once.

A follower is recovered while the core has it in ``PROBE`` (see
:mod:`raftlog.raft.progress`): the pipeline in ``replicate_entries`` leaves it
alone, and this stage asks the core for the next chunk (it steps a
``RecoveryPoll``; the ready's ``recovery_read`` says from where, how many
bytes), reads it from the leader log, has the core build the append (it steps
the ``RecoveryChunkRead``; the ready's ``recovery_send`` holds the append,
which asks the follower to flush and is entered in the follower's recovery
window) and sends it without waiting for its reply; then it asks again, and
only when the core has nothing to hand out does it wait for a reply. Each
reply goes to the core as it arrives (stepped in as a ``RecoveryAnswered``),
which moves ``next_offset`` on (or back, on a mismatch) and frees the chunk's
place in the window. The core decides everything: one chunk at a time until a
success confirmed where the follower's log matches, then up to
``recovery_max_inflight`` chunks, each from where the last one ended; back to
one at a time after a mismatch or a lost chunk. Replies to chunks sent before
such a restart are judged like any reply, by seq and term, so a late one
never moves the follower's progress back. On a real network a catch-up so
costs about one round trip (and one follower fsync) per window of chunks
instead of per chunk.

When the core finds the follower caught up (no chunk in flight, ``next_offset``
past the log's end) it puts it back in ``REPLICATE`` and hands out nothing: the
stage stops once nothing of its own is in flight. It also stops when leadership
or the term changes, and gives up after a few requests in a row without a
usable reply, as the core decides (a ``RecoveryLost`` stepped in; the ready's
``recovery_retry`` says whether to send again; the next heartbeat reply
restarts it). The stage decides nothing itself: every verdict comes out of a
ready, as etcd's leader's ``MsgApp`` and ``MsgSnap`` do. Chunks still in flight
when a run stops finish on their own and report to the core; a later run for
the same follower waits on them.

A follower behind the leader's log start (``SNAPSHOT``: retention deleted
what it lacks) is first sent the snapshot as of the log start (Redpanda's
recovery installs it the same way), in chunks of ``recovery_chunk_bytes``, one
round trip each (after the log chunks in flight were answered); once installed,
the follower probes from the log start and this stage goes on sending the log.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import TypeVar

from raftlog.raft.core import Message, Ready
from raftlog.raft.errors import TransportError
from raftlog.raft.local_messages import (
    InstallAnswered,
    RecoveryAnswered,
    RecoveryChunkRead,
    RecoveryLost,
    RecoveryPoll,
    SnapshotChunkRead,
)
from raftlog.raft.messages import (
    APPEND_GROUP_UNAVAILABLE,
    AppendEntriesReply,
    AppendEntriesRequest,
    InstallSnapshotReply,
    InstallSnapshotRequest,
)
from raftlog.raft.stage_context import GroupContext

log = logging.getLogger(__name__)

MAX_ROUNDS = 100_000

_Req = TypeVar("_Req", AppendEntriesRequest, InstallSnapshotRequest)
_Reply = TypeVar("_Reply", AppendEntriesReply, InstallSnapshotReply)


class _NoReply(enum.Enum):
    """What :meth:`Recovery._round_trip` returns when the follower gave no usable reply."""

    STOP = enum.auto()  # stop recovering (the next heartbeat reply restarts it)
    RETRY = enum.auto()  # the core counted the failure: send again


class Recovery:
    def __init__(self, consensus: GroupContext) -> None:
        self._c = consensus
        self._tasks: dict[int, asyncio.Task[None]] = {}
        # Per follower: the log chunks sent and not yet answered (each task hands its
        # reply to the core itself), and what those that finished reported meanwhile.
        # Kept across runs, so a run started while chunks are out waits on them.
        self._chunks: dict[int, dict[asyncio.Task[_NoReply | None], None]] = {}
        self._outcomes: dict[int, list[_NoReply]] = {}
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
        for chunks in self._chunks.values():
            for chunk in chunks:
                chunk.cancel()
        self._chunks.clear()
        self._outcomes.clear()

    async def _run(self, node: int, term: int) -> None:
        c = self._c
        chunks = self._chunks.setdefault(node, {})
        self._outcomes[node] = []  # a finished run's verdicts are not this one's
        for _ in range(MAX_ROUNDS):
            if not c.running:
                return
            ready = c.step(RecoveryPoll(node, term))
            if node in ready.install_wanted:
                if chunks:  # their replies first: one of them may change the verdict
                    if not await self._settle(node, chunks):
                        return
                    continue
                if not await self._install(node, term):
                    return
                continue
            chunk = ready.recovery_read.get(node)
            if chunk is None:
                if not chunks:
                    return  # caught up (the core switched it to REPLICATE), or not ours
                if not await self._settle(node, chunks):
                    return
                continue
            batches = c.log.read(chunk.start, chunk.max_bytes)
            req = _sent(c.step(RecoveryChunkRead(node, term, batches)), node, AppendEntriesRequest)
            if req is None:
                return
            task = c.spawn(self._send_chunk(node, term, req))
            chunks[task] = None
            task.add_done_callback(lambda t: self._chunk_done(node, chunks, t))

    async def _send_chunk(self, node: int, term: int, req: AppendEntriesRequest) -> _NoReply | None:
        outcome = await self._round_trip(
            node,
            term,
            req,
            AppendEntriesReply,
            lambda sent, reply: RecoveryAnswered(node, sent, reply),
            windowed=True,
        )
        return outcome if isinstance(outcome, _NoReply) else None

    def _chunk_done(
        self,
        node: int,
        chunks: dict[asyncio.Task[_NoReply | None], None],
        task: asyncio.Task[_NoReply | None],
    ) -> None:
        chunks.pop(task, None)
        if task.cancelled() or task.exception() is not None:
            return  # the group's supervision reports an exception
        outcome = task.result()
        if outcome is not None and node in self._outcomes:
            self._outcomes[node].append(outcome)

    async def _settle(self, node: int, chunks: dict[asyncio.Task[_NoReply | None], None]) -> bool:
        """Wait until a chunk in flight to ``node`` is answered (its task gave the reply,
        or the failure, to the core); False to stop (the core gave up), after a tick's
        pause when one was lost and the core wants it sent again."""
        # The finished tasks' done callbacks (_chunk_done) ran before this resumes.
        await asyncio.wait(list(chunks), return_when=asyncio.FIRST_COMPLETED)
        outcomes = self._outcomes.get(node, [])
        self._outcomes[node] = []
        if _NoReply.STOP in outcomes:
            return False
        if _NoReply.RETRY in outcomes:
            await asyncio.sleep(self._c.options.tick_interval_s)
        return True

    async def _install(self, node: int, term: int) -> bool:
        """Send ``node`` the snapshot as of the log start, one chunk per round trip (the
        follower's reply is the backpressure); True once it is installed (recovery
        goes on from the log), False to stop (the next heartbeat reply restarts it)."""
        c = self._c
        snapshot = c.start_snapshot()
        if snapshot is None:
            log.warning(
                "group %s: node %s is behind the log start %d but no snapshot is kept "
                "for it", c.group, node, c.log.start_offset,
            )  # fmt: skip
            return False
        offset, data = snapshot
        log.info(
            "group %s: node %s is behind the log start %d: sending it the snapshot as of %d "
            "(%d bytes)", c.group, node, c.log.start_offset, offset, len(data),
        )  # fmt: skip
        position = 0
        for _ in range(MAX_ROUNDS):
            if not c.running:
                return False
            chunk = data[position : position + c.options.recovery_chunk_bytes]
            ready = c.step(SnapshotChunkRead(node, term, offset, position, len(data), chunk))
            req = _sent(ready, node, InstallSnapshotRequest)
            if req is None:  # not wanted any more, or the log start moved: read it again
                return node not in ready.install_wanted or c.log.start_offset - 1 != offset
            outcome = await self._round_trip(
                node,
                term,
                req,
                InstallSnapshotReply,
                lambda sent, reply: InstallAnswered(node, sent, reply),
            )
            if outcome is _NoReply.STOP:
                return False
            if outcome is _NoReply.RETRY:
                await asyncio.sleep(c.options.tick_interval_s)
                continue
            following = outcome.install_next.get(node)
            if following is None:
                return node not in outcome.install_wanted
            position = following
        return False

    async def _round_trip(
        self,
        node: int,
        term: int,
        req: _Req,
        reply_type: type[_Reply],
        answered: Callable[[_Req, _Reply], Message],
        windowed: bool = False,
    ) -> Ready | _NoReply:
        """Send ``req`` to ``node`` and step its reply into the core (as the message
        ``answered`` makes of it): the ready that made. Without a usable reply (none, not a
        ``reply_type``, or the group unavailable there) the core counts a failure (of a
        chunk of the recovery window when ``windowed``): RETRY (the caller sends again
        after a tick), or STOP once the core gives up; STOP too if the group stopped while
        the request was out (its reply is then dropped)."""
        c = self._c
        self.requests_sent += 1
        try:
            reply = await c.transport.send(node, req)
        except TransportError:
            reply = None
        if not c.running:
            return _NoReply.STOP  # the group stopped while the request was out
        if not isinstance(reply, reply_type) or reply.result == APPEND_GROUP_UNAVAILABLE:
            seq = req.seq if windowed else None
            if node not in c.step(RecoveryLost(node, term, seq)).recovery_retry:
                return _NoReply.STOP
            return _NoReply.RETRY
        return c.step(answered(req, reply))


def _sent(ready: Ready, node: int, kind: type[_Req]) -> _Req | None:
    """The request of type ``kind`` the core put in ``ready`` for ``node`` to send."""
    for target, req in ready.recovery_send:
        if target == node and isinstance(req, kind):
            return req
    return None
