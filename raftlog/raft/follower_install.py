"""The follower's side of a snapshot install: assemble the chunks, install, reply.

The core decides whether a chunk is wanted (the stage steps it in: a reply in
the ready refuses it, or says the log already holds the snapshot's offset;
otherwise the chunk is in ``Ready.install``); this stage
assembles the chunks of one snapshot in order (a chunk out of order is answered
with how much is held, and the leader resends from there), and, once whole,
installs it under the flusher's truncation lock (the log's files are deleted,
never under an fsync): the commit context is saved first, then the log
restarts empty after the snapshot's offset, the configuration history and
the state machines are restored from it
(``Consensus.install_local``). The core then counts it as committed and
answers (``InstallPersisted``); a chunk held so far is answered through
``InstallChunkHeld``.
"""

from __future__ import annotations

import logging
from typing import Protocol

from raftlog.raft import group_snapshot
from raftlog.raft.core import reply_in
from raftlog.raft.errors import RaftError
from raftlog.raft.local_messages import InstallChunkHeld, InstallPersisted
from raftlog.raft.messages import InstallSnapshotReply, InstallSnapshotRequest
from raftlog.raft.stage_context import GroupContext

log = logging.getLogger(__name__)


class Installer(GroupContext, Protocol):
    def install_local(
        self, offset: int, term: int, data: bytes, config: group_snapshot.SavedConfig
    ) -> None: ...


class FollowerInstall:
    def __init__(self, consensus: Installer) -> None:
        self._c = consensus
        # (leader, term, offset, offset's term, total bytes) of the snapshot being assembled
        self._key: tuple[int, int, int, int, int] | None = None
        self._buf = bytearray()

    async def handle(self, req: InstallSnapshotRequest) -> InstallSnapshotReply:
        """Take one chunk; the reply says how many bytes are held (all: installed)."""
        c = self._c
        ready = c.step(req)
        if ready.replies:  # refused, or not needed (the log holds its offset)
            return _install_reply(reply_in(ready))
        key = (
            req.source_node,
            req.term,
            req.last_included_offset,
            req.last_included_term,
            req.total_bytes,
        )
        if key != self._key or req.chunk_offset == 0:
            self._key, self._buf = key, bytearray()
        if req.chunk_offset != len(self._buf) or len(self._buf) + len(req.data) > req.total_bytes:
            return self._held(req, len(self._buf))
        self._buf += req.data
        if len(self._buf) < req.total_bytes:
            return self._held(req, len(self._buf))
        data = bytes(self._buf)
        self._key, self._buf = None, bytearray()
        config = group_snapshot.saved_config(data)
        if config is None:
            log.error(
                "group %s node %s: the snapshot at offset %d from node %d has no valid "
                "configuration; not installed",
                c.group, c.node_id, req.last_included_offset, req.source_node,
            )  # fmt: skip
            return self._held(req, 0)
        async with c.flusher.truncation_lock:
            if not c.running:
                raise RaftError(f"group {c.group} on node {c.node_id} stopped")
            if req.term == c.core.term and req.source_node == c.core.leader_id:
                c.install_local(req.last_included_offset, req.last_included_term, data, config)
                log.info(
                    "group %s node %s: installed the snapshot at offset %d (%d bytes) from "
                    "node %d; the log restarts at %d",
                    c.group, c.node_id, req.last_included_offset, len(data), req.source_node,
                    req.last_included_offset + 1,
                )  # fmt: skip
        return _install_reply(reply_in(c.step(InstallPersisted(req))))

    def _held(self, req: InstallSnapshotRequest, received: int) -> InstallSnapshotReply:
        return _install_reply(reply_in(self._c.step(InstallChunkHeld(req, received))))


def _install_reply(reply: object) -> InstallSnapshotReply:
    if not isinstance(reply, InstallSnapshotReply):
        raise TypeError(f"a snapshot chunk answered with {reply!r}")
    return reply
