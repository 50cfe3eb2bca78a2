"""``recovery``: catch up a follower that is behind, one request at a time.

A follower is recovered while the core has it in ``PROBE`` (see
:mod:`raftlog.raft.progress`): the pipeline in ``replicate_entries`` leaves it
alone, and this stage asks the core for the next chunk
(:meth:`RaftCore.recovery_chunk`: from where, how many bytes), reads it from
the leader log, has the core build the append (:meth:`RaftCore.recovery_request`,
which asks the follower to flush) and sends it; the reply goes back to the
core, which moves ``next_offset`` (back on a mismatch). When the core finds the
follower caught up it puts it back in ``REPLICATE`` and answers "stop". The
stage also stops when leadership or the term changes, and gives up after a few
requests in a row without a usable reply, as the core decides
(``recovery_failed``; the next heartbeat reply restarts it).

A follower behind the leader's log start (``SNAPSHOT``: retention deleted
what it lacks) is first sent the snapshot as of the log start (Redpanda's
recovery installs it the same way), in chunks of ``recovery_chunk_bytes``, one
round trip each; once installed, the follower probes from the log start and
this stage goes on sending the log.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable
from typing import TypeVar

from raftlog.raft.errors import TransportError
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
_T = TypeVar("_T")


class _NoReply(enum.Enum):
    """What :meth:`Recovery._round_trip` returns when the follower gave no usable reply."""

    STOP = enum.auto()  # stop recovering (the next heartbeat reply restarts it)
    RETRY = enum.auto()  # the core counted the failure: send again


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
        for _ in range(MAX_ROUNDS):
            if not c.running:
                return
            if c.core.snapshot_wanted(node, term):
                if not await self._install(node, term):
                    return
                continue
            chunk = c.core.recovery_chunk(node, term)
            if chunk is None:
                return
            batches = c.log.read(chunk.start, chunk.max_bytes)
            req = c.core.recovery_request(node, term, batches)
            if req is None:
                return
            outcome = await self._round_trip(
                node,
                term,
                req,
                AppendEntriesReply,
                lambda sent, reply: c.core.handle_append_reply(
                    node, term, sent.prev_log_offset, reply
                ),
            )
            if outcome is _NoReply.STOP:
                return

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
            req = c.core.install_request(node, term, offset, position, len(data), chunk)
            if req is None:  # not wanted any more, or the log start moved: read it again
                return not c.core.snapshot_wanted(node, term) or c.log.start_offset - 1 != offset
            following = await self._round_trip(
                node,
                term,
                req,
                InstallSnapshotReply,
                lambda sent, reply: c.core.handle_install_reply(node, sent, reply),
            )
            if following is _NoReply.STOP:
                return False
            if following is _NoReply.RETRY:
                continue
            if following is None:
                return not c.core.snapshot_wanted(node, term)
            position = following
        return False

    async def _round_trip(
        self,
        node: int,
        term: int,
        req: _Req,
        reply_type: type[_Reply],
        handle: Callable[[_Req, _Reply], _T],
    ) -> _T | _NoReply:
        """Send ``req`` to ``node`` and give its reply to the core: what ``handle`` returns
        (the core's ready state is processed after it). Without a usable reply (none, not a
        ``reply_type``, or the group unavailable there) the core counts a failure: RETRY
        after one tick, or STOP once the core gives up; STOP too if the group stopped while
        the request was out (its reply is then dropped)."""
        c = self._c
        self.requests_sent += 1
        try:
            reply = await c.transport.send(node, req)
        except TransportError:
            reply = None
        if not isinstance(reply, reply_type) or reply.result == APPEND_GROUP_UNAVAILABLE:
            if not c.core.recovery_failed(node, term):
                return _NoReply.STOP
            await asyncio.sleep(c.options.tick_interval_s)
            return _NoReply.RETRY
        if not c.running:
            return _NoReply.STOP
        result = handle(req, reply)
        c.process_ready()
        return result
