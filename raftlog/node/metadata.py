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
"""How often a held metadata answer looks again for the missing leaders: a new
partition's replicas learn their leader from its first append, within a few ms of the
election, and this node's own replicas are looked at in memory."""

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
        stm = self._ctx.controller_stm
        topics = [stm.topics[n] for n in names if n in stm.topics]
        infos = await self._topic_infos(topics, req.with_offsets)
        wait_s = min(req.wait_for_leaders_ms / 1000.0, LEADER_WAIT_MAX_S)
        if req.with_offsets and wait_s > 0:
            # A client that found no leader (a topic just created: its first election
            # takes 100-350 ms) is answered the moment one is known, rather than polling
            # with its backoff (up to 250 ms between tries): one request instead of five.
            loop = asyncio.get_running_loop()
            deadline = loop.time() + wait_s
            for _ in range(int(wait_s / LEADER_POLL_S) + 1):
                if loop.time() >= deadline or all(
                    p.leader >= 0 for t in infos for p in t.partitions
                ):
                    break
                await asyncio.sleep(LEADER_POLL_S)
                # the controller's copy of the topics may have changed meanwhile
                topics = [stm.topics[n] for n in names if n in stm.topics]
                infos = await self._topic_infos(topics, True)
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
        here = await self.statuses_here([p.group_id for t in topics for p in t.partitions])
        remote: dict[int, PartitionStatus] = {}
        if with_offsets:
            remote = await self.remote_statuses(topics, here)
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
            local = here.get(p.group_id)
            # Offsets are the leader's: a follower's high watermark lags.
            if local is not None and local.leader == self._ctx.node_id:
                st: PartitionStatus | None = local
            else:
                st = (remote or {}).get(p.group_id) or local
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
                    )
                )
        topic_id = t.partitions[0].group_id if t.partitions else -1
        return TopicInfo(t.name, t.replication_factor, parts, t.schema, topic_id)

    async def topic_info_now(self, t: TopicAssignment, *, ask_leaders: bool = False) -> TopicInfo:
        """``t``'s partitions as this node's replicas report them, or with
        ``ask_leaders`` as their leaders do."""
        here = await self.statuses_here([p.group_id for p in t.partitions])
        remote = await self.remote_statuses([t], here) if ask_leaders else {}
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

    async def remote_statuses(
        self, topics: list[TopicAssignment], here: dict[int, PartitionStatus]
    ) -> dict[int, PartitionStatus]:
        """Ask one replica of each partition this node does not lead (bounded, best
        effort): its leader as ``here`` (this node's replicas) knows it, else the
        preferred replica."""
        wanted: dict[int, list[int]] = {}
        for t in topics:
            for p in t.partitions:
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
