"""The pure Raft core of one group: no IO, no clock, no asyncio.

The core owns terms, votes, roles, the election timer (in ticks), follower
progress, the commit index and leadership transfer. It reads the log only
through the in-memory index every :class:`~raftlog.storage.api.LogStorage`
keeps (``dirty_offset``, ``flushed_offset``, ``last_term``, ``term_at``);
every mutation of the log is done by the async layer on the core's advice.

Driving it (etcd's ``RawNode``): every message goes in through one door,
:meth:`RaftCore.step` (a peer's message, or a local one of
:mod:`raftlog.raft.local_messages`: a tick, a proposal, a flush done, the
outcome of I/O a ready asked for); everything decided comes out in
:meth:`RaftCore.take_ready`'s :class:`Ready`, replies to peers included, and
the caller carries it out in the order it states: persist the log and
``ready.vote`` before anything is sent, and :meth:`RaftCore.advance` once the
leader's placed batches are in the local log (until then they are the core's
unstable tail, so proposals may follow each other before a ready is taken).
Replies leave only in a ``Ready``; a reply that must wait for I/O (an append's,
after its flush) is made only when the core is told that I/O is done
(``AppendPersisted``). Code outside the core
reads its progress through :meth:`RaftCore.status`, an immutable snapshot.

Invariants:

- at most one vote per term (``voted_for`` is persisted before a grant leaves);
- ``commit_index`` never decreases and only advances, on the leader, to an
  offset whose entry is of the current term (§5.4.2) and is *flushed* on a
  majority of voters (the leader counts its own flushed offset);
- on a follower, ``commit_index <= min(leader_commit, matched_upto)``: only
  entries verified equal to the current leader's are ever marked committed;
- a follower never truncates at or below its commit index;
- a replica "behind its promise" (its disk lost entries it had acknowledged as
  flushed: ``promised_offset > log.flushed_offset``) neither grants votes nor
  campaigns, and reports ``last_flushed_offset = -1`` so that no leader counts
  it toward a commit quorum, until its log is flushed up to the promise again;
- replies are matched to requests: the leader applies a reply from a follower
  only when its ``seq`` (drawn by :meth:`next_seq` for the request) is above
  the newest one applied from that follower in this term; an older,
  duplicated or late reply is ignored, so a follower's offsets never move back
  to what an older reply reported. A follower answers ``max(request seq, 1 +
  the highest seq it already answered to this leader in this term)``: requests
  can overtake each other on the network, and a reply must never carry a seq
  as high as that of a reply that describes a newer state of the follower (the
  newer reply would be dropped, or overwritten by the older state). Reply seqs
  are so strictly increasing in the order the follower produced them, and a
  successful append's reply names everything verified against this leader in
  this term (``matched_upto``), so the reply made last carries all of it.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import random
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Protocol

from raftlog.raft import mutations
from raftlog.raft.configuration import ConfigurationHistory
from raftlog.raft.election import ElectionTimer, PriorityTarget
from raftlog.raft.local_messages import (
    AbortTransfer,
    AppendAnswered,
    AppendPersisted,
    Campaign,
    ConfigurationChanged,
    HeartbeatAnswered,
    HeartbeatFrom,
    HeartbeatRound,
    InstallAnswered,
    InstallChunkHeld,
    InstallPersisted,
    LocalFlushed,
    LocalMessage,
    NodeAlive,
    NodeDead,
    PromotionDone,
    Propose,
    ReadRequest,
    RecoveryAnswered,
    RecoveryChunkRead,
    RecoveryLost,
    RecoveryPoll,
    SnapshotChunkRead,
    StepDown,
    Tick,
    TransferLeadership,
)
from raftlog.raft.messages import (
    APPEND_FAILURE,
    APPEND_GROUP_UNAVAILABLE,
    APPEND_SUCCESS,
    GROUP_UNAVAILABLE_TERM,
    AppendEntriesReply,
    AppendEntriesRequest,
    Heartbeat,
    HeartbeatReply,
    InstallSnapshotReply,
    InstallSnapshotRequest,
    TimeoutNowReply,
    TimeoutNowRequest,
    VoteReply,
    VoteRequest,
)
from raftlog.raft.progress import FollowerProgress, Inflights, ProgressState
from raftlog.raft.read_index import ReadIndex
from raftlog.storage.api import VoteState
from raftlog.storage.batch import BatchKind, RecordBatch

RECOVERY_MAX_FAILURES = 3
"""Recovery requests in a row without a usable reply before recovery stops (the next
heartbeat reply from the follower starts it again)."""
TIMEOUT_NOW_RESEND_TICKS = 3
"""Ticks after a timeout-now before it is sent again (it or its reply may be lost)."""
VERDICT_CAMPAIGN_TICKS = 3
VERDICT_GIVE_WAY_TIMEOUTS = 2
"""Minimum election timeouts (plus a randomized one) that the live voters not named by
a verdict give the named one before they campaign too (see ``_order_campaign``)."""
"""After its leader's node is declared dead, the live voter that campaigns first does so
this many ticks later (see ``RaftCore._order_campaign``)."""
ELECTION_COUNTERS = (
    "prevotes_started",
    "votes_started",
    "campaigns_deferred",
    "votes_refused_lease",
    "votes_refused_log",
    "leaderships_won",
)
"""RaftCore.elections' counters (each one's meaning: the raftlog_raft_* metrics'
help, raftlog.metrics)."""
MAX_UNSENT_BATCHES = 1024
"""The most batches the leader keeps for its paused followers (see ``RaftCore._unsent``;
its bytes are bounded by ``max_in_flight_bytes``): small writes make many small
batches, and each send walks them."""


class LogView(Protocol):
    """The read-only, in-memory part of a log the core may consult."""

    @property
    def dirty_offset(self) -> int: ...

    @property
    def flushed_offset(self) -> int: ...

    @property
    def last_term(self) -> int: ...

    @property
    def start_offset(self) -> int: ...

    def term_at(self, offset: int) -> int | None: ...


class Role(enum.Enum):
    FOLLOWER = "follower"
    CANDIDATE = "candidate"
    LEADER = "leader"
    LEARNER = "learner"  # not a voter in the latest configuration: never campaigns


class SafetyViolation(AssertionError):
    """The core was asked to do something Raft forbids (a bug or lost durable data)."""


@dataclasses.dataclass(slots=True)
class CoreOptions:
    election_timeout_ticks: int = 10
    # A leader steps down when it has not heard from a majority within this many ticks.
    check_quorum: bool = True
    # A transfer that has not completed within this many ticks is abandoned.
    transfer_timeout_ticks: int = 20
    # A follower's in-flight window: at most this many pipelined appends outstanding ...
    max_in_flight_appends: int = 4
    # ... and no new one once this many bytes are outstanding (soft: one larger append
    # goes when the window is empty). It holds a few of the connector's 4 MiB chunks: at
    # 2 MiB each of them filled it, and every follower got one append per round trip
    # (4 MiB batches, 4 in flight, 1 partition: 180-220 MB/s; 32 MiB: 245-295 MB/s).
    max_in_flight_bytes: int = 32 * 1024 * 1024
    # The most bytes one recovery request carries (at least one batch).
    recovery_chunk_bytes: int = 512 * 1024
    # Recovery's window: once a follower's match point is known, at most this many chunks
    # in flight to it at once (1: one round trip per chunk, as before pipelining).
    recovery_max_inflight: int = 4
    # A follower with nothing to learn (see RaftCore.heartbeats_due) gets a heartbeat once
    # in this many ticks, not every round: an idle group's cost is its heartbeats. It must
    # be below election_timeout_ticks (ConsensusOptions.validate refuses more): at that
    # interval an idle follower times out between two heartbeats and calls an election.
    # The default leaves three per election timeout of 10, so that a lost heartbeat, or
    # a late reply to the leader's quorum check, costs nothing. The simulator runs 3
    # against its timeout of 5: less margin, on purpose.
    idle_heartbeat_ticks: int = 3
    # Quiesce a group that has nothing to do (see RaftCore.quiescent): no ticks and no
    # per-group heartbeats until something wakes it; node liveness stands in for them.
    quiesce: bool = True
    # A brand-new group (term 0, empty log) on its highest-priority voter campaigns after
    # this many ticks instead of a randomized election timeout (0: it waits like any
    # follower). A topic's partitions otherwise had no leader for 0.7-1.1 s after
    # creation, most of a small df.write into a new topic (2026-12-01). Safe: a vote
    # may be asked at any time; a replica that has not created the group yet answers
    # "unavailable" and is asked again at the next tick (see _handle_vote_reply), and
    # only the preferred voter hurries, so it does not race the others.
    first_election_ticks: int = 0
    # This group's voter named to campaign when its leader's node is declared dead does
    # so at the next tick, not VERDICT_CAMPAIGN_TICKS plus a spread: the controller
    # group, whose read barrier every metadata answer of its leader waits on, elects
    # ahead of the thousand partitions told at the same verdict (at 3,000 partitions
    # the new controller leader's metadata answers waited 5 s on its election).
    campaign_first: bool = False
    # The leader tells its followers a new commit index at once, in a heartbeat of the
    # same ready (``Ready.heartbeats_now``), and a follower not yet told it is due a
    # heartbeat every round, even one that an append went to lately (see
    # _heartbeats_due): the controller group, whose every commit is a metadata change
    # each node must apply (a new topic's replicas create its groups then; told up to
    # idle_heartbeat_ticks later, the other nodes knew a new topic 50-115 ms after its
    # creation was acknowledged; at the next round, 17-54 ms).
    commit_at_once: bool = False


@dataclasses.dataclass(slots=True)
class AppendPlan:
    """Follower: how to persist the accepted append ``request``: truncate at
    ``truncate_at`` (-1: no), then append ``batches``; ``flush``: flush before the
    core is told it is done (:class:`~raftlog.raft.local_messages.AppendPersisted`),
    otherwise the bytes are in ``Ready.flush_bytes`` for the coalesced flush."""

    request: AppendEntriesRequest
    truncate_at: int
    batches: list[RecordBatch]
    flush: bool


@dataclasses.dataclass(slots=True)
class RecoveryChunk:
    """What ``recovery`` reads next for a probing follower: from ``start``, up to
    ``max_bytes`` (at least one batch)."""

    start: int
    max_bytes: int


@dataclasses.dataclass(slots=True)
class Ready:
    """What the async layer must do after a core call, in this order.

    ``append`` (leader: batches placed by a :class:`Propose`) goes to the local
    log first, without a flush, after which the driver calls
    :meth:`RaftCore.advance` with the ready (the core's unstable tail drops
    them), and so does ``persist`` (follower: the
    truncations and appends of accepted append entries, in order); then
    ``vote`` is persisted; then the flush is asked for (``flush_now``: at once,
    a ``quorum_ack`` write waits on it; otherwise ``flush_bytes`` are noted for
    the coalesced flush), in parallel with ``appends`` (pipelined append
    entries, one per follower the core chose to stream to), ``messages``
    (requests to peers: vote, timeout-now) and ``replies`` (the answers to
    peers' requests, by destination: an RPC layer returns each as the response
    of the request it answers). A ``persist`` entry that asks for a flush is
    answered only once the flush is done and the core was told so
    (:class:`AppendPersisted`): its reply is in a later ready. ``install``
    lists snapshot chunks to take (follower), ``install_next`` the byte each
    follower's install goes on from (leader), ``heartbeats`` a heartbeat
    round's messages, ``heartbeats_now`` heartbeats to send at once, outside the
    rounds (a ``commit_at_once`` leader's new commit index); ``recover`` names the
    followers that ``recovery`` must catch up (probing), ``promote`` the learners to
    promote;
    ``commit_advanced`` says the commit index moved.

    What a running ``recovery`` does next is here too, for the stage that
    stepped the recovery message: ``recovery_read`` the log chunk to read per
    follower (after :class:`RecoveryPoll`), ``install_wanted`` the followers
    that need the snapshot as of the log start, ``recovery_send`` the requests
    to send (after :class:`RecoveryChunkRead` or :class:`SnapshotChunkRead`;
    their outcomes come back as :class:`RecoveryAnswered`,
    :class:`InstallAnswered` or :class:`RecoveryLost`), ``recovery_retry`` the
    followers whose lost request is to be sent again after a tick. Like
    ``replies`` and ``install_next`` they are the stepping stage's, not sent by
    the driver; so is ``read_round``, the number a :class:`ReadRequest` was given
    (-1: none, or this node does not lead).

    Replies leave only here: :meth:`RaftCore.step` returns nothing.
    """

    vote: VoteState | None = None
    append: list[RecordBatch] = dataclasses.field(default_factory=list)
    flush_now: bool = False
    flush_bytes: int = 0
    appends: list[tuple[int, AppendEntriesRequest]] = dataclasses.field(default_factory=list)
    messages: list[tuple[int, object]] = dataclasses.field(default_factory=list)
    replies: list[tuple[int, object]] = dataclasses.field(default_factory=list)
    persist: list[AppendPlan] = dataclasses.field(default_factory=list)
    install: list[InstallSnapshotRequest] = dataclasses.field(default_factory=list)
    install_next: dict[int, int] = dataclasses.field(default_factory=dict)
    heartbeats: list[tuple[int, Heartbeat]] = dataclasses.field(default_factory=list)
    heartbeats_now: list[tuple[int, Heartbeat]] = dataclasses.field(default_factory=list)
    commit_advanced: bool = False
    became_leader: bool = False
    stepped_down: bool = False
    promote: list[int] = dataclasses.field(default_factory=list)
    recover: list[int] = dataclasses.field(default_factory=list)
    recovery_read: dict[int, RecoveryChunk] = dataclasses.field(default_factory=dict)
    install_wanted: list[int] = dataclasses.field(default_factory=list)
    recovery_send: list[tuple[int, AppendEntriesRequest | InstallSnapshotRequest]] = (
        dataclasses.field(default_factory=list)
    )
    recovery_retry: list[int] = dataclasses.field(default_factory=list)
    read_round: int = -1

    def __bool__(self) -> bool:
        return bool(
            self.vote
            or self.append
            or self.persist
            or self.flush_now
            or self.flush_bytes
            or self.appends
            or self.messages
            or self.heartbeats_now
            or self.commit_advanced
            or self.became_leader
            or self.stepped_down
            or self.promote
            or self.recover
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PeerStatus:
    """The leader's view of one other member, as of a :meth:`RaftCore.status` call.

    ``in_flight`` counts the pipelined appends unanswered (``in_flight_bytes`` their
    bytes, ``newest_in_flight_bytes`` the newest one's), ``recovery_in_flight`` the
    recovery chunks unanswered; ``recovery_confirmed``: a success in this probe
    confirmed where the follower's log matches. ``epoch`` names the progress entry:
    a new one whenever the leader starts the member's progress afresh (it was
    elected, or the member rejoined the configuration), so that a view that went
    back is told from a new one. ``recovery_sent`` lists the unanswered recovery
    chunks as (sequence, last offset) pairs, oldest first; ``last_reply_seq`` is the
    sequence of the newest reply taken."""

    state: ProgressState
    match_offset: int
    next_offset: int
    dirty_offset: int
    flushed_offset: int
    durable_offset: int
    last_heard_tick: int
    in_flight: int
    in_flight_bytes: int = 0
    newest_in_flight_bytes: int = 0
    recovery_in_flight: int = 0
    recovery_confirmed: bool = False
    epoch: int = 0
    recovery_sent: tuple[tuple[int, int], ...] = ()
    last_reply_seq: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class Status:
    """An immutable snapshot of a core (etcd's ``Status``): what code outside the core
    may read of its progress. ``peers`` is empty except on a leader."""

    term: int
    role: Role
    leader_id: int
    commit_index: int
    ticks: int
    transfer_target: int
    peers: Mapping[int, PeerStatus]


def _peer_status(p: FollowerProgress) -> PeerStatus:
    return PeerStatus(
        p.state,
        p.match_offset,
        p.next_offset,
        p.dirty_offset,
        p.flushed_offset,
        p.durable_offset,
        p.last_heard_tick,
        p.in_flight,
        p.inflights.bytes,
        p.inflights.newest_bytes,
        len(p.recovery_window),
        p.recovery_confirmed,
        p.epoch,
        tuple(p.recovery_window.sent()),
        p.last_reply_seq,
    )


def reply_in(ready: Ready) -> object:
    """The one reply ``ready`` holds: the answer to the one peer request stepped before
    it was taken (an RPC layer returns it as that request's response)."""
    if len(ready.replies) != 1:
        raise SafetyViolation(f"one reply expected in the ready, found {ready.replies!r}")
    return ready.replies[0][1]


PeerMessage = (
    VoteRequest
    | VoteReply
    | AppendEntriesRequest
    | TimeoutNowRequest
    | TimeoutNowReply
    | InstallSnapshotRequest
)
"""The peer messages :meth:`RaftCore.step` takes as they come off the wire (replies that
need their request's context come wrapped in a local message)."""

Message = PeerMessage | LocalMessage


class RaftCore:
    """One group's Raft state machine (see the module docstring for the contract)."""

    def __init__(
        self,
        group: int,
        node_id: int,
        configs: ConfigurationHistory,
        log: LogView,
        vote: VoteState,
        commit_index: int,
        options: CoreOptions,
        rng: random.Random,
        promised_offset: int = -1,
    ) -> None:
        """``promised_offset``: an offset this replica once acknowledged as flushed
        (from its commit context) that its log no longer reaches (-1: none); see
        :attr:`behind_promise`."""
        self.group = group
        self.node_id = node_id
        self.configs = configs
        self.log = log
        self.options = options
        self.term = vote.term
        self.voted_for = vote.voted_for
        self.commit_index = commit_index
        # Cleared (in memory) once the log is flushed up to it again; the async layer
        # keeps it durable until then (see Consensus.save_commit_context).
        self.promised_offset = promised_offset
        self.leader_id = -1
        self.role = Role.FOLLOWER
        self.timer = ElectionTimer(options.election_timeout_ticks, rng)
        if options.first_election_ticks > 0 and self._first_of_new_group(vote):
            self.timer.expire_after(options.first_election_ticks)
        self.priority_target = PriorityTarget()
        # Named by a verdict to campaign (see _order_campaign): its next election
        # timeout campaigns whatever its priority.
        self._named_by_verdict = False
        self._named_skips_prevote = False  # and without a prevote (its leader's port refused)
        # This (pre)vote round's candidate waited a timeout more for its first reply.
        self._waited_for_replies = False
        # This round's vote request per peer, and the peers that answered that they do
        # not host the group (yet): asked again at the next tick (see _handle_vote_reply).
        self._round_requests: dict[int, VoteRequest] = {}
        self._vote_retry: set[int] = set()
        self.progress: dict[int, FollowerProgress] = {}
        self.ticks = 0
        # What this replica's elections did, by ELECTION_COUNTERS name: the node sums
        # them over its groups (the raftlog_raft_* metrics), so a failover that stalls
        # says whether nobody campaigned, or candidates were refused, and why.
        self.elections: dict[str, int] = dict.fromkeys(ELECTION_COUNTERS, 0)
        # Follower: the last offset verified equal to the current leader's log.
        self.matched_upto = -1
        # Follower: (leader, term, highest seq answered) (see the module docstring).
        self._answered: tuple[int, int, int] = (-1, -1, -1)
        self.transfer_target = -1
        self._transfer_elapsed = 0
        self._timeout_now_sent_tick = -1  # the tick timeout-now last went to the target
        self._quorum_check_elapsed = 0
        # Leader: (term, commit index when an entry of that term first committed): the
        # term's read index (see read_index).
        self._read_index: tuple[int, int] = (-1, -1)
        # Leader: the last term in which it sent timeout-now: its lease no longer holds
        # in that term, and each read waits for a quorum round (see read_index).
        self._lease_lost_term = -1
        # Read rounds (etcd's ReadOnlySafe): the rounds asked so far (ReadRequest numbers
        # them, never reset), those not confirmed yet, oldest first, each with the last
        # seq drawn per follower when it was asked, and the newest confirmed: a quorum
        # of voters answered a request drawn after it was asked. Seqs rise per follower,
        # so rounds are confirmed in order.
        self._read_rounds = 0
        self._read_fences: collections.deque[tuple[int, dict[int, int]]] = collections.deque()
        self._read_confirmed = 0
        # Leader: per follower, the highest seq of its requests answered in this term.
        self._answered_seq: dict[int, int] = {}
        # The followers the last quorum_ack append asked to flush at once, and the last
        # offset that append placed.
        self._flushers: set[int] = set()
        self._quorum_upto = -1
        # Leader: the batches placed in this term that a follower in REPLICATE, paused by
        # a full in-flight window, has not been sent yet: contiguous, oldest first, up to
        # the last placed offset (see _stream). Empty when no follower is paused.
        self._unsent: collections.deque[RecordBatch] = collections.deque()
        self._unsent_bytes = 0
        # Leader: the unstable tail (etcd's ``raftLog.unstable``): batches placed by a
        # Propose that the driver has not yet reported appended to the local log
        # (:meth:`advance`), oldest first, contiguous after the log's end. The leader's
        # own log end and terms read through it (:meth:`_last_offset`, :meth:`term_at`),
        # so a second Propose places after the first before any ready is carried out.
        self._unstable: list[RecordBatch] = []
        self._votes: dict[int, bool] = {}
        self._prevoting = False
        self._promoting: set[int] = set()
        # The last seq drawn per follower; never reset (it outlives terms and progress).
        self._sent_seq: dict[int, int] = {}
        # The latest timestamp this node placed as leader: a data batch stamped earlier
        # (its request overtaken by another's on the way here) is placed with this one,
        # so that a leader's data timestamps follow its log order, as Kafka's
        # LogAppendTime does. Never reset: it only rises.
        self._placed_ms = 0
        self.stale_replies = 0
        self.snapshots_installed = 0  # leader: installs that followers confirmed
        # Called with (follower, its status) after a reply updated a follower's progress
        # (the simulator checks that the view never goes back); None in production.
        self.progress_listener: Callable[[int, PeerStatus], None] | None = None
        self._progress_epochs = 0  # progress entries made (PeerStatus.epoch)
        # Quiescence (see the ``quiescent`` property's docstring). Leader: the followers
        # that confirmed quiescing in reply to a ``quiesce`` heartbeat since the last wake.
        self._quiescent = False
        self._quiesced_peers: set[int] = set()
        # Leader: members node liveness declared dead (until heard again); a leader
        # quiesces without their confirmation (CockroachDB quiesces a range whose
        # lagging followers are on non-live nodes), so that the groups a dead node was
        # a member of go quiet again instead of ticking and heartbeating it forever.
        self._dead_nodes: set[int] = set()
        # Leader: the members it quiesced without (declared dead then), until it wakes.
        self._quiesced_without: set[int] = set()
        self._ready = Ready()
        self._refresh_role()

    # ------------------------------------------------------------------ views

    @property
    def is_leader(self) -> bool:
        return self.role is Role.LEADER

    @property
    def live_leader_id(self) -> int:
        """The leader as this replica knows it, -1 when none is known or node liveness
        declared its node dead (until it is heard again or another leader is known).
        What the node reports as the partition's leader: a dead node named as leader
        sends clients and the metadata's leader confirmations to a closed port, over
        and over until the election ends (a follower keeps ``leader_id`` until its
        timeout fires)."""
        return -1 if self.leader_id in self._dead_nodes else self.leader_id

    @property
    def behind_promise(self) -> bool:
        """True while this replica's log lacks entries it had acknowledged as flushed.

        Such a replica may be missing committed entries: its vote could elect a
        leader without them, and its flushed offset could complete a quorum that
        no longer holds them. Once its flushed offset reaches the promise again
        the promise is dropped for good (the flushed offset only goes back by a
        truncation, which never goes at or below the commit index, or by another
        loss of data, which a restart detects anew).
        """
        if self.promised_offset < 0:
            return False
        if self.log.flushed_offset >= self.promised_offset:
            self.promised_offset = -1
            return False
        return True

    @property
    def quiescent(self) -> bool:
        """True while the group needs neither ticks nor per-group heartbeats here.

        A leader quiesces once its whole log is committed in its term and flushed on
        every member, nothing is in flight, pending or changing (a transfer, a
        configuration, a promotion), and every member confirmed quiescing in reply
        to a heartbeat that asked it to (``Heartbeat.quiesce``); members on nodes
        declared dead are left out of both while the live ones are a majority with
        it (``_can_quiesce``, :attr:`quiescent_without_dead`). A follower quiesces
        on such a heartbeat when it holds exactly the leader's log, all committed and
        flushed. The driver
        stops ticking a quiescent group (the node clock drops it) and the leader
        sends it no heartbeats; node liveness (one heartbeat per node pair) stands in
        for them. Anything that is not a quiesce heartbeat wakes it: a proposal, an
        append, a vote or timeout-now request, a configuration change, a transfer, a
        step-down, a reply that shows a follower behind, or :meth:`_on_node_dead` for
        the leader's node (a follower) or for a member's node when the leader's live
        members are no longer a majority. A woken
        follower's election timer goes on from where it stopped, so a follower whose
        leader's node died campaigns one election timeout after the node was
        declared dead, as today. Only liveness depends on quiescence: no vote, no
        append and no commit rule reads it."""
        return self._quiescent

    @property
    def quiescent_without_dead(self) -> bool:
        """A quiescent leader that quiesced without members on nodes declared dead (and
        was not woken since): those may not hold its log (every other quiescent
        leader's members confirmed they do, also one declared dead afterwards)."""
        return self._quiescent and self.role is Role.LEADER and bool(self._quiesced_without)

    def _wake(self) -> None:
        self._quiesced_peers.clear()
        self._quiesced_without.clear()
        self._quiescent = False

    def _on_node_dead(self, node: int, refused: bool = False) -> None:
        """Node liveness declared ``node`` dead: wake if it is this quiescent follower's
        leader (it must campaign), or a member of this quiescent leader's group whose
        live members are no longer a majority (its quorum check must run, and step it
        down). Until ``NodeAlive``, a leader quiesces without ``node``'s confirmation
        (see ``_can_quiesce``).

        A quiescent leader that keeps a majority does not wake: every member confirmed
        its whole log (or was left out as dead already), so there is nothing to send,
        and its followers on live nodes keep it. Waking it would cost a tick and a
        heartbeat round per group for nothing: a node declared dead is a member of
        every group its peers lead (a third of a 3-node cluster's groups each), so
        every verdict woke them all, on top of the groups the dead node led."""
        self._dead_nodes.add(node)
        if self.role is not Role.LEADER and node == self.leader_id:
            self._order_campaign(node, refused)
        elif self.role is not Role.LEADER and mutations.active("lease_ends_on_any_verdict"):
            self.timer.end_lease()
        if not self._quiescent:
            return
        if self.role is Role.LEADER:
            if node in self.progress and not self._live_followers():
                self._wake()
        elif node == self.leader_id and not mutations.active("quiesced_keeps_dead_leader"):
            self._wake()

    def _order_campaign(self, dead_leader: int, refused: bool) -> None:
        """The leader's node was declared dead: its lease here is over, one live voter
        campaigns at once and the others give it two election timeouts first.

        The lease: a verdict means this node heard nothing from the leader's node for
        ``dead_after_s`` (two election timeouts on a node, one in the simulator) counted
        in its own rounds, so a follower whose timer had kept ticking would hold no
        lease by now; only a quiescent follower's frozen timer still did, for up to
        another timeout after it woke. Ending it makes a quiescent follower refuse
        candidates exactly as long as a ticking one (the lease argument of the read
        index is unchanged), and lets the first campaign win without waiting.

        Which one campaigns: among the live voters (neither the dead leader nor a node
        declared dead here), the one at ``group`` modulo their count, whatever its
        priority, so every replica names the same one and the new leaderships spread
        over the live nodes. By priority, the kill of a node made one node campaign
        for every group the dead one led (placement puts the same node second on all
        of them): a thousand elections on one node's loop at 3,000 partitions, and
        then a third of them moved by the leader balancer anyway; priorities order
        the elections that a timeout starts, never this one. It campaigns
        ``VERDICT_CAMPAIGN_TICKS`` later (the others' verdicts come within that) plus
        a random part of half a timeout (the node's other groups told at the same
        verdict spread their campaigns: all at once, their vote saves and round trips
        queued past the election timeout and the terms were lost again, 1,034 terms
        for 334 partitions at load 13). The others give it two minimum timeouts plus
        a randomized one: while a node's loop runs a thousand elections some take
        more than one timeout, and a second campaign of the same group then cost
        both their terms (a few hundred at 3,000 partitions), when the named one had
        only been slow. Why one is named: both live followers of a 3-replica group
        woke at the verdict and drew their timeouts alike; two campaigns within one
        vote round trip (common while a node's loop runs a thousand elections) each
        voted for itself and the term was lost, and every split cost another timeout
        and another vote save per replica. Who may vote for whom is unchanged.

        ``refused``: the dead leader's address refused connections (its process is
        gone), so the named voter campaigns without a prevote. A prevote keeps a node
        cut off from a leader that still serves the others from raising the term; a
        refused port is no such partition, and the prevote round cost every election
        of a failover one more round trip on two busy loops (1,000 at 3,000
        partitions). A voter that still holds a lease refuses the vote as it would
        have refused the prevote."""
        config = self.configs.latest
        self.timer.end_lease()
        if self.node_id not in config.voters or self.role is Role.LEARNER:
            return
        live = [v for v in config.voters if v != dead_leader and v not in self._dead_nodes]
        if self.node_id not in live:
            return
        if live[self.group % len(live)] == self.node_id:
            self._named_by_verdict = True
            self._named_skips_prevote = refused
            if self.options.campaign_first:
                self.timer.expire_after(1)
            else:
                self.timer.expire_soon(VERDICT_CAMPAIGN_TICKS)
        else:
            self.timer.give_way(VERDICT_GIVE_WAY_TIMEOUTS)

    def _on_node_alive(self, node: int) -> None:
        """Node liveness heard ``node`` again after declaring it dead: a quiescent leader
        of a group it is a member of wakes, to bring it up to date (when it quiesced
        without it) or to heartbeat it (a restarted member's timers run: unheard, it
        would campaign)."""
        self._dead_nodes.discard(node)
        if self._quiescent and self.role is Role.LEADER and node in self.progress:
            self._wake()
        p = self.progress.get(node) if self.role is Role.LEADER else None
        if p is not None and p.state is not ProgressState.REPLICATE:
            self._request_recovery(p)  # held while its node was declared dead

    def _live_followers(self) -> set[int]:
        """Leader: the followers not declared dead; None of them when they are not a
        majority with the leader (its quorum check must go on then)."""
        live = self.progress.keys() - self._dead_nodes
        return live if 2 * (len(live) + 1) > len(self.progress) + 1 else set()

    def _can_quiesce(self) -> bool:
        """Leader: nothing to replicate, commit, flush or change (see ``quiescent``)."""
        if not (
            self.options.quiesce
            and self.role is Role.LEADER
            and self.transfer_target == -1
            and not self._unsent
            and not self._promoting
            and not self._read_fences
        ):
            return False
        end = self._last_offset()
        if (
            self.commit_index != end
            or self.log.flushed_offset < end
            or self.config_change_in_flight
            or not self.committed_in_term
            or self.behind_promise
        ):
            return False
        # No "heard lately" condition: each member's confirmation of a quiesce
        # heartbeat is a fresh reply, and any change since wakes the group. A member
        # declared dead is not waited for (nor is its progress looked at).
        live = self._live_followers() if self._dead_nodes else self.progress.keys()
        return bool(live) and all(
            self.progress[n].state is ProgressState.REPLICATE
            and self._heartbeat_idle(self.progress[n])
            for n in live
        )

    @property
    def accepting_writes(self) -> bool:
        """Leader and not transferring leadership away."""
        return self.role is Role.LEADER and self.transfer_target == -1

    @property
    def committed_in_term(self) -> bool:
        """An entry of the current term is committed. Raft's read rule: a new leader's
        commit index may lag what an earlier leader committed (and acknowledged) until
        then, so it serves reads only once this holds."""
        return self.term_at(self.commit_index) == self.term

    def read_index(self, read_round: int = -1, quorum_round: bool = False) -> ReadIndex:
        """The read index decision (see :mod:`raftlog.raft.read_index`): the offset a
        linearizable read must wait to be applied, or why none may be served now.
        ``read_round``: the round a :class:`ReadRequest` gave this read (-1: none); it
        matters when the decision says ``confirm``: this leader's lease does not hold in
        its term, or the caller asked for a ``quorum_round`` whatever the lease (an
        answer that must hold even if ticks drift)."""
        if self.role is not Role.LEADER:
            return ReadIndex(-1, False, "does not lead")
        if self.transfer_target != -1:
            return ReadIndex(-1, True, f"is handing its leadership to node {self.transfer_target}")
        term, index = self._read_index
        if term != self.term:
            if not mutations.active("read_before_commit_in_term"):
                return ReadIndex(
                    -1,
                    True,
                    "has not committed an entry of its term yet (its commit index may lag "
                    "what an earlier leader committed)",
                )
            index = self.commit_index
        lease_lost = self._lease_lost_term == self.term
        if lease_lost and mutations.active("lease_after_timeout_now"):
            lease_lost = False
        if lease_lost or quorum_round:
            if read_round == -1 or read_round > self._read_confirmed:
                why = (
                    "sent timeout-now in its term, so its lease does not hold"
                    if lease_lost
                    else "was asked for a quorum round"
                )
                asked = "" if read_round == -1 else f" (round {read_round})"
                return ReadIndex(
                    -1,
                    True,
                    f"{why}: a read waits for a quorum of voters to answer a heartbeat or "
                    f"append sent after the read was asked{asked}",
                    confirm=True,
                )
            return ReadIndex(index, True)
        timeout = self.options.election_timeout_ticks
        if self.options.check_quorum and not self._quorum_heard(timeout):
            return ReadIndex(
                -1,
                True,
                f"has not heard from a quorum of voters within {timeout} ticks (it may have "
                "been deposed)",
            )
        return ReadIndex(index, True)

    def _ask_read(self) -> None:
        """Leader: number a read that needs a quorum round, fence it at the seqs drawn so
        far, and make every follower due a heartbeat (a quiescent group wakes)."""
        if self.role is not Role.LEADER:
            return
        fence = {node: self._sent_seq.get(node, 0) for node in self.progress}
        self._wake()
        if self._read_fences and self._read_fences[-1][1] == fence:
            # Nothing drawn since the last round was asked: it is this one too (so reads
            # retried against a leader that hears nobody add no fence each).
            self._ready.read_round = self._read_fences[-1][0]
            return
        self._read_rounds += 1
        self._read_fences.append((self._read_rounds, fence))
        self._ready.read_round = self._read_rounds
        self._confirm_reads()  # a group of one confirms at once

    def _note_answered(self, peer: int, req_seq: int) -> None:
        """Leader: ``peer`` answered its request ``req_seq`` of this term (in this term:
        a higher one steps the leader down first)."""
        if req_seq > self._answered_seq.get(peer, -1):
            self._answered_seq[peer] = req_seq
            if self._read_fences:
                self._confirm_reads()

    def _confirm_reads(self) -> None:
        voters = self.configs.latest.voters
        while self._read_fences:
            read_round, fence = self._read_fences[0]
            answered = sum(
                1
                for v in voters
                if v == self.node_id or (v in fence and self._answered_seq.get(v, -1) > fence[v])
            )
            if answered < len(voters) // 2 + 1:
                return
            self._read_confirmed = read_round
            self._read_fences.popleft()

    def _quorum_heard(self, ticks: int) -> bool:
        """A majority of the voters (this node included) heard within the last ``ticks``."""
        window_start = self.ticks - ticks
        voters = self.configs.latest.voters
        heard = sum(
            1
            for v in voters
            if v == self.node_id
            or (v in self.progress and self.progress[v].last_heard_tick > window_start)
        )
        return heard >= len(voters) // 2 + 1

    @property
    def config_change_in_flight(self) -> bool:
        return self.configs.latest_offset > self.commit_index

    def take_ready(self) -> Ready:
        """What the core decided since the last call (see :class:`Ready`)."""
        ready, self._ready = self._ready, Ready()
        return ready

    def advance(self, ready: Ready) -> None:
        """The driver appended ``ready.append`` to the local log (etcd's ``Advance``), or
        gave up (the append raised): the unstable tail drops those batches and the
        log answers for those offsets from now on. A batch the tail no longer holds
        (it stepped down and dropped the tail, or it was advanced already) is
        skipped."""
        for b in ready.append:
            if not self._unstable:
                return
            head = self._unstable[0]
            if head.base_offset == b.base_offset and head.term == b.term:
                self._unstable.pop(0)

    def _last_offset(self) -> int:
        """Leader: the last offset placed, appended to the local log or not."""
        return self._unstable[-1].last_offset if self._unstable else self.log.dirty_offset

    def status(self) -> Status:
        """An immutable snapshot of the term, role, commit index and, on a leader, each
        other member's progress."""
        peers = {node: _peer_status(p) for node, p in self.progress.items()}
        return Status(
            self.term,
            self.role,
            self.leader_id,
            self.commit_index,
            self.ticks,
            self.transfer_target,
            MappingProxyType(peers),
        )

    def step(self, message: Message) -> None:
        """The one door into the core: a peer's message or a local one.

        Everything the core decides in answer (replies to peers included) is in
        the next :meth:`take_ready`; nothing is returned. A peer's reply comes
        wrapped with the request it answers (:mod:`raftlog.raft.local_messages`).
        Raises TypeError for anything else, and :class:`SafetyViolation` when
        asked to do what Raft forbids.
        """
        if isinstance(message, VoteRequest):
            self._reply(message.source_node, self._handle_vote(message))
        elif isinstance(message, VoteReply):
            self._handle_vote_reply(message)
        elif isinstance(message, AppendEntriesRequest):
            self._check_append(message)
        elif isinstance(message, AppendPersisted):
            self._reply(message.request.source_node, self._finish_append(message.request))
        elif isinstance(message, HeartbeatFrom):
            self._reply(message.source, self._handle_heartbeat(message.source, message.heartbeat))
        elif isinstance(message, HeartbeatAnswered):
            hb = message.heartbeat
            if message.reply.result != APPEND_GROUP_UNAVAILABLE:
                self._handle_append_reply(
                    message.peer,
                    hb.term,
                    hb.prev_log_offset,
                    message.reply,
                    is_heartbeat=True,
                    req_seq=hb.seq,
                )
        elif isinstance(message, AppendAnswered):
            answer = message.reply
            if answer is not None and answer.result == APPEND_GROUP_UNAVAILABLE:
                answer = None
            self._handle_append_result(message.peer, message.request, answer)
        elif isinstance(message, RecoveryAnswered):
            self._handle_recovery_reply(message.peer, message.request, message.reply)
        elif isinstance(message, TimeoutNowRequest):
            self._reply(message.source_node, self._handle_timeout_now(message))
        elif isinstance(message, TimeoutNowReply):
            self._handle_timeout_now_reply(message)
        elif isinstance(message, InstallSnapshotRequest):
            verdict = self._check_install(message)
            if isinstance(verdict, InstallSnapshotReply):
                self._reply(message.source_node, verdict)
            else:
                self._ready.install.append(message)
        elif isinstance(message, InstallChunkHeld):
            held = self._install_reply(message.request, APPEND_SUCCESS, message.received)
            self._reply(message.request.source_node, held)
        elif isinstance(message, InstallPersisted):
            self._reply(message.request.source_node, self._finish_install(message.request))
        elif isinstance(message, InstallAnswered):
            following = self._handle_install_reply(message.peer, message.request, message.reply)
            if following is not None:
                self._ready.install_next[message.peer] = following
            elif self._snapshot_wanted(message.peer, message.request.term):
                self._ready.install_wanted.append(message.peer)
        elif isinstance(
            message, (RecoveryPoll, RecoveryChunkRead, SnapshotChunkRead, RecoveryLost)
        ):
            self._step_recovery(message)
        else:
            self._step_local(message)

    def _step_local(self, message: Message) -> None:
        if isinstance(message, Tick):
            self._tick()
        elif isinstance(message, HeartbeatRound):
            if message.only is None:
                self._ready.heartbeats.extend(self._heartbeats_due())
            elif self.role is Role.LEADER and message.only in self.progress:
                self._ready.heartbeats.append((message.only, self._heartbeat_for(message.only)))
        elif isinstance(message, Propose):
            self._propose(message.batches, message.flush)
        elif isinstance(message, Campaign):
            self._campaign(message.prevote, message.transfer)
        elif isinstance(message, TransferLeadership):
            self._begin_transfer(message.target)
        elif isinstance(message, AbortTransfer):
            self._abort_transfer()
        elif isinstance(message, ReadRequest):
            self._ask_read()
        elif isinstance(message, StepDown):
            self._step_down()
        elif isinstance(message, ConfigurationChanged):
            self._on_configuration_changed()
        elif isinstance(message, LocalFlushed):
            self._on_local_flush()
        elif isinstance(message, NodeDead):
            self._on_node_dead(message.node, message.refused)
        elif isinstance(message, NodeAlive):
            self._on_node_alive(message.node)
        elif isinstance(message, PromotionDone):
            self._promotion_done(message.node)
        else:
            raise TypeError(f"group {self.group}: not a message for the core: {message!r}")

    def _step_recovery(
        self, message: RecoveryPoll | RecoveryChunkRead | SnapshotChunkRead | RecoveryLost
    ) -> None:
        """What a running ``recovery`` does next, into the ready (see :class:`Ready`)."""
        node, term = message.peer, message.term
        if isinstance(message, RecoveryPoll):
            if self._snapshot_wanted(node, term):
                self._ready.install_wanted.append(node)
            elif (chunk := self._recovery_chunk(node, term)) is not None:
                self._ready.recovery_read[node] = chunk
        elif isinstance(message, RecoveryChunkRead):
            req = self._recovery_request(node, term, message.batches)
            if req is not None:
                self._ready.recovery_send.append((node, req))
        elif isinstance(message, SnapshotChunkRead):
            install = self._install_request(
                node,
                term,
                message.snapshot_offset,
                message.chunk_offset,
                message.total,
                message.data,
            )
            if install is not None:
                self._ready.recovery_send.append((node, install))
            elif self._snapshot_wanted(node, term):
                self._ready.install_wanted.append(node)
        elif self._recovery_failed(node, term, message.seq):
            self._ready.recovery_retry.append(node)

    def _reply(self, target: int, reply: object) -> None:
        self._ready.replies.append((target, reply))

    def term_at(self, offset: int) -> int | None:
        """The term of the entry at ``offset`` (0 before the log), the unstable tail's
        included; None when neither holds it."""
        if offset < 0:
            return 0
        if self._unstable and offset >= self._unstable[0].base_offset:
            for b in self._unstable:
                if b.base_offset <= offset <= b.last_offset:
                    return b.term
            return None
        return self.log.term_at(offset)

    def _first_of_new_group(self, vote: VoteState) -> bool:
        """True on a group that never had a term or an entry, on its (first) voter of the
        highest priority: the one to campaign first (see ``first_election_ticks``)."""
        config = self.configs.latest
        if vote.term != 0 or self.log.dirty_offset >= 0 or self.node_id not in config.voters:
            return False
        top = config.max_priority
        return self.node_id == min(v for v in config.voters if config.priority(v) == top)

    # ---------------------------------------------------------------- ticking

    def _tick(self) -> None:
        if self._quiescent:
            return  # the driver stops ticking a quiescent group; a stray tick is a no-op
        self.ticks += 1
        if self.role is Role.LEADER:
            self._tick_leader()
            return
        if self.role is Role.CANDIDATE and self._vote_retry:
            for peer in sorted(self._vote_retry):
                self._ready.messages.append((peer, self._round_requests[peer]))
            self._vote_retry.clear()
        if self.timer.tick() and self.role is not Role.LEARNER:
            self._on_election_timeout()

    def _tick_leader(self) -> None:
        if not self.progress and self._can_quiesce():
            self._quiescent = True  # a group of one: nobody to confirm it
            return
        if self.transfer_target != -1:
            self._transfer_elapsed += 1
            if self._transfer_elapsed > self.options.transfer_timeout_ticks:
                self._abort_transfer()
            else:
                self._advance_transfer()
        if not self.options.check_quorum:
            return
        self._quorum_check_elapsed += 1
        if self._quorum_check_elapsed < self.options.election_timeout_ticks:
            return
        self._quorum_check_elapsed = 0
        if not self._quorum_heard(self.options.election_timeout_ticks):
            self._become_follower(self.term, -1)

    def _on_election_timeout(self) -> None:
        config = self.configs.latest
        self.timer.reset()
        if self.node_id not in config.voters:
            return
        if self.role is Role.CANDIDATE and len(self._votes) == 1 and not self._waited_for_replies:
            # Nobody answered this round yet: wait one more timeout before a new one.
            # While two loops run a thousand elections a round's replies can take longer
            # than a timeout, and a new round throws away the grants still on their way
            # (traced at 3,000 partitions: a grant sent 0.3 s after the request, read
            # only after the candidate had moved on, and its next request answered 3-4 s
            # later). Once per round: a round whose requests were lost costs one timeout
            # more, never a stall; a refusal is an answer, and its round ends on time.
            self._waited_for_replies = True
            return
        silent_leader = self.leader_id
        # The leader was not heard for a whole timeout: this node holds no lease for it
        # any more, campaign or not (etcd's pre-candidate forgets its leader too). Kept,
        # the lease made a node that may not campaign yet (lower priority) refuse the
        # prevote of the one that may, and cost every failover of a preferred leader
        # another timeout in about half the kills (the failover benchmark: 1.3-1.8 s).
        self.leader_id = -1
        # Named for one campaign: a candidate whose replies are late (a thousand
        # elections on two loops) and that campaigned again at its next timeout threw
        # its term's votes away; deferring by priority keeps the term's candidacy, and
        # a late grant still wins it (kept named, re-elections at 3,000 partitions
        # took p99 8.5-10.5 s; consumed here, 5.2-7.8 s).
        named, self._named_by_verdict = self._named_by_verdict, False
        if not named and not self.priority_target.may_campaign(config, self.node_id, silent_leader):
            self.elections["campaigns_deferred"] += 1
            return
        self._campaign(prevote=not (named and self._named_skips_prevote), transfer=False)

    # -------------------------------------------------------------- elections

    def _campaign(self, prevote: bool, transfer: bool) -> None:
        """Start a (pre)vote round; a single-voter group wins at once."""
        config = self.configs.latest
        if self.node_id not in config.voters:
            return
        if self.behind_promise:
            return  # it may lack committed entries: it must not lead (see behind_promise)
        self._wake()
        self._prevoting = prevote
        self.elections["prevotes_started" if prevote else "votes_started"] += 1
        self._votes = {self.node_id: True}
        self._waited_for_replies = False
        self._round_requests = {}
        self._vote_retry.clear()
        if prevote:
            campaign_term = self.term + 1
            self.role = Role.CANDIDATE
            # As etcd's pre-candidate: forget the leader, so this node's own timer reset
            # does not count as a leader lease against other pre-candidates (two of them
            # would refuse each other's prevotes for as long as both keep campaigning).
            self.leader_id = -1
        else:
            self.term += 1
            self.voted_for = self.node_id
            self.leader_id = -1
            self.role = Role.CANDIDATE
            self._ready.vote = VoteState(self.term, self.voted_for)
            campaign_term = self.term
        self.timer.reset()
        if self._tally():
            return
        for peer in config.voters:
            if peer == self.node_id:
                continue
            request = VoteRequest(
                group=self.group,
                source_node=self.node_id,
                target_node=peer,
                term=campaign_term,
                prevote=prevote,
                last_log_offset=self.log.dirty_offset,
                last_log_term=self.log.last_term,
                leadership_transfer=transfer,
            )
            self._round_requests[peer] = request
            self._ready.messages.append((peer, request))

    def _tally(self) -> bool:
        """Act on a majority of grants; True when the round is decided in our favour."""
        config = self.configs.latest
        granted = sum(1 for v, g in self._votes.items() if g and v in config.voters)
        if granted < config.quorum():
            return False
        if self._prevoting:
            self._campaign(prevote=False, transfer=False)
        else:
            self._become_leader()
        return True

    def _log_up_to_date(self, last_term: int, last_offset: int) -> bool:
        if mutations.active("vote_ignores_log"):
            return True
        return (last_term, last_offset) >= (self.log.last_term, self.log.dirty_offset)

    def _handle_vote(self, req: VoteRequest) -> VoteReply:
        # A candidate: some member's timer runs, so this one's must too (a quiescent
        # follower would otherwise hold its lease against it for good).
        self._wake()
        # Behind its promise, this replica's log says nothing about what was committed:
        # a candidate it finds up to date may miss entries it acknowledged itself.
        log_ok = self._log_up_to_date(req.last_log_term, req.last_log_offset) and (
            not self.behind_promise
        )
        # The leader lease: while a leader is heard, ignore disruptive candidates.
        lease = (
            not req.leadership_transfer
            and self.leader_id not in (-1, req.source_node)
            and (self.role is Role.LEADER or self.timer.within_lease)
        )
        if lease and req.term > self.term:
            self.elections["votes_refused_lease"] += 1
        elif not log_ok:
            self.elections["votes_refused_log"] += 1
        if req.prevote:
            granted = req.term > self.term and log_ok and not lease
            return self._vote_reply(req, granted, log_ok, self.term if not granted else req.term)
        if req.term < self.term or (req.term > self.term and lease):
            return self._vote_reply(req, False, log_ok, self.term)
        if req.term > self.term:
            self._become_follower(req.term, -1)
        granted = log_ok and (
            self.voted_for in (-1, req.source_node) or mutations.active("vote_twice_in_term")
        )
        if granted:
            self.voted_for = req.source_node
            self._ready.vote = VoteState(self.term, self.voted_for)
            self.timer.reset()
        return self._vote_reply(req, granted, log_ok, self.term)

    def _vote_reply(self, req: VoteRequest, granted: bool, log_ok: bool, term: int) -> VoteReply:
        return VoteReply(
            group=self.group,
            source_node=self.node_id,
            target_node=req.source_node,
            term=term,
            prevote=req.prevote,
            granted=granted,
            log_ok=log_ok,
        )

    def _handle_vote_reply(self, reply: VoteReply) -> None:
        if reply.term > self.term and not reply.granted:
            self._become_follower(reply.term, -1)
            return
        if self.role is not Role.CANDIDATE or reply.prevote != self._prevoting:
            return
        if reply.term == GROUP_UNAVAILABLE_TERM:
            # The peer does not host the group yet (a new topic's replicas each create it
            # as they apply the controller's command, and a request can come first), or
            # its replica is stopped: no answer on the merits. Counted as a refusal, a new
            # group's first election lost its round and waited out a timeout (0.5-1 s;
            # its preferred voter therefore waited two ticks before campaigning). Asked
            # again at the next tick, while this round lasts (its election timeout).
            if reply.source_node in self._round_requests:
                self._vote_retry.add(reply.source_node)
            return
        expected_term = self.term + 1 if self._prevoting else self.term
        if reply.granted and reply.term != expected_term:
            return
        self._votes[reply.source_node] = reply.granted
        self._tally()

    def _handle_timeout_now(self, req: TimeoutNowRequest) -> TimeoutNowReply:
        self._wake()
        accepted = (
            req.term == self.term
            and req.source_node == self.leader_id
            and self.node_id in self.configs.latest.voters
            and not self.behind_promise
        )
        reply = TimeoutNowReply(self.group, self.node_id, req.source_node, self.term, accepted)
        if accepted:
            self._campaign(prevote=False, transfer=True)
        return reply

    # -------------------------------------------------------- role transitions

    def _refresh_role(self) -> None:
        if self.role in (Role.FOLLOWER, Role.LEARNER):
            voter = self.node_id in self.configs.latest.voters
            self.role = Role.FOLLOWER if voter else Role.LEARNER

    def _become_follower(self, term: int, leader: int) -> None:
        was_leader = self.role is Role.LEADER
        self._wake()
        self._drop_unsent()
        if term > self.term:
            self.term = term
            self.voted_for = -1
            self._ready.vote = VoteState(self.term, self.voted_for)
            self.matched_upto = -1
        if leader != self.leader_id:
            self.matched_upto = -1
        self.leader_id = leader
        self.role = Role.FOLLOWER
        self._refresh_role()
        self.transfer_target = -1
        self._read_fences.clear()
        self._promoting.clear()
        self.timer.reset()
        if leader != -1:
            self.priority_target.reset()
            self._named_by_verdict = False
        if was_leader:
            self._ready.stepped_down = True

    def _become_leader(self) -> None:
        self._wake()
        self.elections["leaderships_won"] += 1
        self.role = Role.LEADER
        self._drop_unsent()
        self.leader_id = self.node_id
        self.transfer_target = -1
        self._read_fences.clear()
        self._answered_seq.clear()
        self._quorum_check_elapsed = 0
        self.progress = {}
        self._sync_progress()
        self._ready.became_leader = True

    def _sync_progress(self) -> None:
        """One progress entry per member other than this node (after a config change)."""
        members = set(self.configs.latest.members) - {self.node_id}
        for node in list(self.progress):
            if node not in members:
                del self.progress[node]
        for node in members:
            if node not in self.progress:
                o = self.options
                p = FollowerProgress(
                    node,
                    Inflights(o.max_in_flight_appends, o.max_in_flight_bytes),
                    # Bounded by count only: each chunk already holds at most
                    # recovery_chunk_bytes (or one larger batch).
                    Inflights(o.recovery_max_inflight, sys.maxsize),
                )
                p.reset(self._last_offset(), self.ticks)
                self._progress_epochs += 1
                p.epoch = self._progress_epochs
                self.progress[node] = p

    def _step_down(self) -> None:
        """Give up leadership (or candidacy) in the current term."""
        if self.role in (Role.LEADER, Role.CANDIDATE):
            self._become_follower(self.term, -1)

    def _on_configuration_changed(self) -> None:
        """Call after the configuration history changed (append or truncation)."""
        self._wake()
        self._refresh_role()
        if self.role is Role.LEADER:
            self._sync_progress()
            self._maybe_advance_commit()

    # ------------------------------------------------------------- followers

    def _accept_leader(self, term: int, leader: int) -> bool:
        """Common term handling for append entries and heartbeats."""
        if term < self.term:
            return False
        if term > self.term or self.role is not Role.FOLLOWER or self.leader_id != leader:
            if self.role is Role.LEADER and term == self.term:
                raise SafetyViolation(
                    f"group {self.group}: two leaders in term {term} ({self.node_id}, {leader})"
                )
            self._become_follower(term, leader)
        self.timer.reset()
        self.priority_target.reset()
        self._named_by_verdict = False
        return True

    def _check_append(self, req: AppendEntriesRequest) -> None:
        """Validate an append: a rejection reply, or the plan to persist (``Ready.persist``)
        whose :class:`AppendPersisted` makes the reply."""
        plan = self._plan_append(req)
        if isinstance(plan, AppendEntriesReply):
            self._reply(req.source_node, plan)
            return
        self._ready.persist.append(plan)
        if not plan.flush:
            self._ready.flush_bytes += sum(b.size_bytes for b in plan.batches)

    def _plan_append(self, req: AppendEntriesRequest) -> AppendPlan | AppendEntriesReply:
        self._wake()
        if not self._accept_leader(req.term, req.source_node):
            return self._append_reply(req, APPEND_FAILURE, -1)
        start = self.log.start_offset
        # Below the log start the entries were compacted (or came in a snapshot): all
        # committed, so equal to every later leader's (leader completeness).
        if req.prev_log_offset > self.log.dirty_offset or (
            req.prev_log_offset >= start - 1
            and self.term_at(req.prev_log_offset) != req.prev_log_term
        ):
            return self._append_reply(req, APPEND_FAILURE, -1)
        truncate_at = -1
        to_append: list[RecordBatch] = []
        for i, batch in enumerate(req.batches):
            if batch.last_offset < start:
                continue  # compacted here
            if batch.base_offset <= self.log.dirty_offset:
                if self.term_at(batch.base_offset) == batch.term or mutations.active(
                    "skip_truncation"
                ):
                    continue  # already have it (a duplicate or reordered request)
                truncate_at = batch.base_offset
            to_append = list(req.batches[i:])
            break
        if truncate_at != -1 and truncate_at <= self.commit_index:
            raise SafetyViolation(
                f"group {self.group} node {self.node_id}: leader {req.source_node} term "
                f"{req.term} asks to truncate at {truncate_at} <= commit index {self.commit_index}"
            )
        return AppendPlan(req, truncate_at, to_append, req.flush)

    def _finish_append(self, req: AppendEntriesRequest) -> AppendEntriesReply:
        """After the plan was applied (and flushed if asked): the reply to send."""
        if req.term != self.term or self.leader_id != req.source_node:
            # A newer leader took over while this append was being applied.
            return self._append_reply(req, APPEND_FAILURE, -1)
        self._verified(req.last_offset, req.leader_commit)
        # Everything verified against this leader in this term, not just this request's
        # entries: a reply made after a later request's names that one's too, so the
        # newest reply alone carries all the leader needs.
        return self._append_reply(req, APPEND_SUCCESS, self.matched_upto)

    def _verified(self, offset: int, leader_commit: int) -> None:
        self.matched_upto = max(self.matched_upto, offset)
        new_commit = min(leader_commit, self.matched_upto)
        if new_commit > self.commit_index:
            self.commit_index = new_commit
            self._ready.commit_advanced = True

    def _append_reply(
        self, req: AppendEntriesRequest, result: int, matched: int
    ) -> AppendEntriesReply:
        return AppendEntriesReply(
            group=self.group,
            source_node=self.node_id,
            target_node=req.source_node,
            term=self.term,
            result=result,
            last_matched_offset=matched,
            last_flushed_offset=self._reported_flushed(),
            last_dirty_offset=self.log.dirty_offset,
            seq=self._reply_seq(req.source_node, req.term, req.seq),
        )

    def _handle_heartbeat(self, source: int, hb: Heartbeat) -> HeartbeatReply:
        ok = self._accept_leader(hb.term, source)
        matched = -1
        if (
            ok
            and hb.prev_log_offset <= self.log.dirty_offset
            and self.term_at(hb.prev_log_offset) == hb.prev_log_term
        ):
            matched = hb.prev_log_offset
            self._verified(matched, hb.leader_commit)
        end = self.log.dirty_offset
        quiesced = (
            hb.quiesce
            and self.options.quiesce
            and matched == end
            and hb.leader_commit == end
            and self.commit_index == end
            and self.log.flushed_offset >= end
            and not self.behind_promise
        )
        if quiesced:
            self._quiescent = True
        else:
            self._wake()
        return HeartbeatReply(
            group=self.group,
            term=self.term,
            result=APPEND_SUCCESS if ok else APPEND_FAILURE,
            last_matched_offset=matched,
            last_flushed_offset=self._reported_flushed(),
            last_dirty_offset=self.log.dirty_offset,
            seq=self._reply_seq(source, hb.term, hb.seq),
            quiesced=quiesced,
        )

    def _reported_flushed(self) -> int:
        """The flushed offset a reply reports: -1 while behind the promise.

        The leader counts ``min(flushed, matched)`` toward the commit index; -1
        keeps this replica out of every quorum until it has caught up. Reported
        consistently, the leader's view of it never moves back within a life.
        """
        return -1 if self.behind_promise else self.log.flushed_offset

    def _reply_seq(self, leader: int, term: int, seq: int) -> int:
        """The seq a reply carries: never below one already answered to this leader.

        A reply to an older term's request (a deposed leader's, delivered late) leaves
        the record alone: had it replaced it, the current leader's next reply would
        start again from its request's seq, below a reply already sent with an older
        state, and that older state would win at the leader (the simulation's seed
        1140: a follower's flushed offset went back from 109 to 102)."""
        if seq < 0:
            return seq
        last_leader, last_term, answered = self._answered
        if term < last_term:
            return seq
        if (last_leader, last_term) == (leader, term):
            # Strictly above every reply already sent to it: of two replies the leader
            # applies the one made later, which names the newer state (an equal seq
            # would drop whichever came second, the newer one half the time, and send
            # a follower that has everything to recovery).
            seq = max(seq, answered + 1)
        self._answered = (leader, term, seq)
        return seq

    # ---------------------------------------------------------------- leader

    def next_seq(self, node: int) -> int:
        """The sequence number for the next append or heartbeat sent to ``node``.

        Strictly increasing per follower for the life of this core (across
        terms), so the newest applied reply always names the newest state.
        """
        seq = self._sent_seq.get(node, 0) + 1
        self._sent_seq[node] = seq
        return seq

    def _heartbeats_due(self) -> list[tuple[int, Heartbeat]]:
        """Leader: the heartbeats of this round (the node's heartbeat manager sends them),
        one per follower, except that an idle follower, and one that an append went to
        lately, get one only every ``idle_heartbeat_ticks`` ticks.

        Idle: it holds the leader's whole log, all of it flushed, in REPLICATE with
        nothing in flight, and its last heartbeat told it the current commit index; so
        a heartbeat would only reset its election timer and refresh the quorum check,
        which need one a few times per election timeout, not every round. Anything new
        (a write, a commit, a reply that shows a gap or an unflushed tail, a transfer)
        makes it due at once. Sent an append within the last ``idle_heartbeat_ticks``
        ticks, and all it has written is flushed (Redpanda's heartbeat manager skips
        followers sent an append lately too): the append carries the
        term and the commit index, resets the follower's timer, and its reply refreshes
        the quorum check, so a group under writes is heartbeated as an idle one is; the
        commit index that the last appends did not carry reaches the follower within
        ``idle_heartbeat_ticks`` ticks of them. Only liveness depends on this, never
        safety: a heartbeat carries nothing that an append does not."""
        if self.role is not Role.LEADER or self._quiescent:
            return []
        every = self.options.idle_heartbeat_ticks
        quiesce = self._can_quiesce()
        due = []
        for node in sorted(self.progress):
            p = self.progress[node]
            told = p.heartbeat_commit == self.commit_index or not self.options.commit_at_once
            if (
                self.ticks - p.heartbeat_tick < every
                and self.transfer_target == -1
                and not self._read_fences
                and p.state is ProgressState.REPLICATE
                and (self._heartbeat_idle(p) or (self._appended_lately(p) and told))
            ):
                continue
            due.append((node, self._heartbeat_for(node, quiesce)))
        return due

    def _heartbeat_idle(self, p: FollowerProgress) -> bool:
        end = self._last_offset()
        return (
            p.in_flight == 0
            and p.match_offset == end
            and p.dirty_offset == end
            and p.flushed_offset >= end
            and p.heartbeat_commit == self.commit_index
        )

    def _appended_lately(self, p: FollowerProgress) -> bool:
        # Not with an unflushed tail: the heartbeat replies of a follower that flushes by
        # delay are how the leader learns its flushed offset (the quorum may need it).
        return (
            self.ticks - p.append_tick < self.options.idle_heartbeat_ticks
            and p.flushed_offset >= p.dirty_offset
        )

    def _heartbeat_for(self, node: int, quiesce: bool = False) -> Heartbeat:
        p = self.progress[node]
        p.heartbeat_tick = self.ticks
        p.heartbeat_commit = self.commit_index
        prev = max(p.match_offset, self.log.start_offset - 1)
        term = self.term_at(prev)
        return Heartbeat(
            group=self.group,
            term=self.term,
            prev_log_offset=prev,
            prev_log_term=term if term is not None else 0,
            leader_commit=self.commit_index,
            seq=self.next_seq(node),
            quiesce=quiesce,
        )

    def _handle_append_reply(
        self,
        peer: int,
        req_term: int,
        req_prev_offset: int,
        reply: AppendEntriesReply | HeartbeatReply,
        is_heartbeat: bool = False,
        req_seq: int = -1,
    ) -> None:
        """Update a follower's progress from a reply (append entries or heartbeat).

        A reply whose ``seq`` is not above the newest applied from ``peer`` is
        stale (reordered, duplicated or late) and changes nothing but, when it
        reported a success that nothing else in flight will confirm, a probe
        (recovery) so that the follower's progress is learnt again at once.
        """
        if reply.term > self.term:
            self._become_follower(reply.term, -1)
            return
        if self.role is not Role.LEADER or req_term != self.term:
            return
        p = self.progress.get(peer)
        if p is None:
            return
        # Stale or not, an answer in this term to a request drawn after a read round was
        # asked confirms that round's member (the reply's own seq may have been raised
        # by the follower, see _reply_seq: the request's is what was drawn when).
        self._note_answered(peer, req_seq)
        if reply.seq <= p.last_reply_seq and not mutations.active("accept_stale_replies"):
            self.stale_replies += 1
            if (
                reply.result == APPEND_SUCCESS
                and not is_heartbeat
                and p.state is ProgressState.REPLICATE
                and p.in_flight == 0
                and p.match_offset < self._last_offset()
            ):
                self._probe(p, min(p.next_offset, p.match_offset + 1))
            elif reply.result == APPEND_FAILURE and not is_heartbeat and p.recovering:
                # A mismatch still moves recovery back, stale or not: a follower that
                # waited (``_await_predecessor``) on a request it cannot take answers
                # after the heartbeats sent meanwhile, so its reply's seq is raised to
                # theirs; ignoring it would resend the same request forever. Only ever
                # lowers ``next_offset`` (resending entries is harmless), or asks for a
                # snapshot (the follower refuses one whose offset its log matches).
                if reply.last_dirty_offset < self.log.start_offset - 1:
                    self._want_snapshot(p)
                    return
                lowered = max(
                    min(p.next_offset, reply.last_dirty_offset + 1, req_prev_offset),
                    self.log.start_offset,
                )
                if p.state is ProgressState.PROBE and lowered < p.next_offset:
                    # The chunks in flight start past it and would all be refused.
                    p.become_probe(lowered)
                else:
                    p.next_offset = lowered
            return
        p.last_reply_seq = max(p.last_reply_seq, reply.seq)
        p.last_heard_tick = self.ticks
        p.recovery_failures = 0
        p.dirty_offset = reply.last_dirty_offset
        p.flushed_offset = reply.last_flushed_offset
        if mutations.active("dirty_as_flushed"):
            p.flushed_offset = reply.last_dirty_offset
        if self.progress_listener is not None:
            self.progress_listener(peer, _peer_status(p))
        if p.match_offset > reply.last_dirty_offset:
            # The follower lost unflushed entries (it crashed): it no longer has them.
            p.match_offset = reply.last_dirty_offset
        if reply.result == APPEND_SUCCESS and reply.last_matched_offset >= 0:
            p.match_offset = max(p.match_offset, reply.last_matched_offset)
            if not is_heartbeat:
                p.next_offset = max(p.next_offset, reply.last_matched_offset + 1)
                if p.state is ProgressState.REPLICATE:
                    p.inflights.free_le(p.match_offset)
                elif p.state is ProgressState.PROBE:
                    # The match point is known: recovery may pipeline from here. Chunks
                    # this reply acknowledged leave the window even if their own replies
                    # are lost (their transport error then restarts nothing).
                    p.recovery_confirmed = True
                    p.recovery_window.free_le(p.match_offset)
        elif reply.result == APPEND_FAILURE and not is_heartbeat:
            if reply.last_dirty_offset < self.log.start_offset - 1:
                # It lacks entries below the log start: only a snapshot can bring them.
                self._want_snapshot(p)
            else:
                self._probe(p, min(reply.last_dirty_offset + 1, req_prev_offset))
        if (
            is_heartbeat
            and p.state is ProgressState.REPLICATE
            and p.in_flight == 0
            and p.match_offset < self._last_offset()
        ):
            # Nothing in flight yet the follower lags: an append or its reply was lost.
            self._probe(p, min(p.next_offset, p.match_offset + 1))
        elif is_heartbeat and p.state is ProgressState.PROBE:
            # Restarts a recovery that gave up on transport errors; the chunks in flight
            # and the cursor stay (a heartbeat says nothing about them).
            self._request_recovery(p)
        elif is_heartbeat and p.state is ProgressState.SNAPSHOT:
            if p.dirty_offset >= self.log.start_offset - 1:
                # It got what precedes the log start some other way (refetched): probe again.
                self._probe(p, p.next_offset)
            else:
                self._want_snapshot(p)  # restarts an install that failed
        self._maybe_promote(p)
        self._maybe_advance_commit()
        if peer == self.transfer_target:
            self._advance_transfer()
        self._after_reply(peer, isinstance(reply, HeartbeatReply) and reply.quiesced)

    def _after_reply(self, peer: int, quiesced: bool) -> None:
        """Leader, after a fresh reply: count a follower's confirmation of a quiesce
        heartbeat, and quiesce once every member confirmed; wake when the group has
        something to do again."""
        if not self._can_quiesce():
            self._wake()
            return
        if not quiesced:
            self._quiesced_peers.discard(peer)
            return
        self._quiesced_peers.add(peer)
        live = self._live_followers() if self._dead_nodes else self.progress.keys()
        if live and self._quiesced_peers >= live:
            self._quiescent = True
            self._quiesced_without = set(self.progress.keys() - live)

    def _probe(self, p: FollowerProgress, next_offset: int) -> None:
        """Move ``p`` to probe from ``next_offset`` (never below the log start) and ask
        for ``recovery`` to run (the stage starts it unless it is running)."""
        p.become_probe(max(next_offset, self.log.start_offset))
        self._request_recovery(p)

    def _request_recovery(self, p: FollowerProgress) -> None:
        """Ask for ``recovery`` of ``p`` (in probe or snapshot), unless its node is declared
        dead: every chunk to it would fail, and after a kill -9 each of the thousand
        groups the live nodes took over ran a recovery to the dead node, restarted by
        every write (a tenth of a live node's loop in the failover's profile). The
        node's return (:meth:`_on_node_alive`) asks for it again."""
        if p.node not in self._ready.recover and p.node not in self._dead_nodes:
            self._ready.recover.append(p.node)

    def _want_snapshot(self, p: FollowerProgress) -> None:
        """Move ``p`` to ``SNAPSHOT`` and ask for ``recovery`` to install one."""
        p.become_snapshot()
        self._request_recovery(p)

    def _on_send_failed(self, peer: int, req_term: int) -> None:
        """A pipelined append could not be delivered: recovery takes the follower over."""
        p = self.progress.get(peer)
        if self.role is not Role.LEADER or req_term != self.term or p is None:
            return
        self._probe(p, min(p.next_offset, p.match_offset + 1))

    # ---------------------------------------------------------- flow control

    def _propose(self, batches: list[RecordBatch], flush: bool) -> list[RecordBatch]:
        """Leader: place ``batches`` after the log's end in this term; the placed copies.

        The ready then lists them to append (no flush), the flush to ask for
        (``flush``: at once, for a ``quorum_ack`` write; otherwise coalesced by
        bytes), and the pipelined append to each follower in ``REPLICATE``
        whose in-flight window has room (:meth:`_stream`: what it was not sent
        yet, from its last sent offset on). A follower whose window is full is
        paused: the append that frees a slot sends it what it missed, from
        memory (:meth:`_handle_append_result`), as etcd's paused progress does.
        Only when what the paused followers miss outgrows ``max_in_flight_bytes``
        (or ``MAX_UNSENT_BATCHES``) do they go to probe (``recovery`` catches
        them up from the log, chunk by chunk). The placed batches join the
        unstable tail until the driver reports them appended (:meth:`advance`), so
        proposals stepped one after another before a ready is taken place
        contiguously.
        """
        self._wake()
        if self.role is not Role.LEADER:
            raise SafetyViolation(f"group {self.group}: propose on a {self.role.value}")
        offset = self._last_offset() + 1
        placed: list[RecordBatch] = []
        for b in batches:
            stamp = b.timestamp_ms
            if b.kind is BatchKind.DATA and stamp < self._placed_ms:
                stamp = self._placed_ms
            self._placed_ms = max(self._placed_ms, stamp)
            nb = b.stamped(offset, self.term, stamp)
            placed.append(nb)
            offset = nb.last_offset + 1
        if not placed:
            return placed
        nbytes = sum(b.size_bytes for b in placed)
        self._unstable.extend(placed)
        self._ready.append.extend(placed)
        self._ready.flush_now = self._ready.flush_now or flush
        self._ready.flush_bytes += nbytes
        self._unsent.extend(placed)
        self._unsent_bytes += nbytes
        flushers = self._quorum_flushers() if flush else set()
        if flush:
            self._quorum_upto = placed[-1].last_offset
        for p in self.progress.values():
            if p.state is not ProgressState.REPLICATE:
                if p.state is ProgressState.PROBE:
                    self._request_recovery(p)  # a recovery that gave up restarts
                continue
            self._stream(p, p.node in flushers)
        self._trim_unsent()
        return placed

    def _stream(self, p: FollowerProgress, flush: bool) -> None:
        """Send ``p`` (in ``REPLICATE``) one pipelined append of the batches placed after
        its last sent offset, from ``_unsent``, at most ``max_in_flight_bytes`` of them
        (at least one batch); nothing while its window is full (paused).

        Every append starts right after the previous one to the same follower, so
        appends are never sent with a gap. When ``_unsent`` no longer holds what
        the follower misses, it goes to probe. The predecessor's term may be the
        unstable tail's (placed by an earlier Propose whose ready was not carried
        out yet): :meth:`term_at` reads it there.
        """
        if not self._unsent or p.last_sent_offset >= self._unsent[-1].last_offset:
            if p.last_sent_offset < self._last_offset():
                self._probe(p, min(p.next_offset, p.last_sent_offset + 1))
            return
        if p.inflights.full() and not mutations.active("ignore_inflight_bound"):
            return
        prev = p.last_sent_offset
        batches: list[RecordBatch] = []
        size = 0
        for b in self._unsent:
            if b.last_offset <= prev:
                continue
            if batches and size + b.size_bytes > self.options.max_in_flight_bytes:
                break
            batches.append(b)
            size += b.size_bytes
        if batches[0].base_offset != prev + 1:
            self._probe(p, min(p.next_offset, prev + 1))  # what it misses was dropped
            return
        if mutations.active("paused_backlog_gap") and len(batches) > 1:
            batches = batches[1:]
        prev_term = self.term_at(prev)
        last = batches[-1].last_offset
        req = AppendEntriesRequest(
            group=self.group,
            source_node=self.node_id,
            target_node=p.node,
            term=self.term,
            prev_log_offset=prev,
            prev_log_term=prev_term if prev_term is not None else 0,
            leader_commit=self.commit_index,
            flush=flush,
            batches=batches,
            seq=self.next_seq(p.node),
        )
        p.last_sent_offset = last
        p.append_tick = self.ticks
        p.inflights.add(req.seq, last, size)
        self._ready.appends.append((p.node, req))

    def _trim_unsent(self) -> None:
        """Keep in ``_unsent`` only what a follower in ``REPLICATE`` was not sent yet; past
        its bounds, send the followers that miss it to probe and keep nothing."""
        replicating = [p for p in self.progress.values() if p.state is ProgressState.REPLICATE]
        low = min((p.last_sent_offset for p in replicating), default=None)
        while self._unsent and (low is None or self._unsent[0].last_offset <= low):
            self._unsent_bytes -= self._unsent.popleft().size_bytes
        if (
            self._unsent_bytes > self.options.max_in_flight_bytes
            or len(self._unsent) > MAX_UNSENT_BATCHES
        ):
            end = self._unsent[-1].last_offset
            for p in replicating:
                if p.last_sent_offset < end:
                    self._probe(p, min(p.next_offset, p.last_sent_offset + 1))
            self._drop_unsent()

    def _drop_unsent(self) -> None:
        self._unsent.clear()
        self._unsent_bytes = 0
        # Placed in a term this node no longer leads: the ready that lists them still
        # has them appended, and the log answers for them after that.
        self._unstable.clear()

    def _quorum_flushers(self) -> set[int]:
        """The followers a ``quorum_ack`` append asks to flush at once: as many voters as
        a majority needs besides the leader, among those in ``REPLICATE``, the ones with
        the fewest appends unanswered (the quickest to answer; ties by node id).

        The commit needs a majority durable, not every replica: the others write the
        append and flush it by bytes and delay (``flush_bytes``, ``flush_delay_s``), as
        Redpanda's followers do, which saves each of them an fsync per append. The
        role is sticky: the ones asked last keep it while their window has room. A
        follower asked to flush answers later than one that is not, so it always has
        more appends unanswered; when the role went to the fewest unanswered as soon as
        the gap reached 3, it moved back and forth under load, and both followers
        fsynced nearly every append (`benchmarks small`, 64 clients: the follower not
        asked made 55-60 syncfs a second, not the 20 of its delay). A follower that
        stops answering fills its window and is passed over; until then the others'
        flushes by delay still complete the majority, later.
        """
        config = self.configs.latest
        need = config.quorum() - (1 if self.node_id in config.voters else 0)
        ready = sorted(
            (
                p
                for p in self.progress.values()
                if p.node in config.voters and p.state is ProgressState.REPLICATE
            ),
            key=lambda p: (
                not (p.node in self._flushers and not p.inflights.full()),
                len(p.inflights),
                p.node,
            ),
        )
        self._flushers = {p.node for p in ready[:need]}
        return self._flushers

    def _handle_append_result(
        self, peer: int, req: AppendEntriesRequest, reply: AppendEntriesReply | None
    ) -> None:
        """A pipelined append completed: frees its slot in ``peer``'s window, then applies
        the reply, or (``reply`` None: not delivered, or the group unavailable there)
        moves the follower to probe. A follower that was paused (its window full) is
        sent what it missed meanwhile (:meth:`_stream`)."""
        p = self.progress.get(peer)
        if p is not None and req.term == self.term:
            p.inflights.release(req.seq)
        if reply is None:
            self._on_send_failed(peer, req.term)
        else:
            self._handle_append_reply(peer, req.term, req.prev_log_offset, reply, req_seq=req.seq)
        p = self.progress.get(peer)
        if self.role is Role.LEADER and p is not None and p.state is ProgressState.REPLICATE:
            # It asks for a flush when it carries what a quorum_ack append placed.
            self._stream(p, p.node in self._flushers and self._quorum_upto > p.last_sent_offset)
            self._trim_unsent()

    def _recovery_chunk(self, node: int, term: int) -> RecoveryChunk | None:
        """What ``recovery`` of ``node`` (started in ``term``) reads next; None: nothing
        to send now (the stage waits for a chunk in flight to be answered, and stops
        when none is).

        Nothing is sent when this core no longer leads in ``term`` or the follower is
        not probing. Until a success in this probe confirmed the follower's match
        point, one chunk at a time from ``next_offset``; after it, up to
        ``recovery_max_inflight``, each starting after the last one handed out. When
        no chunk is in flight and the follower's ``next_offset`` passed the log's end,
        the follower is caught up and goes back to ``REPLICATE`` here, atomically with
        the stop, so no pipelined append can slip in between; while a chunk is in
        the window it stays in ``PROBE`` (that chunk may yet be lost or refused).
        """
        p = self.progress.get(node)
        if not (self.role is Role.LEADER and term == self.term and p is not None):
            return None
        if p.state is not ProgressState.PROBE:
            return None
        w = p.recovery_window
        if len(w) == 0:
            # Nothing in flight: whatever was sent and not acknowledged is sent again.
            p.recovery_sent_offset = p.next_offset - 1
            if p.next_offset > self.log.dirty_offset:
                p.become_replicate(self.log.dirty_offset)
                return None
        start = max(p.next_offset, p.recovery_sent_offset + 1, self.log.start_offset)
        if start > self.log.dirty_offset:
            return None  # the log's end is in flight: wait for the replies
        # Before a success, chunks past the first would be refused anyway: the follower's
        # log may end (or diverge) anywhere before them.
        pipelining = p.recovery_confirmed or mutations.active("recovery_pipelines_unmatched")
        if len(w) >= (w.max_count if pipelining else 1):
            return None
        return RecoveryChunk(start, self.options.recovery_chunk_bytes)

    def _recovery_request(
        self, node: int, term: int, batches: list[RecordBatch]
    ) -> AppendEntriesRequest | None:
        """The append carrying a chunk read for ``node``'s recovery (it asks for a flush),
        entered in the recovery window (the stage must send it, then hand its outcome to
        :meth:`_handle_recovery_reply` or :meth:`_recovery_failed`); None when its
        predecessor is below the log start: the follower needs a snapshot
        (``SNAPSHOT``: it waits for one)."""
        p = self.progress.get(node)
        if not (self.role is Role.LEADER and term == self.term and p is not None and batches):
            return None
        prev = batches[0].base_offset - 1
        prev_term = self.term_at(prev)
        if prev_term is None:
            p.become_snapshot()  # the running recovery installs it next
            return None
        req = AppendEntriesRequest(
            group=self.group,
            source_node=self.node_id,
            target_node=node,
            term=term,
            prev_log_offset=prev,
            prev_log_term=prev_term,
            leader_commit=self.commit_index,
            flush=True,
            batches=batches,
            seq=self.next_seq(node),
        )
        if p.state is ProgressState.PROBE:
            last = batches[-1].last_offset
            p.recovery_window.add(req.seq, last, sum(b.size_bytes for b in batches))
            p.recovery_sent_offset = max(p.recovery_sent_offset, last)
        return req

    def _handle_recovery_reply(
        self, node: int, req: AppendEntriesRequest, reply: AppendEntriesReply
    ) -> None:
        """The reply to a recovery chunk: frees its place in ``node``'s recovery window,
        then updates the progress as any append reply does (:meth:`_handle_append_reply`:
        a success moves ``next_offset`` on and confirms the match point, a mismatch
        restarts the probe one chunk at a time, a stale reply changes nothing)."""
        p = self.progress.get(node)
        if p is not None and self.role is Role.LEADER and req.term == self.term:
            p.recovery_window.release(req.seq)
        self._handle_append_reply(node, req.term, req.prev_log_offset, reply, req_seq=req.seq)

    def _recovery_failed(self, node: int, term: int, seq: int | None = None) -> bool:
        """A recovery request (or snapshot chunk) to ``node`` got no usable reply (a
        transport error, the group not hosted there): True to send again after a tick,
        False to stop, after ``RECOVERY_MAX_FAILURES`` in a row or once this core no
        longer leads in ``term`` (a heartbeat reply starts recovery again).

        ``seq``: the lost request was a log chunk of the recovery window. Its loss
        leaves a gap before the chunks sent after it, so the probe restarts one
        chunk at a time from ``next_offset``; a chunk no longer in the window (sent
        before the last restart, or acknowledged by a later reply) counts for nothing.
        """
        p = self.progress.get(node)
        if not (self.role is Role.LEADER and term == self.term and p is not None):
            return False
        if seq is not None:
            if not p.recovery_window.release(seq):
                return True
            if p.state is ProgressState.PROBE:
                p.become_probe(p.next_offset)
        p.recovery_failures += 1
        if p.recovery_failures < RECOVERY_MAX_FAILURES:
            return True
        p.recovery_failures = 0
        return False

    def _snapshot_wanted(self, node: int, term: int) -> bool:
        """Whether ``recovery`` of ``node`` (started in ``term``) must install a snapshot."""
        p = self.progress.get(node)
        return (
            self.role is Role.LEADER
            and term == self.term
            and p is not None
            and p.state is ProgressState.SNAPSHOT
        )

    def _install_request(
        self, node: int, term: int, snapshot_offset: int, chunk_offset: int, total: int, data: bytes
    ) -> InstallSnapshotRequest | None:
        """The request carrying one chunk of the snapshot as of ``snapshot_offset`` (the
        log start minus one) for ``node``; None when no install is wanted any more, or
        the snapshot is not at the log's start (retention moved it: read it again)."""
        snapshot_term = self.term_at(snapshot_offset)
        if not self._snapshot_wanted(node, term) or snapshot_term is None:
            return None
        if snapshot_offset != self.log.start_offset - 1:
            return None
        return InstallSnapshotRequest(
            group=self.group,
            source_node=self.node_id,
            target_node=node,
            term=term,
            last_included_offset=snapshot_offset,
            last_included_term=snapshot_term,
            chunk_offset=chunk_offset,
            total_bytes=total,
            data=data,
            seq=self.next_seq(node),
        )

    def _handle_install_reply(
        self, node: int, req: InstallSnapshotRequest, reply: InstallSnapshotReply
    ) -> int | None:
        """Apply a follower's reply to a snapshot chunk: the byte to send from next, or
        None to stop. Once the follower has installed the snapshot it probes from
        the offset after it (the same ``recovery`` goes on sending the log)."""
        if reply.term > self.term:
            self._become_follower(reply.term, -1)
            return None
        p = self.progress.get(node)
        if not self._snapshot_wanted(node, req.term) or p is None:
            return None
        if reply.seq <= p.last_reply_seq and not mutations.active("accept_stale_replies"):
            # Overtaken by a newer reply (a heartbeat's): it says nothing reliable, but the
            # install goes on with this chunk again, whose next reply says how many bytes
            # the follower holds. Stopping restarted the install from its first byte at
            # the next heartbeat, and an install of many chunks under late replies
            # restarted for good (the simulator's seed 333: 99 chunks of one byte).
            self.stale_replies += 1
            return req.chunk_offset
        p.last_reply_seq = reply.seq
        p.last_heard_tick = self.ticks
        p.recovery_failures = 0
        p.dirty_offset = reply.last_dirty_offset
        p.flushed_offset = reply.last_flushed_offset
        if reply.result != APPEND_SUCCESS:
            return None
        if reply.bytes_received < req.total_bytes:
            return reply.bytes_received
        # Installed: the follower's log is empty after the snapshot's offset.
        p.match_offset = max(p.match_offset, min(req.last_included_offset, reply.last_dirty_offset))
        p.become_probe(max(req.last_included_offset + 1, self.log.start_offset))
        self.snapshots_installed += 1
        return None

    def _check_install(self, req: InstallSnapshotRequest) -> bool | InstallSnapshotReply:
        """Follower: a reply refusing the chunk or saying the snapshot is not needed (the
        log already holds its offset with its term); True when the chunk is to be taken
        (the stage assembles and installs)."""
        if not self._accept_leader(req.term, req.source_node):
            return self._install_reply(req, APPEND_FAILURE, 0)
        if (
            req.last_included_offset < self.log.start_offset
            or self.term_at(req.last_included_offset) == req.last_included_term
        ):
            # Compacted here already, or the log matches the leader's there, so up to there
            # (log matching): keep it. Entries past it may count toward a commit already;
            # an install would drop them.
            return self._install_reply(req, APPEND_SUCCESS, req.total_bytes)
        return True

    def _finish_install(self, req: InstallSnapshotRequest) -> InstallSnapshotReply:
        """Follower, after the stage installed the snapshot (the log restarted empty after
        its offset, the state machines restored): everything up to its offset is
        committed (the leader only snapshots committed state)."""
        if req.term != self.term or self.leader_id != req.source_node:
            return self._install_reply(req, APPEND_FAILURE, 0)
        self.matched_upto = max(self.matched_upto, req.last_included_offset)
        if req.last_included_offset > self.commit_index:
            self.commit_index = req.last_included_offset
            self._ready.commit_advanced = True
        return self._install_reply(req, APPEND_SUCCESS, req.total_bytes)

    def _install_reply(
        self, req: InstallSnapshotRequest, result: int, received: int
    ) -> InstallSnapshotReply:
        return InstallSnapshotReply(
            group=self.group,
            source_node=self.node_id,
            target_node=req.source_node,
            term=self.term,
            result=result,
            bytes_received=received,
            last_flushed_offset=self._reported_flushed(),
            last_dirty_offset=self.log.dirty_offset,
            seq=self._reply_seq(req.source_node, req.term, req.seq),
        )

    def _catch_up(self, node: int) -> None:
        """Make sure ``node`` is being caught up (leadership transfer): probe it unless
        appends are in flight to it or it is probing already."""
        p = self.progress.get(node)
        if self.role is not Role.LEADER or p is None:
            return
        self._wake()
        if p.state is ProgressState.REPLICATE and p.in_flight == 0:
            self._probe(p, min(p.next_offset, p.match_offset + 1))

    def _on_local_flush(self) -> None:
        if self.role is Role.LEADER:
            self._maybe_advance_commit()
            for p in self.progress.values():
                self._maybe_promote(p)

    def _maybe_advance_commit(self) -> None:
        voters = self.configs.latest.voters
        if not voters:
            return
        values = sorted(
            (
                self.log.flushed_offset
                if v == self.node_id
                else (self.progress[v].durable_offset if v in self.progress else -1)
            )
            for v in voters
        )
        # The highest offset flushed on at least a majority.
        candidate = values[len(values) - (len(values) // 2 + 1)]
        if mutations.active("commit_on_leader_flush"):
            candidate = self.log.flushed_offset
        if candidate > self.commit_index and self.term_at(candidate) == self.term:
            self.commit_index = candidate
            if self._read_index[0] != self.term:  # the first commit of its term
                self._read_index = (self.term, candidate)
            self._ready.commit_advanced = True
            self._after_commit()

    def _after_commit(self) -> None:
        config = self.configs.latest
        if self.node_id not in config.voters and not self.config_change_in_flight:
            # Removed from the group and the removal is committed: hand over.
            self._become_follower(self.term, -1)
            return
        for p in self.progress.values():
            self._maybe_promote(p)
        if self.options.commit_at_once:
            # Told now, not at the next heartbeat round (up to a tick later), as etcd's
            # leader broadcasts an append when its commit index moves: every node
            # applies the controller's commits (a new topic's groups are created then).
            self._ready.heartbeats_now = [
                (node, self._heartbeat_for(node))
                for node in sorted(self.progress)
                if self.progress[node].heartbeat_commit != self.commit_index
            ]

    def _maybe_promote(self, p: FollowerProgress) -> None:
        config = self.configs.latest
        if (
            p.node in config.learners
            and p.node not in self._promoting
            and not self.config_change_in_flight
            and self.role is Role.LEADER
            and p.durable_offset >= self.log.flushed_offset
        ):
            self._promoting.add(p.node)
            self._ready.promote.append(p.node)

    def _promotion_done(self, node: int) -> None:
        self._promoting.discard(node)

    # ---------------------------------------------------- leadership transfer

    def _begin_transfer(self, target: int) -> None:
        """Stop accepting writes until ``target`` leads or the transfer times out (after
        ``transfer_timeout_ticks``: writes resume). Meanwhile the core catches ``target``
        up and, once it matches the leader's log end, sends it timeout-now (a ready's
        message), again every few ticks until it takes over or the transfer ends."""
        self._wake()
        self.transfer_target = target
        self._transfer_elapsed = 0
        self._timeout_now_sent_tick = -1
        self._advance_transfer()

    def _abort_transfer(self) -> None:
        self.transfer_target = -1

    def _advance_transfer(self) -> None:
        """The transfer's next step: catch the target up, or send it timeout-now."""
        target = self.transfer_target
        if target == -1 or self.role is not Role.LEADER:
            return
        p = self.progress.get(target)
        if p is None or target not in self.configs.latest.voters:
            self._abort_transfer()  # removed meanwhile
            return
        sent = self._timeout_now_sent_tick
        if sent >= 0 and self.ticks - sent < TIMEOUT_NOW_RESEND_TICKS:
            return  # the target may be campaigning already
        if p.match_offset >= self._last_offset():
            self._timeout_now_sent_tick = self.ticks
            # Its campaign ignores the voters' leases, whenever it arrives: no lease in
            # this term from now on (see read_index).
            self._lease_lost_term = self.term
            self._ready.messages.append((target, self._timeout_now_for(target)))
        else:
            self._catch_up(target)

    def _handle_timeout_now_reply(self, reply: TimeoutNowReply) -> None:
        """A refusal (the target was not ready) makes the next tick send it again."""
        if reply.term > self.term:
            self._become_follower(reply.term, -1)
        elif not reply.accepted and reply.source_node == self.transfer_target:
            self._timeout_now_sent_tick = -1

    def _timeout_now_for(self, target: int) -> TimeoutNowRequest:
        return TimeoutNowRequest(self.group, self.node_id, target, self.term)
