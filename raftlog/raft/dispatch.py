"""Route a node's incoming peer requests to its groups.

One :class:`PeerDispatcher` per node: heartbeat batches go to the node's
:class:`~raftlog.raft.heartbeat_manager.HeartbeatManager`; every other request
carries a group id and goes to that group's ``Consensus.handle``. A request
for a group this node does not host gets a "group unavailable" reply (append
entries) or a refusal, never an exception, so a peer just retries later.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from raftlog.raft.messages import (
    APPEND_GROUP_UNAVAILABLE,
    GROUP_UNAVAILABLE_TERM,
    AppendEntriesReply,
    AppendEntriesRequest,
    HeartbeatBatchRequest,
    InstallSnapshotReply,
    InstallSnapshotRequest,
    TimeoutNowReply,
    TimeoutNowRequest,
    VoteReply,
    VoteRequest,
)

if TYPE_CHECKING:
    from raftlog.raft.heartbeat_manager import HeartbeatManager


class PeerDispatcher:
    def __init__(self, node_id: int, heartbeats: HeartbeatManager) -> None:
        self.node_id = node_id
        self.heartbeats = heartbeats

    async def handle(self, message: object) -> object:
        """The reply to one peer request; TypeError for anything else."""
        if isinstance(message, HeartbeatBatchRequest):
            return await self.heartbeats.handle_heartbeats(message)
        if not isinstance(
            message,
            (AppendEntriesRequest, VoteRequest, TimeoutNowRequest, InstallSnapshotRequest),
        ):
            raise TypeError(f"not a raft peer request: {type(message).__name__}")
        self.heartbeats.heard(message.source_node)  # any request of a peer: it is alive
        group = self.heartbeats.group(message.group)
        if group is not None and group.running:
            return await group.handle(message)
        if isinstance(message, AppendEntriesRequest):
            return AppendEntriesReply(
                message.group, self.node_id, message.source_node, -1,
                APPEND_GROUP_UNAVAILABLE, -1, -1, -1, message.seq,
            )  # fmt: skip
        if isinstance(message, InstallSnapshotRequest):
            return InstallSnapshotReply(
                message.group, self.node_id, message.source_node, -1,
                APPEND_GROUP_UNAVAILABLE, 0, -1, -1, message.seq,
            )  # fmt: skip
        if isinstance(message, VoteRequest):
            return VoteReply(
                message.group, self.node_id, message.source_node, GROUP_UNAVAILABLE_TERM,
                message.prevote, False, False,
            )  # fmt: skip
        return TimeoutNowReply(message.group, self.node_id, message.source_node, -1, False)
