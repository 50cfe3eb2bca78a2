"""The group coordinator of one node: Kafka's ``GroupCoordinator`` over raftlog's log.

A group's coordinator is the leader of its ``__consumer_offsets`` partition
(:func:`raftlog.coordinator.group_stm.partition_for`). On that leader this shell
runs each group's :class:`~raftlog.kafka.groups.membership.Group` (membership lives
in memory, as in Kafka), parks the JoinGroup and SyncGroup requests the state
machine answers later, ticks its timers (sessions, rebalance deadlines) and writes
through the partition's :class:`~raftlog.coordinator.group_stm.GroupStm`:

- an OffsetCommit is answered once its offsets are committed at acks=all (quorum)
  and applied;
- a completed rebalance's group metadata (members, assignments, generation) is
  written before the SyncGroups are answered, so a new coordinator resumes the same
  generation.

Leadership: groups are loaded per ``(partition, term)``. The first request after
this node became the partition's leader (once the leader has applied everything
its predecessors committed: the partition's read barrier) loads the groups from
group_stm's state, which every replica applies from the log; when the leadership
(or its term) changes, the loaded groups are dropped and parked requests answered
NOT_COORDINATOR, so clients find the new coordinator. Writes carry the term the
groups were loaded in: a coordinator that lost the leadership appends nothing.

Limits (:class:`GroupLimits`, each with a metric): groups with members per node,
members per group, a member's subscription bytes, its assignment bytes, a committed
offset's metadata bytes, session timeouts.

A node of several processes (``--shards`` > 1) coordinates the groups whose
``__consumer_offsets`` partition its first process (the one serving Kafka) hosts;
for the others FindCoordinator and the group calls answer COORDINATOR_NOT_AVAILABLE
naming the cause (forwarding group calls to the owning process is not built yet).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import uuid
from typing import Any

from kio.schema.errors import ErrorCode as KafkaError

from raftlog.coordinator.group_stm import CONSUMER_OFFSETS_TOPIC, GroupStm, partition_for
from raftlog.kafka.groups.limits import GroupLimits
from raftlog.kafka.groups.membership import (
    Effects,
    Group,
    GroupState,
    GroupSummary,
    JoinAnswer,
    SyncAnswer,
)
from raftlog.raft.errors import NotLeaderError, RaftError, TermMismatchError
from raftlog.rpc.server import RequestError

log = logging.getLogger("raftlog.kafka.groups")

#: How often the coordinator expires sessions and checks its leaderships.
TICK_S = 0.1


class GroupError(Exception):
    """A request the coordinator refuses as a whole, with Kafka's ``code``."""

    def __init__(self, code: KafkaError, message: str = "") -> None:
        super().__init__(message or code.name)
        self.code = code


@dataclasses.dataclass(slots=True)
class _Loaded:
    """The groups of one ``__consumer_offsets`` partition, loaded in ``term``."""

    term: int
    stm: GroupStm
    groups: dict[str, Group] = dataclasses.field(default_factory=dict)
    stores: dict[str, int] = dataclasses.field(default_factory=dict)  # in flight per group


class GroupCoordinator:
    """The coordinator of the groups whose partition this node's process leads."""

    def __init__(self, node: Any, limits: GroupLimits | None = None) -> None:
        """``node``: the :class:`raftlog.node.process.Node` (None: a listener tested
        without one, which serves no group)."""
        self.node = node
        self.limits = limits or GroupLimits()
        # Any, as node is: the node's NodeMetrics (None without a node, which loads no group)
        self.metrics: Any = getattr(node, "metrics", None)
        self._loaded: dict[int, _Loaded] = {}
        self._joins: dict[tuple[str, str], asyncio.Future[JoinAnswer]] = {}
        self._syncs: dict[tuple[str, str], asyncio.Future[SyncAnswer]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ticker: asyncio.Task[None] | None = None

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        if self._ticker is None and hasattr(self.node, "controller_stm"):
            self._ticker = asyncio.get_running_loop().create_task(self._tick_loop())

    async def stop(self) -> None:
        tasks = [t for t in (self._ticker, *self._tasks) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._ticker = None
        for p in list(self._loaded):
            self._unload(p)

    @staticmethod
    def now_ms() -> int:
        return int(asyncio.get_running_loop().time() * 1000)

    async def _tick_loop(self) -> None:
        while True:
            await asyncio.sleep(TICK_S)
            try:
                self.tick()
            except Exception:
                log.exception("group coordinator tick failed")

    def tick(self) -> None:
        """Drop the groups of partitions this node no longer leads (in the term it
        loaded them), then run every group's timers."""
        now = self.now_ms()
        for p, loaded in list(self._loaded.items()):
            rep = self._local_replica(p)
            if rep is None or not rep.consensus.is_leader or rep.consensus.term != loaded.term:
                self._unload(p)
                continue
            for gid, group in list(loaded.groups.items()):
                self._dispatch(loaded, gid, group.tick(now))
                if group.is_idle and not loaded.stores.get(gid):
                    del loaded.groups[gid]  # its state is in group_stm: loaded again on use
        self._gauges()

    def _gauges(self) -> None:
        groups = [g for loaded in self._loaded.values() for g in loaded.groups.values()]
        self.metrics.kafka_groups.set(sum(1 for g in groups if not g.is_idle))
        self.metrics.kafka_group_members.set(sum(len(g.members) for g in groups))
        self.metrics.kafka_group_metadata_bytes.set(
            sum(
                len(m.assignment) + sum(len(md) for _, md in m.protocols)
                for g in groups
                for m in g.members.values()
            )
        )

    # -- placement and loading ---------------------------------------------------

    def partition_of(self, group_id: str) -> int:
        """The group's ``__consumer_offsets`` partition; COORDINATOR_NOT_AVAILABLE
        while the topic does not exist yet."""
        t = self.node.controller_stm.topics.get(CONSUMER_OFFSETS_TOPIC)
        if t is None:
            raise GroupError(
                KafkaError.coordinator_not_available,
                f"{CONSUMER_OFFSETS_TOPIC} is being created",
            )
        return partition_for(group_id, len(t.partitions))

    def refuse_other_shard(self, partition: int) -> None:
        """COORDINATOR_NOT_AVAILABLE naming the cause when ``partition``'s replica lives in
        another process of this node (``--shards`` > 1): group membership is kept by the
        process serving Kafka, which reaches only its own partitions' group_stm."""
        t = self.node.controller_stm.topics.get(CONSUMER_OFFSETS_TOPIC)
        owns = getattr(self.node, "owns", None)
        if t is None or owns is None or partition >= len(t.partitions):
            return
        if not owns(t.partitions[partition].group_id):
            raise GroupError(
                KafkaError.coordinator_not_available,
                f"{CONSUMER_OFFSETS_TOPIC}/{partition} is hosted by another process of node "
                f"{self.node.node_id} (--shards {self.node.config.shards}): consumer groups "
                "are coordinated by the process serving Kafka; run nodes that coordinate "
                "groups with --shards 1 (docs/kafka.md)",
            )

    def _local_replica(self, partition: int) -> Any:
        t = self.node.controller_stm.topics.get(CONSUMER_OFFSETS_TOPIC)
        if t is None or partition >= len(t.partitions):
            return None
        rep = self.node.partitions.get(t.partitions[partition].group_id)
        return rep if rep is not None and rep.group_stm is not None else None

    def _acquire(self, group_id: str) -> _Loaded:
        """The loaded groups of ``group_id``'s partition: NOT_COORDINATOR unless this
        node leads it, COORDINATOR_LOAD_IN_PROGRESS until the leader has applied what
        earlier terms committed; (re)loaded on the first call of a term."""
        self.validate_group_id(group_id)
        p = self.partition_of(group_id)
        self.refuse_other_shard(p)
        return self._acquire_partition(p)

    def _acquire_partition(self, p: int) -> _Loaded:
        """:meth:`_acquire` of ``__consumer_offsets`` partition ``p``."""
        rep = self._local_replica(p)
        if rep is None or not rep.consensus.is_leader:
            raise GroupError(KafkaError.not_coordinator)
        try:
            rep.check_readable(self.node.config.peers)
        except RequestError as exc:
            raise GroupError(KafkaError.coordinator_load_in_progress, str(exc)) from exc
        term = rep.consensus.term
        loaded = self._loaded.get(p)
        if loaded is None or loaded.term != term:
            if loaded is not None:
                self._unload(p)
            loaded = self._loaded[p] = _Loaded(term, rep.group_stm)
            self.start()
            log.info("coordinating the groups of %s/%d in term %d", CONSUMER_OFFSETS_TOPIC, p, term)
        return loaded

    def validate_group_id(self, group_id: str) -> None:
        if not group_id:
            raise GroupError(KafkaError.invalid_group_id, "group_id: expected a non-empty id")
        if len(group_id.encode()) > self.limits.max_group_id_bytes:
            self._refused("group_id_bytes")
            raise GroupError(
                KafkaError.invalid_group_id,
                f"group_id: longer than {self.limits.max_group_id_bytes} bytes",
            )

    def _group(self, loaded: _Loaded, group_id: str, create: bool) -> Group | None:
        """The group, loaded from group_stm's state on first use; a new one if ``create``
        (GroupError when the node's group limit is reached)."""
        group = loaded.groups.get(group_id)
        if group is not None:
            return group
        stored = loaded.stm.state.groups.get(group_id)
        if stored is None and not create:
            return None
        total = sum(1 for x in self._loaded.values() for g in x.groups.values() if not g.is_idle)
        if total >= self.limits.max_groups:
            self._refused("groups")
            raise GroupError(
                KafkaError.coordinator_not_available,
                f"node {self.node.node_id} coordinates {total} groups, its limit "
                "(--kafka-max-groups)",
            )
        group = Group.from_record(
            group_id,
            None if stored is None else stored.metadata,
            self.now_ms(),
            initial_delay_ms=self.limits.initial_rebalance_delay_ms,
            max_members=self.limits.max_members,
        )
        loaded.groups[group_id] = group
        return group

    def _unload(self, partition: int) -> None:
        loaded = self._loaded.pop(partition, None)
        if loaded is None:
            return
        for gid, group in loaded.groups.items():
            self._dispatch(loaded, gid, group.unload())
        log.info("no longer coordinating the groups of %s/%d", CONSUMER_OFFSETS_TOPIC, partition)

    def _refused(self, limit: str) -> None:
        self.metrics.kafka_group_refusals.labels(limit).inc()

    # -- effects -----------------------------------------------------------------

    def _dispatch(self, loaded: _Loaded, group_id: str, fx: Effects) -> None:
        for answer in fx.joins:
            fut = self._joins.pop((group_id, answer.member_id), None)
            if fut is not None and not fut.done():
                fut.set_result(answer)
        for sync in fx.syncs:
            sfut = self._syncs.pop((group_id, sync.member_id), None)
            if sfut is not None and not sfut.done():
                sfut.set_result(sync)
        if fx.rebalances:
            self.metrics.kafka_group_rebalances.inc(fx.rebalances)
        if fx.store is not None:
            group = loaded.groups[group_id]
            command = {"op": "group", "group": group_id, **group.record()}
            loaded.stores[group_id] = loaded.stores.get(group_id, 0) + 1
            # replicate() is called before the task's first await: stores keep their order
            self._spawn(self._store(loaded, group_id, fx.store, command))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _store(
        self, loaded: _Loaded, group_id: str, generation: int, command: dict[str, Any]
    ) -> None:
        try:
            code = await self.write(loaded, command)
        finally:
            loaded.stores[group_id] -= 1
        group = loaded.groups.get(group_id)
        if group is not None:
            self._dispatch(loaded, group_id, group.stored(generation, code, self.now_ms()))

    async def write(self, loaded: _Loaded, command: dict[str, Any]) -> KafkaError:
        """Write ``command`` through group_stm in the term the groups were loaded in; the
        Kafka code of the outcome (Kafka's mapping of a ``__consumer_offsets`` append's
        errors for a coordinator)."""
        try:
            result = await loaded.stm.execute(command, expected_term=loaded.term)
        except (NotLeaderError, TermMismatchError):
            return KafkaError.not_coordinator
        except (TimeoutError, RaftError, OSError) as exc:
            log.warning("a write to %s failed: %r", CONSUMER_OFFSETS_TOPIC, exc)
            return KafkaError.coordinator_not_available
        except Exception:  # a full disk, a bug: the client retries, the node serves on
            log.exception("a write to %s failed", CONSUMER_OFFSETS_TOPIC)
            return KafkaError.coordinator_not_available
        if result.get("status") != "ok":
            log.warning("%s refused a command: %s", CONSUMER_OFFSETS_TOPIC, result.get("error"))
            return KafkaError.invalid_commit_offset_size
        return KafkaError.none

    async def _write_offsets(
        self, loaded: _Loaded, group_id: str, op: str, rows: list[list[Any]]
    ) -> KafkaError:
        """:meth:`write` of an offsets command (``commit``, ``delete_offsets``), counted
        as in flight for the group meanwhile (the ticker keeps the group loaded)."""
        loaded.stores[group_id] = loaded.stores.get(group_id, 0) + 1
        try:
            return await self.write(loaded, {"op": op, "group": group_id, "offsets": rows})
        finally:
            loaded.stores[group_id] -= 1

    # -- the group APIs (plain values in and out; handlers.py speaks Kafka) ------

    async def join(
        self,
        group_id: str,
        member_id: str,
        *,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        group_instance_id: str | None,
    ) -> JoinAnswer:
        lim = self.limits
        if not lim.min_session_timeout_ms <= session_timeout_ms <= lim.max_session_timeout_ms:
            return JoinAnswer(member_id, KafkaError.invalid_session_timeout)
        size = sum(len(md) for _, md in protocols) + sum(len(n) for n, _ in protocols)
        if size > lim.max_member_metadata_bytes:
            self._refused("member_metadata_bytes")
            log.warning(
                "group %r: a JoinGroup's protocol metadata of %d bytes exceeds the limit "
                "of %d (--kafka-max-group-metadata-bytes)",
                group_id,
                size,
                lim.max_member_metadata_bytes,
            )
            return JoinAnswer(member_id, KafkaError.invalid_request)
        rebalance_timeout_ms = min(max(rebalance_timeout_ms, 0), lim.max_session_timeout_ms)
        loaded = self._acquire(group_id)
        group = self._group(loaded, group_id, create=True)
        assert group is not None
        members_before = len(group.members) + len(group.pending)
        answer, fx = group.join(
            member_id,
            new_member_id=f"{client_id or 'member'}-{uuid.uuid4()}",
            client_id=client_id,
            client_host=client_host,
            session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            require_known_member_id=require_known_member_id,
            now_ms=self.now_ms(),
            group_instance_id=group_instance_id,
        )
        if answer is not None and answer.error is KafkaError.group_max_size_reached:
            self._refused("members")
            log.warning(
                "group %r has %d members, its limit (--kafka-max-group-members)",
                group_id,
                members_before,
            )
        waiting = None
        if answer is None:
            # the member's id: the one it sent, or the one the state machine gave it
            mid = member_id if member_id else _newest(group)
            waiting = self._park(self._joins, (group_id, mid))
        self._dispatch(loaded, group_id, fx)
        if waiting is None:
            assert answer is not None
            return answer
        return await self._wait(waiting, rebalance_timeout_ms, JoinAnswer(mid, _RETRY))

    async def sync(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        assignments: dict[str, bytes],
        instance: str | None = None,
    ) -> SyncAnswer:
        for mid, data in assignments.items():
            if len(data) > self.limits.max_assignment_bytes:
                self._refused("assignment_bytes")
                log.warning(
                    "group %r: the assignment of member %r is %d bytes, above the limit of "
                    "%d (--kafka-max-group-metadata-bytes)",
                    group_id,
                    mid,
                    len(data),
                    self.limits.max_assignment_bytes,
                )
                return SyncAnswer(member_id, KafkaError.invalid_request)
        loaded = self._acquire(group_id)
        group = self._group(loaded, group_id, create=False)
        if group is None:
            return SyncAnswer(member_id, KafkaError.unknown_member_id)
        answer, fx = group.sync(member_id, generation, assignments, self.now_ms(), instance)
        waiting = None if answer is not None else self._park(self._syncs, (group_id, member_id))
        self._dispatch(loaded, group_id, fx)
        if waiting is None:
            assert answer is not None
            return answer
        timeout = max((m.rebalance_timeout_ms for m in group.members.values()), default=0)
        return await self._wait(waiting, timeout, SyncAnswer(member_id, _RETRY))

    def heartbeat(
        self, group_id: str, member_id: str, generation: int, instance: str | None = None
    ) -> KafkaError:
        loaded = self._acquire(group_id)
        group = self._group(loaded, group_id, create=False)
        if group is None:
            return KafkaError.unknown_member_id
        return group.heartbeat(member_id, generation, self.now_ms(), instance)

    def leave(self, group_id: str, members: list[tuple[str, str | None]]) -> list[KafkaError]:
        """LeaveGroup of each (member id, group instance id): a code each, in order."""
        loaded = self._acquire(group_id)
        group = self._group(loaded, group_id, create=False)
        if group is None:
            return [KafkaError.unknown_member_id for _ in members]
        errors = []
        for mid, instance in members:
            error, fx = group.leave(mid, self.now_ms(), instance)
            self._dispatch(loaded, group_id, fx)
            errors.append(error)
        return errors

    async def commit(
        self,
        group_id: str,
        member_id: str,
        generation: int,
        offsets: list[tuple[str, int, int, int, str | None]],
        instance: str | None = None,
    ) -> list[KafkaError]:
        """Commit ``offsets`` (topic, partition, offset, leader epoch, metadata): one
        code per row, in order. Rows of an unknown partition or with metadata over the
        limit are refused alone; the others are written together, at acks=all."""
        codes: list[KafkaError] = [KafkaError.none] * len(offsets)
        topics = self.node.controller_stm.topics
        for i, (topic, partition, _, _, metadata) in enumerate(offsets):
            t = topics.get(topic)
            if t is None or not 0 <= partition < len(t.partitions):
                codes[i] = KafkaError.unknown_topic_or_partition
            elif metadata is not None and (
                len(metadata.encode()) > self.limits.max_offset_metadata_bytes
            ):
                self._refused("offset_metadata_bytes")
                codes[i] = KafkaError.offset_metadata_too_large
        loaded = self._acquire(group_id)
        group = self._group(loaded, group_id, create=generation < 0 and member_id == "")
        if group is None:
            return [KafkaError.illegal_generation] * len(offsets)
        error = group.commit_error(member_id, generation, self.now_ms(), instance)
        if error is not None:
            return [error] * len(offsets)
        rows = [
            [t, p, o, e, m or ""]
            for (t, p, o, e, m), c in zip(offsets, codes, strict=True)
            if c is KafkaError.none
        ]
        if rows:
            code = await self._write_offsets(loaded, group_id, "commit", rows)
            if code is KafkaError.none:
                self.metrics.kafka_offset_commits.inc(len(rows))
            codes = [code if c is KafkaError.none else c for c in codes]
        return codes

    def fetch_offsets(
        self, group_id: str, wanted: list[tuple[str, int]] | None
    ) -> list[tuple[str, int, int, int, str]]:
        """(topic, partition, offset, leader epoch, metadata) of ``wanted`` (None: every
        partition the group committed); -1 and "" where nothing is committed."""
        loaded = self._acquire(group_id)
        stored = loaded.stm.state.groups.get(group_id)
        offsets = {} if stored is None else stored.offsets
        keys = sorted(offsets) if wanted is None else wanted
        out = []
        for topic, partition in keys:
            c = offsets.get((topic, partition))
            if c is None:
                out.append((topic, partition, -1, -1, ""))
            else:
                out.append((topic, partition, c.offset, c.leader_epoch, c.metadata))
        return out

    # -- the admin APIs: ListGroups, DescribeGroups, DeleteGroups, OffsetDelete ------

    def list_groups(self) -> list[GroupSummary]:
        """Every group of the ``__consumer_offsets`` partitions this node's process
        leads (ListGroups is per broker, as in Kafka: a client asks every node), as
        :meth:`Group.summary` shows them without members; a loaded group in its
        current state, another in the state it would load in. Deleted groups are not
        listed. GroupError COORDINATOR_LOAD_IN_PROGRESS while a led partition has not
        applied what earlier terms committed (the client asks again)."""
        t = self.node.controller_stm.topics.get(CONSUMER_OFFSETS_TOPIC)
        out: list[GroupSummary] = []
        for p in range(0 if t is None else len(t.partitions)):
            rep = self._local_replica(p)
            if rep is None or not rep.consensus.is_leader:
                continue
            try:
                loaded = self._acquire_partition(p)
            except GroupError as exc:
                if exc.code is KafkaError.not_coordinator:
                    continue  # the leadership moved since: the new leader lists them
                raise
            seen = set()
            for gid, group in loaded.groups.items():
                seen.add(gid)
                if group.state is not GroupState.DEAD:
                    out.append(dataclasses.replace(group.summary(), members=()))
            for gid, stored in loaded.stm.state.groups.items():
                if gid not in seen:
                    out.append(Group.stored_summary(gid, stored.metadata))
        return sorted(out, key=lambda g: g.group_id)

    def describe(self, group_id: str) -> GroupSummary | None:
        """The group as DescribeGroups shows it (loaded from group_stm, as any call
        to its coordinator loads it); None when the group does not exist (Kafka's
        "Dead" group)."""
        loaded = self._acquire(group_id)
        group = self._group(loaded, group_id, create=False)
        if group is None or group.state is GroupState.DEAD:
            return None
        return group.summary()

    async def delete_group(self, group_id: str) -> KafkaError:
        """DeleteGroups of one group: GROUP_ID_NOT_FOUND when it does not exist,
        NON_EMPTY_GROUP unless it is Empty (Kafka's check);
        otherwise its metadata and every committed offset are deleted in
        ``__consumer_offsets`` (at acks=all) and the code of that write is returned.

        While the write is in flight the group is DEAD in memory, so a JoinGroup or
        OffsetCommit that arrives meanwhile is refused (NOT_COORDINATOR: the client
        asks again and finds the group gone) instead of being lost in the deletion;
        after it the group is forgotten here (a failed write: loaded again from
        group_stm, which still holds it)."""
        loaded = self._acquire(group_id)
        group = self._group(loaded, group_id, create=False)
        if group is None or group.state is GroupState.DEAD:
            # DEAD: another DeleteGroups of it is being written
            return KafkaError.group_id_not_found
        if group.state is not GroupState.EMPTY:
            return KafkaError.non_empty_group
        # Kafka's check is the state: member ids handed out (MEMBER_ID_REQUIRED) and
        # not joined with yet go with the group (a join with one: UNKNOWN_MEMBER_ID)
        group.pending.clear()
        self._dispatch(loaded, group_id, group.unload())  # idle: nothing parked
        try:
            return await self.write(loaded, {"op": "delete_group", "group": group_id})
        finally:
            if loaded.groups.get(group_id) is group:
                del loaded.groups[group_id]

    async def delete_offsets(
        self, group_id: str, partitions: list[tuple[str, int]]
    ) -> list[KafkaError]:
        """OffsetDelete: one code per (topic, partition), in order. GroupError
        GROUP_ID_NOT_FOUND when the group does not exist, NON_EMPTY_GROUP when it has
        members and is not a consumer group; in a consumer group with members a
        partition of a subscribed topic gets GROUP_SUBSCRIBED_TO_TOPIC; a partition of
        a topic that does not exist UNKNOWN_TOPIC_OR_PARTITION; the others are deleted
        (one write at acks=all; a partition without a committed offset is no error,
        as in Kafka)."""
        loaded = self._acquire(group_id)
        group = self._group(loaded, group_id, create=False)
        if group is None or group.state is GroupState.DEAD:
            raise GroupError(KafkaError.group_id_not_found, f"group {group_id!r} does not exist")
        members = group.state is not GroupState.EMPTY
        if members and not group.uses_consumer_protocol:
            raise GroupError(
                KafkaError.non_empty_group,
                f"group {group_id!r} has members and is not a consumer group",
            )
        topics = self.node.controller_stm.topics
        codes: list[KafkaError] = []
        for topic, partition in partitions:
            t = topics.get(topic)
            if t is None or not 0 <= partition < len(t.partitions):
                codes.append(KafkaError.unknown_topic_or_partition)
            elif members and group.subscribes_to(topic):
                codes.append(KafkaError.group_subscribed_to_topic)
            else:
                codes.append(KafkaError.none)
        rows = [[t, p] for (t, p), c in zip(partitions, codes, strict=True) if c is KafkaError.none]
        if rows:
            code = await self._write_offsets(loaded, group_id, "delete_offsets", rows)
            codes = [code if c is KafkaError.none else c for c in codes]
        return codes

    # -- parking -----------------------------------------------------------------

    def _park(
        self, table: dict[tuple[str, str], asyncio.Future[Any]], key: tuple[str, str]
    ) -> asyncio.Future[Any]:
        """A future for the parked request ``key``; one already parked under it (a
        client that sent the request again) is answered REBALANCE_IN_PROGRESS."""
        old = table.pop(key, None)
        if old is not None and not old.done():
            kind = JoinAnswer if table is self._joins else SyncAnswer
            old.set_result(kind(key[1], _RETRY))
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        table[key] = fut
        return fut

    async def _wait(self, fut: asyncio.Future[Any], timeout_ms: int, fallback: Any) -> Any:
        """The parked request's answer; ``fallback`` if none came within its timeout and
        a margin (the timers answer first: this only bounds the wait)."""
        with contextlib.suppress(TimeoutError):
            return await asyncio.wait_for(asyncio.shield(fut), timeout_ms / 1000 + 10.0)
        return fallback


_RETRY = KafkaError.rebalance_in_progress


def _newest(group: Group) -> str:
    """The id of the member added last (a join without an id just added it)."""
    return next(reversed(group.members))
