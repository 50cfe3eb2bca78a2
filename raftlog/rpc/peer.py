"""Raft peer messages on the wire: fixed type ids, the replication stream's frames.

The messages themselves are raft's (:mod:`raftlog.raft.messages`); this module
assigns their wire ids (100-199; never reuse or renumber one), the reply type of
each request, and the frame that carries them on the replication stream (one
WebSocket per pair of nodes at :data:`STREAM_PATH`, see
:mod:`raftlog.rpc.transport`)::

    request_id  uint64   chosen by the sender, unique among its requests in flight
    message     ...      one codec frame (:func:`raftlog.rpc.codec.encode`)

A reply echoes its request's id; replies may come in any order.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any

from raftlog.raft import messages as m
from raftlog.rpc import codec
from raftlog.rpc.codec import I32_MAX, CodecError
from raftlog.rpc.messages import (
    CompleteMoveRequest,
    ErrorCode,
    MovePartitionResponse,
    PartitionStatusRequest,
    PartitionStatusResponse,
)


@dataclasses.dataclass(frozen=True, slots=True)
class ShardStateRequest:
    """Shard 0 of a node to its other shards (:mod:`raftlog.node.shards`): the
    controller state as of ``version`` (its snapshot), which they mirror."""

    version: int
    snapshot: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class ShardStateReply:
    """The version the shard now mirrors (never lower than one it had)."""

    version: int


@dataclasses.dataclass(frozen=True, slots=True)
class WriteTxnMarkerRequest:
    """The transaction coordinator's leader to a participant partition's leader: write
    the commit or abort marker of ``producer_id``'s open transaction (Kafka's
    WriteTxnMarkers, one partition). ``record_count`` and ``last_sequence`` are what
    the committed attempt saw acknowledged (-1: unchecked, an abort)."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    commit: bool
    record_count: int = dataclasses.field(default=-1, metadata={"range": (-1, I32_MAX)})
    last_sequence: int = dataclasses.field(default=-1, metadata={"range": (-1, I32_MAX)})


@dataclasses.dataclass(frozen=True, slots=True)
class WriteTxnMarkerReply:
    """The marker's offset, or why it was not written: ``error`` is the code a client's
    ``end_txn`` would get (NOT_LEADER with ``leader_id`` when known, FENCED, ...)."""

    offset: int
    error: ErrorCode = ErrorCode.NONE
    leader_id: int = -1
    message: str = ""


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
    m.InstallSnapshotRequest: 110,
    m.InstallSnapshotReply: 111,
    ShardStateRequest: 112,
    ShardStateReply: 113,
    WriteTxnMarkerRequest: 114,
    WriteTxnMarkerReply: 115,
}
for _cls, _id in _IDS.items():
    codec.register(_id, _cls)

STREAM_PATH = "/raft/stream"
"""The replication stream's WebSocket route (under ``/raft/``: the peer token only)."""

_REQUEST_ID = struct.Struct("<Q")
REQUEST_ID_SIZE = _REQUEST_ID.size
MAX_REQUEST_ID = (1 << 64) - 1

REPLY_TYPES: dict[type, type] = {
    m.AppendEntriesRequest: m.AppendEntriesReply,
    m.VoteRequest: m.VoteReply,
    m.TimeoutNowRequest: m.TimeoutNowReply,
    m.HeartbeatBatchRequest: m.HeartbeatBatchReply,
    m.InstallSnapshotRequest: m.InstallSnapshotReply,
    ShardStateRequest: ShardStateReply,
    WriteTxnMarkerRequest: WriteTxnMarkerReply,
    # client calls that nodes make on each other, on the stream they already share
    PartitionStatusRequest: PartitionStatusResponse,
    CompleteMoveRequest: MovePartitionResponse,
}


def stream_frame(request_id: int, message: Any) -> bytes:
    """One stream frame: ``request_id`` then ``message`` codec-encoded.

    Raises CodecError when ``message`` is not a registered type (or cannot be
    encoded); ``struct.error`` never escapes: an id outside uint64 is a CodecError.
    """
    return codec.encode(message, prefix=_request_id(request_id))


def stream_frame_parts(request_id: int, message: Any) -> list[bytes | memoryview]:
    """:func:`stream_frame`'s bytes as buffers for a gather write
    (:func:`raftlog.rpc.codec.encode_parts`); the same errors."""
    return codec.encode_parts(message, prefix=_request_id(request_id))


def encoded_frame(request_id: int, encoded: bytes | memoryview) -> bytes:
    """A stream frame around a message that is already codec-encoded (a client call
    or its answer, which a POST would carry as its body)."""
    return _request_id(request_id) + encoded


def encoded_frame_parts(request_id: int, *encoded: bytes | memoryview) -> list[bytes | memoryview]:
    """:func:`encoded_frame` as buffers for a gather write: the message ``encoded`` is
    already codec-encoded, in one buffer or several in order (:func:`raftlog.rpc.codec.
    encode_parts`); none is copied (the frame writer joins a small frame once, with its
    header)."""
    return [_request_id(request_id), *encoded]


def _request_id(request_id: int) -> bytes:
    if not 0 <= request_id <= MAX_REQUEST_ID:
        raise CodecError(f"stream request id {request_id} is out of range 0..{MAX_REQUEST_ID}")
    return _REQUEST_ID.pack(request_id)


def split_frame(frame: bytes | memoryview) -> tuple[int, memoryview]:
    """(request id, the codec frame after it) of a stream frame; the message is not
    decoded here, so a bad one can still be answered under its id. A frame too short
    to hold an id raises CodecError: nothing can be matched to it."""
    if len(frame) < REQUEST_ID_SIZE:
        raise CodecError(
            f"stream frame truncated: {len(frame)} bytes, expected a {REQUEST_ID_SIZE}-byte "
            "request id and a message"
        )
    (request_id,) = _REQUEST_ID.unpack_from(frame, 0)
    return request_id, memoryview(frame)[REQUEST_ID_SIZE:]
