"""A node's metadata answers, a part of :class:`raftlog.node.process.Node`: topics,
partitions with their leaders and offsets (the leaders' own, asked over the cluster),
and per-partition status; and the lookups the node's other parts make of them."""

from __future__ import annotations

import asyncio
import logging

from raftlog.controller import (
    PartitionAssignment,
    TopicAssignment,
    topic_config,
)
from raftlog.node.context import NodeContext
from raftlog.node.leader_notices import LeaderWatch
from raftlog.node.membership import Membership
from raftlog.raft.errors import RaftError, ReadNotReadyError
from raftlog.rpc.messages import (
    ConfigEntry,
    ErrorCode,
    ListTopicsRequest,
    ListTopicsResponse,
    MetadataRequest,
    MetadataResponse,
    PartitionInfo,
    PartitionStatus,
    PartitionStatusRequest,
    PartitionStatusResponse,
    TopicConfigs,
    TopicInfo,
)
from raftlog.rpc.server import RequestError

log = logging.getLogger("raftlog.node")


REMOTE_STATUS_S = 1.0
"""How long a metadata call waits for another node's partition statuses (best effort)."""

LEADER_WAIT_MAX_S = 2.0
"""The longest a metadata answer is held for partitions without a known leader
(``MetadataRequest.wait_for_leaders_ms`` is capped to it)."""

LEADER_POLL_S = 0.01
"""How often a held metadata answer asks again for the missing leaders a notice cannot
tell it about (partitions without a replica in this process, see
:meth:`MetadataApi._infos_with_leaders`); those of its own replicas wake it the moment
they learn one (a new partition's replicas learn it from its first append, within a few
ms of the election)."""

CONTROLLER_READ_WAIT_S = 2.0
"""How long a new controller leader holds a metadata answer until it can answer from
state that includes everything acknowledged (see :meth:`MetadataApi._controller_read_barrier`);
then it refuses with LEADER_NOT_AVAILABLE."""


class MetadataApi:
    """Metadata calls, over the node's controller state and partitions; the nodes it
    names are ``membership``'s."""

    def __init__(self, ctx: NodeContext, membership: Membership) -> None:
        self._ctx = ctx
        self._membership = membership

    async def _controller_read_barrier(self) -> None:
        """The controller group's read barrier (:meth:`Consensus.read_barrier`) before a
        leader answers topics: a leader just elected may not know yet what its
        predecessor committed, and its controller state applies committed entries after
        the fact; answered at once, a fresh client after a leader change could be told
        that a topic it created does not exist (the chaos benchmark's final read saw it
        once after a node restart). Waits up to ``CONTROLLER_READ_WAIT_S``, then refuses
        with LEADER_NOT_AVAILABLE (retriable) saying what is missing: never answers from
        state that may lack something acknowledged. Followers answer from their copy
        (clients only ask them while no leader is known), and so does a leader that
        loses its leadership meanwhile."""
        c = self._ctx.controller
        if c is None or not c.is_leader:
            return
        try:
            await c.read_barrier(CONTROLLER_READ_WAIT_S)
        except ReadNotReadyError as exc:
            why = f"controller: {exc}; retry"
            raise RequestError(ErrorCode.LEADER_NOT_AVAILABLE, why) from None
        except RaftError:  # no longer the leader, or the group stopped: a follower's answer
            return

    def assignment(self, topic: str, partition: int) -> tuple[TopicAssignment, PartitionAssignment]:
        """The controller's assignment of ``topic/partition``; UNKNOWN_* errors name it."""
        t = self._ctx.controller_stm.topics.get(topic)
        if t is None:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC, f"unknown topic {topic!r}")
        if not 0 <= partition < len(t.partitions):
            raise RequestError(
                ErrorCode.UNKNOWN_PARTITION,
                f"topic {topic!r} has no partition {partition} "
                f"(it has partitions 0..{len(t.partitions) - 1})",
            )
        return t, t.partitions[partition]

    def topic_gone(self, topic: str, topic_id: int) -> bool:
        """Whether this node's controller state proves topic ``topic`` of id ``topic_id``
        deleted: it applied the creation (``next_group_id`` is past the id, which only
        grows) and holds no topic of that name and id. A state that has not applied the
        creation yet (a lagging follower, a node just restarted) proves nothing: False.
        ``topic_id`` -1 (not known): the name is absent here."""
        stm = self._ctx.controller_stm
        t = stm.topics.get(topic)
        if topic_id < 0:
            return t is None
        if t is not None and t.topic_id == topic_id:
            return False
        return stm.next_group_id > topic_id

    def topic_configs(self, name: str) -> TopicConfigs:
        overrides = self._ctx.controller_stm.topic_overrides(name)
        described = topic_config.described(overrides)
        return TopicConfigs(name, [ConfigEntry(k, v, default) for k, v, default in described])

    async def list_topics(self, req: ListTopicsRequest) -> ListTopicsResponse:
        await self._controller_read_barrier()
        return ListTopicsResponse(sorted(self._ctx.controller_stm.topics))

    async def metadata(self, req: MetadataRequest) -> MetadataResponse:
        await self._controller_read_barrier()
        # duplicates dropped before the cap: a name asked for twice is answered once
        names = list(dict.fromkeys(req.topics)) or sorted(self._ctx.controller_stm.topics)
        if req.topics and len(names) > self._ctx.config.edge.max_topics_per_metadata:
            why = self._ctx.edge.refusal(
                "max_topics_per_metadata",
                "topics (distinct names)",
                len(names),
                "per metadata request",
                "ask in several requests, or name none for all",
            )
            raise RequestError(ErrorCode.INVALID_REQUEST, why)
        wait_s = min(req.wait_for_leaders_ms / 1000.0, LEADER_WAIT_MAX_S)
        if req.with_offsets and wait_s > 0:
            # A client that found no leader (a topic just created: its first election
            # takes 100-350 ms) is answered the moment one is known, rather than polling
            # with its backoff (up to 250 ms between tries): one request instead of five.
            infos = await self._infos_with_leaders(names, wait_s)
        else:
            stm = self._ctx.controller_stm
            topics = [stm.topics[n] for n in names if n in stm.topics]
            infos = await self._topic_infos(topics, req.with_offsets)
        return MetadataResponse(
            self._ctx.node_id,
            self._ctx.controller_leader(),
            self._membership.node_infos(),
            infos,
        )

    async def _topic_infos(
        self, topics: list[TopicAssignment], with_offsets: bool
    ) -> list[TopicInfo]:
        """``topics`` as this node's replicas know them, and with ``with_offsets`` as their
        leaders (or preferred replicas) report them."""
        parts = [p for t in topics for p in t.partitions]
        here = await self.statuses_here([p.group_id for p in parts])
        remote: dict[int, PartitionStatus] = {}
        if with_offsets:
            remote = await self.leaders_statuses(parts, here)
        return [self.topic_info(t, here, remote) for t in topics]

    def topic_info(
        self,
        t: TopicAssignment,
        here: dict[int, PartitionStatus],
        remote: dict[int, PartitionStatus] | None = None,
    ) -> TopicInfo:
        """``here``: the statuses of this node's replicas; ``remote``: the leaders'."""
        parts = []
        for p in t.partitions:
            st = self._status_of(p.group_id, here, remote or {})
            if st is None:
                parts.append(PartitionInfo(p.partition, p.group_id, -1, list(p.replicas)))
            else:
                parts.append(
                    PartitionInfo(
                        p.partition,
                        p.group_id,
                        st.leader,
                        list(p.replicas),
                        st.start_offset,
                        st.high_watermark,
                        st.last_stable_offset,
                        st.leader_since_ms,
                    )
                )
        return TopicInfo(t.name, t.replication_factor, parts, t.schema, t.topic_id)

    def _status_of(
        self, gid: int, here: dict[int, PartitionStatus], remote: dict[int, PartitionStatus]
    ) -> PartitionStatus | None:
        """The status a metadata answer gives group ``gid``: this node's replica's when it
        leads; else its leader's (``remote``), else this node's replica's."""
        local = here.get(gid)
        # Offsets are the leader's: a follower's high watermark lags.
        if local is not None and local.leader == self._ctx.node_id:
            return local
        return remote.get(gid) or local

    async def _infos_with_leaders(self, names: list[str], wait_s: float) -> list[TopicInfo]:
        """Topics ``names`` (those that exist) with offsets, as :meth:`_topic_infos`, held
        up to ``wait_s`` until every partition has a known leader.

        Event-driven (:mod:`raftlog.node.leader_notices`): the answer is built once, then
        only the partitions still without a leader are asked again, each when this
        process's replica of it learns a leader (or the controller's copy of a topic
        asked changes: that topic alone is asked again). The partitions a notice cannot
        tell about (no replica in this process: another shard's, another node's; or one
        whose replica here names a leader that its leader did not confirm) are asked
        again every ``LEADER_POLL_S``, they alone."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_s
        stm = self._ctx.controller_stm
        here: dict[int, PartitionStatus] = {}
        remote: dict[int, PartitionStatus] = {}
        asked: dict[str, TopicAssignment] = {}
        missing: dict[int, PartitionAssignment] = {}
        polled: list[int] = []
        next_poll = loop.time() + LEADER_POLL_S
        topics_changed = True  # the first round asks every topic
        with self._ctx.host.leader_notices.watching() as watch:
            while True:
                again: list[PartitionAssignment] = []
                if topics_changed:
                    current = {n: stm.topics[n] for n in names if n in stm.topics}
                    if current.keys() != asked.keys() or any(
                        asked[n] is not t for n, t in current.items()
                    ):
                        for n, t in asked.items():
                            if current.get(n) is not t:
                                for p in t.partitions:
                                    missing.pop(p.group_id, None)
                        again += [
                            p
                            for n, t in current.items()
                            if asked.get(n) is not t
                            for p in t.partitions
                        ]
                        asked = current
                learned = watch.take_learned()
                if polled and loop.time() >= next_poll:
                    learned.update(polled)
                    next_poll = loop.time() + LEADER_POLL_S
                again += [missing[g] for g in learned if g in missing]
                if again:
                    again = list({p.group_id: p for p in again}.values())
                    await self._ask_again(again, here, remote)
                    for p in again:
                        st = self._status_of(p.group_id, here, remote)
                        if st is None or st.leader < 0:
                            missing[p.group_id] = p
                        else:
                            missing.pop(p.group_id, None)
                if not missing or loop.time() >= deadline:
                    break
                polled = self._follow_missing(watch, missing, here)
                timeout = deadline - loop.time()
                if polled:
                    timeout = min(timeout, max(0.0, next_poll - loop.time()))
                await watch.wait(timeout)
                topics_changed = watch.take_topics_changed()
        return [self.topic_info(t, here, remote) for t in asked.values()]

    def _follow_missing(
        self,
        watch: LeaderWatch,
        missing: dict[int, PartitionAssignment],
        here: dict[int, PartitionStatus],
    ) -> list[int]:
        """Have ``watch`` follow the ``missing`` groups whose replica in this process
        knows no leader yet (or is still to open); a replica that learned one since
        ``here`` was asked counts as learned at once. The rest, which must be polled:
        those without a replica in this process, and those whose replica names the
        same leader as when asked (that leader did not confirm it)."""
        polled = []
        follow = []
        for gid, p in missing.items():
            replica = self._ctx.partitions.get(gid)
            if replica is None:
                if gid not in here and self._ctx.owns(gid) and self._ctx.node_id in p.replicas:
                    follow.append(gid)  # not open yet: it learns its first leader after
                else:
                    polled.append(gid)
                continue
            leader = replica.status().leader
            asked = here.get(gid)
            if leader < 0:
                follow.append(gid)
            elif asked is None or asked.leader != leader:
                watch.learned(gid)  # learned between the ask and now: no notice follows
            else:
                polled.append(gid)
        watch.follow(follow)
        return polled

    async def _ask_again(
        self,
        parts: list[PartitionAssignment],
        here: dict[int, PartitionStatus],
        remote: dict[int, PartitionStatus],
    ) -> None:
        """Update ``here`` and ``remote`` (as :meth:`_topic_infos` builds them) for
        ``parts`` alone."""
        gids = [p.group_id for p in parts]
        here.update(await self.statuses_here(gids))
        for g in gids:
            remote.pop(g, None)  # an earlier answer (no leader) must not hide a new one
        remote.update(await self.leaders_statuses(parts, here))

    async def topic_info_now(self, t: TopicAssignment, *, ask_leaders: bool = False) -> TopicInfo:
        """``t``'s partitions as this node's replicas report them, or with
        ``ask_leaders`` as their leaders do."""
        here = await self.statuses_here([p.group_id for p in t.partitions])
        remote = await self.leaders_statuses(t.partitions, here) if ask_leaders else {}
        return self.topic_info(t, here, remote)

    async def statuses_here(self, gids: list[int]) -> dict[int, PartitionStatus]:
        """The statuses of this node's replicas among ``gids``: this process's, and on
        shard 0 of several, those of the other shards (one that does not answer in
        time has none)."""
        out = {g: self._ctx.partitions[g].status() for g in gids if g in self._ctx.partitions}
        shards = self._ctx.shards
        if shards is None:
            return out
        theirs: dict[int, list[int]] = {}
        for g in gids:
            if not self._ctx.owns(g):
                theirs.setdefault(shards.owner(g), []).append(g)

        async def ask(shard: int, wanted: list[int]) -> list[PartitionStatus]:
            try:
                resp = await shards.call(
                    shard, PartitionStatusRequest(wanted), PartitionStatusResponse
                )
            except Exception as exc:  # a shard stopping: its partitions have no status
                log.warning("partition status of %s", exc)
                return []
            return resp.statuses

        for statuses in await asyncio.gather(*(ask(k, g) for k, g in theirs.items())):
            out.update((st.group_id, st) for st in statuses)
        return out

    async def leaders_statuses(
        self, parts: list[PartitionAssignment], here: dict[int, PartitionStatus]
    ) -> dict[int, PartitionStatus]:
        """Ask one replica of each of ``parts`` this node does not lead (bounded, best
        effort): its leader as ``here`` (this node's replicas) knows it, else the
        preferred replica."""
        wanted: dict[int, list[int]] = {}
        for p in parts:
            local = here.get(p.group_id)
            if local is None:
                target = p.replicas[0]
            else:
                target = local.leader
                if target == self._ctx.node_id or target < 0:
                    continue
            wanted.setdefault(target, []).append(p.group_id)
        if not wanted:
            return {}
        out: dict[int, PartitionStatus] = {}

        async def ask(node: int, gids: list[int]) -> None:
            if node not in self._ctx.config.peers:
                return
            try:
                resp = await asyncio.wait_for(
                    self._ctx.transport.send(node, PartitionStatusRequest(gids)), REMOTE_STATUS_S
                )
            except Exception:  # best effort: a node that does not answer has no status
                return
            for st in resp.statuses:
                out[st.group_id] = st

        await asyncio.gather(*(ask(n, g) for n, g in wanted.items()))
        return out

    async def partition_status(self, req: PartitionStatusRequest) -> PartitionStatusResponse:
        here = await self.statuses_here(list(req.group_ids))
        return PartitionStatusResponse([here[g] for g in req.group_ids if g in here])
