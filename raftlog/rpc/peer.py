"""Raft peer messages on the wire: fixed type ids and the ``/raft/...`` routes.

The messages themselves are raft's (:mod:`raftlog.raft.messages`); this module
only assigns their wire ids (100-199; never reuse or renumber one) and the
route each request is POSTed to.
"""

from __future__ import annotations

from raftlog.raft import messages as m
from raftlog.rpc import codec

_IDS: dict[type, int] = {
    m.AppendEntriesRequest: 100,
    m.AppendEntriesReply: 101,
    m.VoteRequest: 102,
    m.VoteReply: 103,
    m.TimeoutNowRequest: 104,
    m.TimeoutNowReply: 105,
    m.Heartbeat: 106,
    m.HeartbeatReply: 107,
    m.HeartbeatBatchRequest: 108,
    m.HeartbeatBatchReply: 109,
}
for _cls, _id in _IDS.items():
    codec.register(_id, _cls)

PEER_ROUTES: dict[type, str] = {
    m.AppendEntriesRequest: "append_entries",
    m.VoteRequest: "vote",
    m.TimeoutNowRequest: "timeout_now",
    m.HeartbeatBatchRequest: "heartbeat",
}
"""Peer request type -> route name under ``/raft/``."""

REPLY_TYPES: dict[type, type] = {
    m.AppendEntriesRequest: m.AppendEntriesReply,
    m.VoteRequest: m.VoteReply,
    m.TimeoutNowRequest: m.TimeoutNowReply,
    m.HeartbeatBatchRequest: m.HeartbeatBatchReply,
}
