"""Raft's peer messages: frozen dataclasses, one per request and reply.

Every field is typed as ``int``, ``bool``, ``str``, ``bytes``, ``list[int]``,
``list[RecordBatch]`` or a list of another message dataclass, so that the RPC
codec can encode them by introspecting :func:`typing.get_type_hints`. There is
no ``Optional``: "none" is the sentinel ``-1``.

Offsets are record offsets (a batch occupies ``record_count`` offsets) and are
Raft's log indices. ``prev_log_offset``/``prev_log_term`` name the entry just
before the appended batches (``-1``/``0`` for the start of an empty log).

Replies are matched to requests: every append and heartbeat carries ``seq``,
a number the leader draws per follower, strictly increasing (see
``RaftCore.next_seq``), and every reply echoes it next to the follower's term.
The leader applies a reply only when its ``seq`` is above the newest one it
applied from that follower, so a reply that was reordered, duplicated or
delivered late can never overwrite newer offsets (a stale flushed offset
would count unflushed data toward the commit index). ``seq`` is last, with
default ``-1`` (unsequenced: a reply to it is never applied), so positional
construction keeps working.

Every reply reports the follower's ``last_flushed_offset`` (durable) and
``last_dirty_offset`` (written, maybe not fsynced); the leader tracks both per
follower and commits from flushed offsets only. ``last_matched_offset`` is the
last offset the follower verified to equal the leader's log in this request
(the end of the appended range), ``-1`` when nothing was verified.
"""

from __future__ import annotations

import dataclasses

from raftlog.storage.batch import RecordBatch

APPEND_SUCCESS = 0
APPEND_FAILURE = 1  # stale term or log mismatch at prev_log_offset
APPEND_GROUP_UNAVAILABLE = 2  # the target node does not host the group (or it is stopped)
GROUP_UNAVAILABLE_TERM = -1
"""The term of a reply from a node that does not host the group (or whose replica is
stopped): no term of the group's, and never a refusal of the request's merits."""


@dataclasses.dataclass(frozen=True, slots=True)
class AppendEntriesRequest:
    group: int
    source_node: int
    target_node: int
    term: int
    prev_log_offset: int
    prev_log_term: int
    leader_commit: int
    # False: the follower may append without fsync (its flushes are coalesced).
    flush: bool
    batches: list[RecordBatch]
    seq: int = -1

    @property
    def last_offset(self) -> int:
        """The last offset this request covers (``prev_log_offset`` when empty)."""
        return self.batches[-1].last_offset if self.batches else self.prev_log_offset


@dataclasses.dataclass(frozen=True, slots=True)
class AppendEntriesReply:
    group: int
    source_node: int
    target_node: int
    term: int
    result: int
    last_matched_offset: int
    last_flushed_offset: int
    last_dirty_offset: int
    seq: int = -1  # the request's, echoed
    # The follower quiesced on this heartbeat's ``quiesce`` (its state matched it).
    quiesced: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class InstallSnapshotRequest:
    """One chunk of the leader's snapshot, for a follower behind the leader's log start.

    The snapshot is the state as of ``last_included_offset`` (the leader's log
    start minus one): the group's configuration and its state machines, in the
    commit context's format (:mod:`raftlog.raft.group_snapshot`). Chunks go one
    at a time, each after the previous one's reply (backpressure), at byte
    ``chunk_offset`` of ``total_bytes``. Once the follower has it all it drops
    its whole log, starts it empty after ``last_included_offset`` and restores
    its state machines; recovery then sends the log from there.
    """

    group: int
    source_node: int
    target_node: int
    term: int
    last_included_offset: int
    last_included_term: int
    chunk_offset: int
    total_bytes: int
    data: bytes
    seq: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class InstallSnapshotReply:
    """``bytes_received``: how much of the snapshot the follower holds (the next chunk's
    ``chunk_offset``); it equals ``total_bytes`` once the snapshot is installed (or the
    follower already had the log up to ``last_included_offset``)."""

    group: int
    source_node: int
    target_node: int
    term: int
    result: int
    bytes_received: int
    last_flushed_offset: int
    last_dirty_offset: int
    seq: int = -1  # the request's, echoed
    # The follower quiesced on this heartbeat's ``quiesce`` (its state matched it).
    quiesced: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class VoteRequest:
    group: int
    source_node: int
    target_node: int
    # For a prevote: the term the candidate would campaign in (its term + 1).
    term: int
    prevote: bool
    last_log_offset: int
    last_log_term: int
    # Sent after timeout-now: voters ignore their leader lease.
    leadership_transfer: bool


@dataclasses.dataclass(frozen=True, slots=True)
class VoteReply:
    group: int
    source_node: int
    target_node: int
    term: int
    prevote: bool
    granted: bool
    # The voter's log was not more up to date than the candidate's.
    log_ok: bool


@dataclasses.dataclass(frozen=True, slots=True)
class TimeoutNowRequest:
    """Leadership transfer: the target starts an election at once."""

    group: int
    source_node: int
    target_node: int
    term: int


@dataclasses.dataclass(frozen=True, slots=True)
class TimeoutNowReply:
    group: int
    source_node: int
    target_node: int
    term: int
    accepted: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Heartbeat:
    """One group's heartbeat inside a :class:`HeartbeatBatchRequest`.

    ``prev_log_offset``/``prev_log_term`` is what the leader last verified on
    this follower (its match offset), so a follower can advance its commit
    index to ``min(leader_commit, prev_log_offset)`` without receiving data.
    """

    group: int
    term: int
    prev_log_offset: int
    prev_log_term: int
    leader_commit: int
    seq: int = -1
    # The leader asks the follower to quiesce (stop its election timer) when it holds
    # exactly the leader's log, all of it committed and flushed (RaftCore's step of a
    # ``HeartbeatFrom``).
    quiesce: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatReply:
    group: int
    term: int
    result: int
    last_matched_offset: int
    last_flushed_offset: int
    last_dirty_offset: int
    seq: int = -1  # the request's, echoed
    # The follower quiesced on this heartbeat's ``quiesce`` (its state matched it).
    quiesced: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatBatchRequest:
    """One request per peer node carrying every group this node leads there."""

    source_node: int
    target_node: int
    heartbeats: list[Heartbeat]


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatBatchReply:
    """Replies in the order of the request's heartbeats."""

    source_node: int
    target_node: int
    replies: list[HeartbeatReply]


PEER_REQUESTS = (
    AppendEntriesRequest,
    VoteRequest,
    TimeoutNowRequest,
    HeartbeatBatchRequest,
    InstallSnapshotRequest,
)
"""Every request a node receives from a peer (the RPC layer routes these)."""
ALL_MESSAGES = (
    AppendEntriesRequest,
    AppendEntriesReply,
    VoteRequest,
    VoteReply,
    TimeoutNowRequest,
    TimeoutNowReply,
    Heartbeat,
    HeartbeatReply,
    HeartbeatBatchRequest,
    HeartbeatBatchReply,
    InstallSnapshotRequest,
    InstallSnapshotReply,
)
