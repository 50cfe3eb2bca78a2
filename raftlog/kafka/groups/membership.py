"""One consumer group's membership: Kafka's classic group protocol as a pure state machine.

No IO, no clock, no randomness: every call takes the time (``now_ms``) and, where
a member id is minted, the id; it returns what is due. A JoinGroup or SyncGroup that
cannot be answered yet is *parked*: the call returns None and the answer comes later
in an :class:`Effects` (from another member's call, from :meth:`Group.tick` when a
timer expires, or from :meth:`Group.stored` when the group's metadata is durable).
The async shell (:mod:`raftlog.kafka.groups.coordinator`) keeps one future per parked
request and resolves it from the effects; it writes the group's metadata when an
effect says ``store``.

States and transitions (Kafka's ``GroupCoordinator`` / ``GroupMetadata``):

- EMPTY: no members (perhaps committed offsets). A join -> PREPARING_REBALANCE, its
  first completion held ``initial_delay_ms`` so that members starting together land
  in one generation.
- PREPARING_REBALANCE: members rejoin (heartbeats answer REBALANCE_IN_PROGRESS). Done
  when every member and no pending one has rejoined (or at the rebalance deadline,
  dropping those that did not): the generation goes up, a protocol every member
  supports is chosen, the leader (kept if still a member) gets every member's
  metadata -> COMPLETING_REBALANCE; with no member left -> EMPTY (stored).
- COMPLETING_REBALANCE: the leader's SyncGroup carries the assignments; once stored
  -> STABLE and every parked SyncGroup gets its member's assignment.
- STABLE: a new member, a leader's rejoin, a changed subscription, a leave or an
  expired session -> PREPARING_REBALANCE.
- DEAD: the coordinator unloaded the group (leadership moved): parked requests get
  NOT_COORDINATOR and nothing else is answered.

A member whose session expires (no heartbeat, commit, join or sync within its
session timeout; a member parked in a join or a sync is kept alive) is removed. With
JoinGroup v4+ a new member first gets MEMBER_ID_REQUIRED and an id, and counts as
*pending* until it joins with it (or its session timeout passes).

Static membership (KIP-345, Kafka's rules): a member that joins with a group
instance id is known by it. It skips MEMBER_ID_REQUIRED; when it joins again without
a member id (a restarted process, within its session timeout: a static member does
not send LeaveGroup when it stops) it takes over the member of its instance id under
a new member id, keeping that member's assignment. In a STABLE group whose protocol
and the member's subscription stay the same that is no rebalance: the group's record
(with the new id) is stored, then the join is answered with the current generation,
and its SyncGroup gets the kept assignment. Otherwise the group rebalances. The old
member id is fenced: its parked requests, and any later call naming the instance id
with another member id, get FENCED_INSTANCE_ID; a call naming an instance id no
member has gets UNKNOWN_MEMBER_ID.

For the admin APIs, :meth:`Group.summary` is what DescribeGroups and ListGroups show
(Kafka's ``GroupMetadata.summary``) and :meth:`Group.subscribes_to` what
OffsetDelete refuses (Kafka's ``isSubscribedToTopic``).
"""

from __future__ import annotations

import collections
import dataclasses
import enum
from typing import Any

from kio.schema.consumer_protocol_subscription.v0.data import ConsumerProtocolSubscription
from kio.schema.errors import ErrorCode as KafkaError
from kio.serial import entity_reader

__all__ = [
    "CONSUMER_PROTOCOL",
    "Effects",
    "Group",
    "GroupState",
    "GroupSummary",
    "JoinAnswer",
    "Member",
    "MemberSummary",
    "SyncAnswer",
    "subscribed_topics",
]

#: The protocol type of Kafka consumers' groups, whose member metadata is a
#: ConsumerProtocolSubscription (its topics first in every version).
CONSUMER_PROTOCOL = "consumer"


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclasses.dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    group_instance_id: str | None = None
    assignment: bytes = b""
    awaiting_join: bool = False
    awaiting_sync: bool = False
    deadline_ms: int = 0  # the session expires here unless kept alive

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise KeyError(protocol)


@dataclasses.dataclass(frozen=True, slots=True)
class JoinAnswer:
    """A JoinGroup answer: ``members`` (id, instance id, metadata) for the leader only."""

    member_id: str
    error: KafkaError
    generation: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: tuple[tuple[str, str | None, bytes], ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class SyncAnswer:
    member_id: str
    error: KafkaError
    assignment: bytes = b""
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class MemberSummary:
    """One member as DescribeGroups shows it (metadata and assignment: empty unless
    the group is STABLE, as Kafka's ``summaryNoMetadata``)."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    metadata: bytes
    assignment: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class GroupSummary:
    """A group as DescribeGroups and ListGroups show it: Kafka's state name, protocol
    type ("" for a group that only committed offsets), protocol ("" unless STABLE)."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberSummary, ...] = ()


@dataclasses.dataclass(slots=True)
class Effects:
    """What a call made due: answers to parked requests, and whether to store the
    group's metadata (``store``: the generation whose record to write)."""

    joins: list[JoinAnswer] = dataclasses.field(default_factory=list)
    syncs: list[SyncAnswer] = dataclasses.field(default_factory=list)
    store: int | None = None
    rebalances: int = 0  # rebalances completed (a metric)

    def merge(self, other: Effects) -> Effects:
        self.joins.extend(other.joins)
        self.syncs.extend(other.syncs)
        if other.store is not None:
            self.store = other.store
        self.rebalances += other.rebalances
        return self


class Group:
    """One group's membership. ``initial_delay_ms``: Kafka's
    ``group.initial.rebalance.delay.ms``; ``max_members``: ``group.max.size``."""

    def __init__(self, group_id: str, *, initial_delay_ms: int = 3000, max_members: int = 1000):
        self.group_id = group_id
        self.initial_delay_ms = initial_delay_ms
        self.max_members = max_members
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}  # in join order
        self.pending: dict[str, int] = {}  # member id -> deadline (MEMBER_ID_REQUIRED)
        self.rebalance_deadline_ms = 0
        self.initial_join_until_ms = 0  # while > 0: the first rebalance's hold
        self.storing: int | None = None  # generation of the leader's sync being stored
        # STABLE: the static members whose rejoin waits for the store of the group's
        # record naming their new id, one per store, in the order the stores were made
        self.static_stores: collections.deque[str] = collections.deque()

    # -- records -----------------------------------------------------------------

    def record(self) -> dict[str, Any]:
        """The group's metadata as ``__consumer_offsets`` keeps it (a ``group`` command
        without its op and group id)."""
        return {
            "generation": self.generation,
            "protocol_type": self.protocol_type,
            "protocol": self.protocol,
            "leader": self.leader,
            "members": [
                {
                    "id": m.member_id,
                    "instance": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "session_timeout_ms": m.session_timeout_ms,
                    "rebalance_timeout_ms": m.rebalance_timeout_ms,
                    "protocols": [[n, md.hex()] for n, md in m.protocols],
                    "assignment": m.assignment.hex(),
                }
                for m in self.members.values()
            ]
            if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE)
            else [],
        }

    @classmethod
    def from_record(
        cls, group_id: str, record: dict[str, Any] | None, now_ms: int, **options: Any
    ) -> Group:
        """The group a new coordinator loads: STABLE with the stored members (each given
        a full session to heartbeat again) or EMPTY at the stored generation."""
        g = cls(group_id, **options)
        if record is None:
            return g
        g.generation = int(record.get("generation", 0))
        g.protocol_type = record.get("protocol_type")
        members = record.get("members") or []
        if not members:
            return g
        g.protocol = record.get("protocol")
        g.leader = record.get("leader")
        for m in members:
            g.members[m["id"]] = Member(
                m["id"],
                m["client_id"],
                m["client_host"],
                m["session_timeout_ms"],
                m["rebalance_timeout_ms"],
                g.protocol_type or "",
                [(n, bytes.fromhex(md)) for n, md in m["protocols"]],
                m.get("instance"),
                bytes.fromhex(m["assignment"]),
                deadline_ms=now_ms + m["session_timeout_ms"],
            )
        g.state = GroupState.STABLE
        return g

    @classmethod
    def stored_summary(cls, group_id: str, record: dict[str, Any] | None) -> GroupSummary:
        """What ListGroups shows of a group not loaded: the state
        :meth:`from_record` would load it in (STABLE with the stored members, else
        EMPTY), without loading it (no session starts)."""
        record = record or {}
        members = record.get("members") or []
        state = GroupState.STABLE if members else GroupState.EMPTY
        return GroupSummary(group_id, state.value, record.get("protocol_type") or "", "")

    # -- DescribeGroups / ListGroups / OffsetDelete ------------------------------

    def summary(self) -> GroupSummary:
        """The group as DescribeGroups shows it (Kafka's ``GroupMetadata.summary``):
        each member's metadata for the chosen protocol and its assignment only when
        STABLE; the protocol name likewise."""
        stable = self.state is GroupState.STABLE and self.protocol is not None
        protocol = self.protocol if stable else None
        members = tuple(
            MemberSummary(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.metadata_for(protocol) if protocol is not None else b"",
                m.assignment if protocol is not None else b"",
            )
            for m in self.members.values()
        )
        return GroupSummary(
            self.group_id, self.state.value, self.protocol_type or "", protocol or "", members
        )

    def subscribes_to(self, topic: str) -> bool:
        """Whether a member of this consumer group subscribes to ``topic``: what makes
        OffsetDelete answer GROUP_SUBSCRIBED_TO_TOPIC. A member whose subscription
        does not decode counts as subscribed to every topic (Kafka's rule when the
        subscriptions are unknown)."""
        for m in self.members.values():
            chosen = [md for name, md in m.protocols if name == self.protocol] or [
                md for _, md in m.protocols
            ]
            for metadata in chosen:
                topics = subscribed_topics(metadata)
                if topics is None or topic in topics:
                    return True
        return False

    @property
    def uses_consumer_protocol(self) -> bool:
        return self.protocol_type == CONSUMER_PROTOCOL

    # -- JoinGroup ---------------------------------------------------------------

    def join(
        self,
        member_id: str,
        *,
        new_member_id: str,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        now_ms: int,
        group_instance_id: str | None = None,
    ) -> tuple[JoinAnswer | None, Effects]:
        """A JoinGroup: its answer now, or None (parked: answered in a later Effects).
        ``new_member_id``: the id a member joining without one gets."""
        fx = Effects()
        if self.state is GroupState.DEAD:
            return JoinAnswer(member_id, KafkaError.not_coordinator), fx
        if not self._supports(protocol_type, protocols):
            return JoinAnswer(member_id, KafkaError.inconsistent_group_protocol), fx
        known = None if group_instance_id is None else self._static_member(group_instance_id)
        if member_id == "" and known is not None:
            return self._rejoin_static(
                known,
                new_member_id,
                client_id=client_id,
                client_host=client_host,
                session_timeout_ms=session_timeout_ms,
                rebalance_timeout_ms=rebalance_timeout_ms,
                protocols=protocols,
                now_ms=now_ms,
            )
        if member_id == "":
            if len(self.members) + len(self.pending) >= self.max_members:
                return JoinAnswer("", KafkaError.group_max_size_reached), fx
            if require_known_member_id and group_instance_id is None:
                # KIP-394: the id first, so a member that retries does not join twice
                # (a static member is known by its instance id: it needs none)
                self.pending[new_member_id] = now_ms + session_timeout_ms
                return JoinAnswer(new_member_id, KafkaError.member_id_required), fx
            member_id = new_member_id
        elif member_id in self.pending:
            del self.pending[member_id]
        elif member_id not in self.members:
            return JoinAnswer(member_id, KafkaError.unknown_member_id), fx
        elif group_instance_id is not None:
            error = self._instance_error(member_id, group_instance_id)
            if error is not None:
                return JoinAnswer(member_id, error), fx
        m = self.members.get(member_id)
        if m is None:
            m = Member(
                member_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                list(protocols),
                group_instance_id,
            )
            if not self.members:
                self.protocol_type = protocol_type  # the first member sets it (as Kafka's)
            self.members[member_id] = m
            m.awaiting_join = True
            fx.merge(self._prepare_rebalance(now_ms, joining=True))
            return None, fx.merge(self._maybe_complete_join(now_ms))
        changed = m.protocols != list(protocols)
        m.session_timeout_ms = session_timeout_ms
        m.rebalance_timeout_ms = rebalance_timeout_ms
        m.deadline_ms = now_ms + session_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            m.protocols = list(protocols)
            m.awaiting_join = True
            return None, fx.merge(self._maybe_complete_join(now_ms))
        if self.state is GroupState.COMPLETING_REBALANCE and not changed:
            return self._join_answer(m), fx  # a retried join of this generation
        if self.state is GroupState.STABLE and not changed and member_id != self.leader:
            return self._join_answer(m), fx
        # the leader rejoins, a subscription changed, or a member rejoins mid-sync
        m.protocols = list(protocols)
        m.awaiting_join = True
        fx.merge(self._prepare_rebalance(now_ms))
        return None, fx.merge(self._maybe_complete_join(now_ms))

    def _static_member(self, instance: str) -> str | None:
        """The id of the member of group instance id ``instance`` (None: no member)."""
        for m in self.members.values():
            if m.group_instance_id == instance:
                return m.member_id
        return None

    def _instance_error(self, member_id: str, instance: str | None) -> KafkaError | None:
        """Kafka's ``validateMember`` for a call naming ``instance``: UNKNOWN_MEMBER_ID
        when no member has it, FENCED_INSTANCE_ID when another member id has it."""
        if instance is None:
            return None
        known = self._static_member(instance)
        if known is None:
            return KafkaError.unknown_member_id
        if known != member_id:
            return KafkaError.fenced_instance_id
        return None

    def _rejoin_static(
        self,
        old_id: str,
        new_id: str,
        *,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocols: list[tuple[str, bytes]],
        now_ms: int,
    ) -> tuple[JoinAnswer | None, Effects]:
        """A static member joins again without its member id: it takes over the member
        of its instance id under ``new_id`` (the old id fenced), then, in a STABLE
        group whose protocol and its subscription stay, waits only for the group's
        record to be stored (:meth:`stored` answers it); otherwise rebalances."""
        fx = Effects()
        m = self.members.pop(old_id)
        if m.awaiting_join:
            fx.joins.append(JoinAnswer(old_id, KafkaError.fenced_instance_id))
        if m.awaiting_sync:
            fx.syncs.append(SyncAnswer(old_id, KafkaError.fenced_instance_id))
        m.awaiting_join = m.awaiting_sync = False
        before = dict(m.protocols).get(self.protocol or "")
        m.member_id = new_id
        self.members[new_id] = m  # last: the coordinator parks the join under it
        if self.leader == old_id:
            self.leader = new_id
        m.client_id, m.client_host = client_id, client_host
        m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        m.protocols = list(protocols)
        m.deadline_ms = now_ms + session_timeout_ms
        m.awaiting_join = True
        unchanged = (
            self.protocol is not None
            and dict(m.protocols).get(self.protocol) == before
            and self._select_protocol() == self.protocol
        )
        if self.state is GroupState.STABLE and unchanged:
            self.static_stores.append(new_id)
            fx.store = self.generation
            return None, fx
        fx.merge(self._prepare_rebalance(now_ms))
        return None, fx.merge(self._maybe_complete_join(now_ms))

    def _supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        return bool(self._candidates() & {name for name, _ in protocols})

    def _candidates(self) -> set[str]:
        names: set[str] | None = None
        for m in self.members.values():
            mine = {n for n, _ in m.protocols}
            names = mine if names is None else names & mine
        return names or set()

    def _join_answer(self, m: Member) -> JoinAnswer:
        members: tuple[tuple[str, str | None, bytes], ...] = ()
        if m.member_id == self.leader and self.protocol is not None:
            members = tuple(
                (x.member_id, x.group_instance_id, x.metadata_for(self.protocol))
                for x in self.members.values()
            )
        return JoinAnswer(
            m.member_id,
            KafkaError.none,
            self.generation,
            self.protocol_type,
            self.protocol,
            self.leader or "",
            members,
        )

    def _prepare_rebalance(self, now_ms: int, joining: bool = False) -> Effects:
        """-> PREPARING_REBALANCE (a parked sync of the generation ending is answered
        REBALANCE_IN_PROGRESS)."""
        fx = Effects()
        if self.state is GroupState.COMPLETING_REBALANCE:
            fx.syncs.extend(self._reset_syncs(KafkaError.rebalance_in_progress))
        if self.state is GroupState.PREPARING_REBALANCE:
            if self.initial_join_until_ms and joining:
                # another member of a starting group: hold a little longer, within bounds
                self.initial_join_until_ms = min(
                    now_ms + self.initial_delay_ms, self.rebalance_deadline_ms
                )
            return fx
        # static members waiting for a store of a STABLE group rejoin in this rebalance
        self.static_stores.clear()
        timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
        self.rebalance_deadline_ms = now_ms + timeout
        if self.state is GroupState.EMPTY and self.initial_delay_ms > 0:
            self.initial_join_until_ms = min(
                now_ms + self.initial_delay_ms, self.rebalance_deadline_ms
            )
        self.state = GroupState.PREPARING_REBALANCE
        self.storing = None
        return fx

    def _reset_syncs(self, error: KafkaError) -> list[SyncAnswer]:
        answers = []
        for m in self.members.values():
            if m.awaiting_sync:
                m.awaiting_sync = False
                answers.append(SyncAnswer(m.member_id, error))
        return answers

    def _maybe_complete_join(self, now_ms: int) -> Effects:
        if self.state is not GroupState.PREPARING_REBALANCE:
            return Effects()
        if self.initial_join_until_ms:
            if now_ms < self.initial_join_until_ms:
                return Effects()
            self.initial_join_until_ms = 0
        all_joined = not self.pending and all(m.awaiting_join for m in self.members.values())
        if all_joined or now_ms >= self.rebalance_deadline_ms:
            return self._complete_join(now_ms)
        return Effects()

    def _complete_join(self, now_ms: int) -> Effects:
        fx = Effects(rebalances=1)
        for mid in [mid for mid, m in self.members.items() if not m.awaiting_join]:
            del self.members[mid]  # did not rejoin within the rebalance timeout
        self.pending.clear()
        self.generation += 1
        if not self.members:
            self.state = GroupState.EMPTY
            self.protocol = None
            self.leader = None
            fx.store = self.generation
            return fx
        first = next(iter(self.members.values()))
        self.protocol_type = first.protocol_type
        self.protocol = self._select_protocol()
        if self.leader not in self.members:
            self.leader = first.member_id
        self.state = GroupState.COMPLETING_REBALANCE
        for m in self.members.values():
            m.awaiting_join = False
            m.deadline_ms = now_ms + m.session_timeout_ms
            fx.joins.append(self._join_answer(m))
        return fx

    def _select_protocol(self) -> str:
        """The protocol every member supports that most members prefer (Kafka's vote);
        a tie goes to the name first in order."""
        candidates = self._candidates()
        votes: dict[str, int] = dict.fromkeys(sorted(candidates), 0)
        for m in self.members.values():
            for name, _ in m.protocols:
                if name in candidates:
                    votes[name] += 1
                    break
        return max(votes, key=lambda n: votes[n])

    # -- SyncGroup ---------------------------------------------------------------

    def sync(
        self,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes],
        now_ms: int,
        instance: str | None = None,
    ) -> tuple[SyncAnswer | None, Effects]:
        """A SyncGroup: its answer now, or None (parked until the leader's assignments
        are stored). ``assignments``: the leader's (members it leaves out get none);
        ``instance``: the caller's group instance id (static membership)."""
        fx = Effects()
        error = self._member_error(member_id, generation, instance)
        if error is not None:
            return SyncAnswer(member_id, error), fx
        m = self.members[member_id]
        m.deadline_ms = now_ms + m.session_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return SyncAnswer(member_id, KafkaError.rebalance_in_progress), fx
        if self.state is GroupState.STABLE:
            return self._sync_answer(m), fx
        m.awaiting_sync = True
        if member_id == self.leader and self.storing is None:
            for x in self.members.values():
                x.assignment = assignments.get(x.member_id, b"")
            self.storing = self.generation
            fx.store = self.generation
        return None, fx

    def stored(self, generation: int, error: KafkaError, now_ms: int) -> Effects:
        """The leader's assignments of ``generation`` are durable (``error`` none) or
        could not be written: parked syncs get their assignment, or ``error`` (and the
        group rebalances, as Kafka's ``resetAndPropagateAssignmentError``). In a STABLE
        group the store was a static member's rejoin (the only store made there):
        its join is answered (the current generation), or gets ``error``."""
        fx = Effects()
        if self.state is GroupState.STABLE and self.static_stores:
            m = self.members.get(self.static_stores.popleft())
            if m is not None and m.awaiting_join:
                m.awaiting_join = False
                ok = error is KafkaError.none
                fx.joins.append(self._join_answer(m) if ok else JoinAnswer(m.member_id, error))
            return fx
        if self.state is not GroupState.COMPLETING_REBALANCE or self.storing != generation:
            return fx  # a rebalance began meanwhile: its answers went out already
        self.storing = None
        if error is not KafkaError.none:
            for m in self.members.values():
                m.assignment = b""
            fx.syncs.extend(self._reset_syncs(error))
            self.state = GroupState.PREPARING_REBALANCE
            timeout = max((m.rebalance_timeout_ms for m in self.members.values()), default=0)
            self.rebalance_deadline_ms = now_ms + timeout
            return fx
        self.state = GroupState.STABLE
        for m in self.members.values():
            if m.awaiting_sync:
                m.awaiting_sync = False
                fx.syncs.append(self._sync_answer(m))
        return fx

    def _sync_answer(self, m: Member) -> SyncAnswer:
        return SyncAnswer(
            m.member_id, KafkaError.none, m.assignment, self.protocol_type, self.protocol
        )

    def _member_error(
        self, member_id: str, generation: int, instance: str | None = None
    ) -> KafkaError | None:
        if self.state is GroupState.DEAD:
            return KafkaError.not_coordinator
        error = self._instance_error(member_id, instance)
        if error is not None:
            return error
        if member_id not in self.members:
            return KafkaError.unknown_member_id
        if generation != self.generation:
            return KafkaError.illegal_generation
        return None

    # -- Heartbeat, LeaveGroup, OffsetCommit ------------------------------------

    def heartbeat(
        self, member_id: str, generation: int, now_ms: int, instance: str | None = None
    ) -> KafkaError:
        error = self._member_error(member_id, generation, instance)
        if error is not None:
            return error
        m = self.members[member_id]
        m.deadline_ms = now_ms + m.session_timeout_ms
        if self.state is GroupState.PREPARING_REBALANCE:
            return KafkaError.rebalance_in_progress
        return KafkaError.none

    def leave(
        self, member_id: str, now_ms: int, instance: str | None = None
    ) -> tuple[KafkaError, Effects]:
        """LeaveGroup of ``member_id``, or (v3+) of the member of ``instance``
        (``member_id`` "" or that member's: FENCED_INSTANCE_ID if another's)."""
        if self.state is GroupState.DEAD:
            return KafkaError.not_coordinator, Effects()
        if instance is not None:
            known = self._static_member(instance)
            if known is None:
                return KafkaError.unknown_member_id, Effects()
            if member_id not in ("", known):
                return KafkaError.fenced_instance_id, Effects()
            member_id = known
        if member_id in self.pending:
            del self.pending[member_id]
            return KafkaError.none, self._maybe_complete_join(now_ms)
        if member_id not in self.members:
            return KafkaError.unknown_member_id, Effects()
        return KafkaError.none, self._remove(member_id, now_ms)

    def commit_error(
        self, member_id: str, generation: int, now_ms: int, instance: str | None = None
    ) -> KafkaError | None:
        """Why an OffsetCommit of this member and generation is refused (None: it may
        commit). Kafka's rules: a commit with no generation (-1) and no member id is a
        commit of a group that does not use Kafka's membership, allowed while the
        group is EMPTY; any other must come from a member of the current generation,
        and not while the generation's assignment is being handed out."""
        if self.state is GroupState.DEAD:
            return KafkaError.not_coordinator
        if generation < 0 and member_id == "":
            return None if self.state is GroupState.EMPTY else KafkaError.unknown_member_id
        error = self._member_error(member_id, generation, instance)
        if error is not None:
            return error
        if self.state is GroupState.COMPLETING_REBALANCE:
            return KafkaError.rebalance_in_progress
        m = self.members[member_id]
        m.deadline_ms = now_ms + m.session_timeout_ms  # a commit is a sign of life
        return None

    def _remove(self, member_id: str, now_ms: int) -> Effects:
        m = self.members.pop(member_id)
        fx = Effects()
        if m.awaiting_join:
            fx.joins.append(JoinAnswer(member_id, KafkaError.unknown_member_id))
        if m.awaiting_sync:
            fx.syncs.append(SyncAnswer(member_id, KafkaError.unknown_member_id))
        if self.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            fx.merge(self._prepare_rebalance(now_ms))
        return fx.merge(self._maybe_complete_join(now_ms))

    # -- timers and unloading ----------------------------------------------------

    def tick(self, now_ms: int) -> Effects:
        """Expire sessions (members parked in a join or sync are alive), pending member
        ids, the first rebalance's hold and the rebalance deadline."""
        fx = Effects()
        if self.state is GroupState.DEAD:
            return fx
        for mid, deadline in list(self.pending.items()):
            if now_ms >= deadline:
                del self.pending[mid]
        for m in list(self.members.values()):
            if m.awaiting_join or m.awaiting_sync:
                m.deadline_ms = max(m.deadline_ms, now_ms + m.session_timeout_ms)
            elif now_ms >= m.deadline_ms and m.member_id in self.members:
                fx.merge(self._remove(m.member_id, now_ms))
        return fx.merge(self._maybe_complete_join(now_ms))

    def unload(self) -> Effects:
        """-> DEAD: every parked request is answered NOT_COORDINATOR (the client finds
        the new coordinator and rejoins there)."""
        fx = Effects()
        for m in self.members.values():
            if m.awaiting_join:
                fx.joins.append(JoinAnswer(m.member_id, KafkaError.not_coordinator))
            if m.awaiting_sync:
                fx.syncs.append(SyncAnswer(m.member_id, KafkaError.not_coordinator))
            m.awaiting_join = m.awaiting_sync = False
        self.state = GroupState.DEAD
        return fx

    @property
    def is_idle(self) -> bool:
        """No member, nothing pending: the group holds only committed offsets."""
        return self.state is GroupState.EMPTY and not self.pending


_read_subscription = entity_reader(ConsumerProtocolSubscription)


def subscribed_topics(metadata: bytes) -> frozenset[str] | None:
    """The topics of a consumer's JoinGroup metadata (a ConsumerProtocolSubscription:
    an int16 version, then the topics, in every version); None when it does not
    decode."""
    if len(metadata) < 2:
        return None
    try:
        subscription, _ = _read_subscription(metadata, 2)
    except Exception:  # kio's decoding errors: bytes no consumer wrote
        return None
    return frozenset(subscription.topics)
