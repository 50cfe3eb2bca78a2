"""The messages a node gives its own Raft core (etcd's local ``Msg*`` types).

:meth:`~raftlog.raft.core.RaftCore.step` takes a peer's message (the wire types
of :mod:`raftlog.raft.messages`) or one of these: local events (a tick, a
proposal, a campaign, a flush done, a node declared dead), the outcomes of the
I/O a ``Ready`` asked for (an append persisted, a snapshot installed, a recovery
chunk read or lost), and a
peer's reply wrapped with the request it answers (the wire reply alone does not
name the request's term, predecessor or window slot). None of them crosses the
network.
"""

from __future__ import annotations

import dataclasses

from raftlog.raft.messages import (
    AppendEntriesReply,
    AppendEntriesRequest,
    Heartbeat,
    HeartbeatReply,
    InstallSnapshotReply,
    InstallSnapshotRequest,
)
from raftlog.storage.batch import RecordBatch


@dataclasses.dataclass(frozen=True, slots=True)
class Tick:
    """One tick of the node clock (election timer, quorum check, transfer timeout)."""


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatRound:
    """Leader: make this round's heartbeats (``Ready.heartbeats``): those due, or with
    ``only``, one to that follower, due or not."""

    only: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Propose:
    """Leader: place ``batches`` after the log's end; ``flush``: a ``quorum_ack`` write."""

    batches: list[RecordBatch]
    flush: bool


@dataclasses.dataclass(frozen=True, slots=True)
class Campaign:
    """Start a (pre)vote round now (``transfer``: on behalf of a leadership transfer)."""

    prevote: bool
    transfer: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class TransferLeadership:
    """Leader: hand leadership to ``target`` (writes stop until it leads or time runs out)."""

    target: int


@dataclasses.dataclass(frozen=True, slots=True)
class AbortTransfer:
    """Leader: give up the leadership transfer in progress (writes resume)."""


@dataclasses.dataclass(frozen=True, slots=True)
class ReadRequest:
    """Leader: a linearizable read was asked now and needs a quorum round (its read
    index said ``confirm``): the core numbers it (``Ready.read_round``) and makes the
    next heartbeat round reach every follower; the read may be served once
    :meth:`~raftlog.raft.core.RaftCore.read_index` of that round is ready."""


@dataclasses.dataclass(frozen=True, slots=True)
class StepDown:
    """Give up leadership (or candidacy) in the current term."""


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigurationChanged:
    """The configuration history changed (an append or a truncation observed one)."""


@dataclasses.dataclass(frozen=True, slots=True)
class LocalFlushed:
    """The local log's flushed offset advanced."""


@dataclasses.dataclass(frozen=True, slots=True)
class NodeDead:
    """Node liveness declared ``node`` dead. ``refused``: its address refused
    connections (nothing listens there: the process is gone, it leads nothing), not
    only silence, which an asymmetric partition can cause too."""

    node: int
    refused: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class NodeAlive:
    """Node liveness heard ``node`` again after declaring it dead."""

    node: int


@dataclasses.dataclass(frozen=True, slots=True)
class PromotionDone:
    """Leader: the promotion of learner ``node`` (``Ready.promote``) ended."""

    node: int


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatFrom:
    """Follower: heartbeat ``heartbeat`` from leader ``source`` (a batch's entry names
    no sender)."""

    source: int
    heartbeat: Heartbeat


@dataclasses.dataclass(frozen=True, slots=True)
class HeartbeatAnswered:
    """Leader: follower ``peer`` answered ``heartbeat`` with ``reply``."""

    peer: int
    heartbeat: Heartbeat
    reply: HeartbeatReply


@dataclasses.dataclass(frozen=True, slots=True)
class AppendPersisted:
    """Follower: the append ``Ready.persist`` asked for (for ``request``) is done, and
    flushed when it asked for a flush: the core may answer it now."""

    request: AppendEntriesRequest


@dataclasses.dataclass(frozen=True, slots=True)
class AppendAnswered:
    """Leader: a pipelined append completed; ``reply`` None: it was not delivered (or
    the group is unavailable there)."""

    peer: int
    request: AppendEntriesRequest
    reply: AppendEntriesReply | None


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryAnswered:
    """Leader: follower ``peer`` answered a recovery chunk."""

    peer: int
    request: AppendEntriesRequest
    reply: AppendEntriesReply


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryPoll:
    """Leader: ``recovery`` of follower ``peer`` (started in ``term``) asks what to do
    next: ``Ready.install_wanted`` names the follower when it needs the snapshot,
    ``Ready.recovery_read`` gives the chunk of the log to read (then
    :class:`RecoveryChunkRead`); neither: nothing to send now."""

    peer: int
    term: int


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryChunkRead:
    """Leader: ``recovery`` read ``batches`` (the chunk ``Ready.recovery_read`` named) for
    ``peer``: ``Ready.recovery_send`` then holds the append to send (none: the follower
    needs a snapshot first, or the recovery is no longer this term's)."""

    peer: int
    term: int
    batches: list[RecordBatch]


@dataclasses.dataclass(frozen=True, slots=True)
class SnapshotChunkRead:
    """Leader: ``recovery`` read bytes ``chunk_offset`` onwards (``data``) of the
    ``total``-byte snapshot as of ``snapshot_offset`` for ``peer``: ``Ready.recovery_send``
    then holds the request to send; none: the install is not wanted any more, or the
    snapshot is no longer at the log's start (``Ready.install_wanted`` names the
    follower while it still needs one: read it again)."""

    peer: int
    term: int
    snapshot_offset: int
    chunk_offset: int
    total: int
    data: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryLost:
    """Leader: a recovery request to ``peer`` (a log chunk of the recovery window when
    ``seq`` is set, else a snapshot chunk) got no usable reply; ``Ready.recovery_retry``
    names the follower when it is to be sent again after a tick (else recovery stops)."""

    peer: int
    term: int
    seq: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class InstallChunkHeld:
    """Follower: of the snapshot ``request`` belongs to, ``received`` bytes are held (the
    chunk was taken, or was out of order); the core answers with that count."""

    request: InstallSnapshotRequest
    received: int


@dataclasses.dataclass(frozen=True, slots=True)
class InstallPersisted:
    """Follower: the snapshot ``request`` completed was installed (or, under a newer
    leader, dropped): the core answers it."""

    request: InstallSnapshotRequest


@dataclasses.dataclass(frozen=True, slots=True)
class InstallAnswered:
    """Leader: follower ``peer`` answered a snapshot chunk (``Ready.install_next`` then
    says from which byte to send, when the install goes on; when it does not,
    ``Ready.install_wanted`` names the follower if it still needs the snapshot)."""

    peer: int
    request: InstallSnapshotRequest
    reply: InstallSnapshotReply


LocalMessage = (
    Tick
    | HeartbeatRound
    | Propose
    | Campaign
    | TransferLeadership
    | AbortTransfer
    | ReadRequest
    | StepDown
    | ConfigurationChanged
    | LocalFlushed
    | NodeDead
    | NodeAlive
    | PromotionDone
    | HeartbeatFrom
    | HeartbeatAnswered
    | AppendPersisted
    | AppendAnswered
    | RecoveryAnswered
    | RecoveryPoll
    | RecoveryChunkRead
    | SnapshotChunkRead
    | RecoveryLost
    | InstallChunkHeld
    | InstallPersisted
    | InstallAnswered
)
"""Every local message :meth:`~raftlog.raft.core.RaftCore.step` takes."""
