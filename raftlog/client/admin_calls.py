"""The client's admin calls (mixed into :class:`raftlog.client.RaftlogClient`):
topics, configs, partitions, leadership, nodes, moves and decommissioning."""

from __future__ import annotations

from raftlog.client.calls import CallRouting
from raftlog.client.errors import (
    InvalidRequestError,
    UnknownTopicError,
)
from raftlog.client.results import (
    TopicConfigDescription,
    TopicMetadata,
    config_description,
    topic_metadata,
)
from raftlog.rpc.messages import (
    AlterConfigRequest,
    AlterConfigResponse,
    CompleteMoveRequest,
    ConfigEntry,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicRequest,
    CreateTopicResponse,
    DecommissionNodeRequest,
    DecommissionNodeResponse,
    DeleteTopicRequest,
    DeleteTopicResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    ListTopicsRequest,
    ListTopicsResponse,
    MetadataResponse,
    MovePartitionRequest,
    MovePartitionResponse,
    RegisterNodeRequest,
    RegisterNodeResponse,
    TopicInfo,
    TransferLeadershipRequest,
    TransferLeadershipResponse,
)


class AdminCalls(CallRouting):
    """Admin calls: to the controller's leader, or any node for reads (through
    :class:`CallRouting`, which ``RaftlogClient`` mixes in after this part)."""

    # ------------------------------------------------------------ admin

    async def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        schema: bytes | None = None,
        exist_ok: bool = False,
        configs: dict[str, str] | None = None,
    ) -> TopicMetadata:
        """Create a topic; ``partitions=None`` takes the cluster default.

        ``replication_factor=None`` takes the default, 3 capped at the node count;
        an explicit one above the node count raises InvalidReplicationFactorError
        (an InvalidRequestError naming ``replication_factor`` and the node count).
        ``configs`` are
        the topic's config overrides by Kafka's names (``retention.bytes``,
        ``retention.ms``, ``segment.bytes``, ``segment.ms``). Raises
        TopicExistsError unless ``exist_ok``; InvalidRequestError for a bad
        name, partition count, replication factor, or config key or value.
        """
        if partitions is not None and partitions < 1:
            raise InvalidRequestError(f"partitions must be >= 1, got {partitions}")
        if replication_factor is not None and replication_factor < 1:
            raise InvalidRequestError(f"replication_factor must be >= 1, got {replication_factor}")
        req = CreateTopicRequest(
            name,
            -1 if partitions is None else partitions,
            -1 if replication_factor is None else replication_factor,
            schema,
            exist_ok,
            [ConfigEntry(k, str(v)) for k, v in (configs or {}).items()],
        )
        resp = await self._controller_call(req, CreateTopicResponse)
        self._topics[name] = resp.topic
        return topic_metadata(resp.topic)

    async def describe_topic(
        self, name: str, *, offsets: bool = True, wait_for_leaders_s: float = 0.0
    ) -> TopicMetadata:
        """The topic's partitions with leaders and watermarks; UnknownTopicError if absent.

        ``offsets=False``: from the metadata alone, no replica asked (one round trip
        less): the partitions, replicas, schema and id are exact, leaders and
        watermarks only as the answering node's own replicas know them (-1: none).

        ``wait_for_leaders_s`` (with ``offsets``): the node may hold its answer that
        long (it caps the wait at 2 s) while a partition has no known leader, and
        answers the moment the last one is known: a new topic's first leaders in one
        call instead of a poll. Some may still be -1 when the wait ran out."""
        if wait_for_leaders_s < 0:
            raise InvalidRequestError(
                f"wait_for_leaders_s: expected seconds >= 0, got {wait_for_leaders_s}"
            )
        return topic_metadata(
            await self._topic_info(
                name, with_offsets=offsets, wait_for_leaders_s=wait_for_leaders_s
            )
        )

    async def topic_id(self, name: str) -> int:
        """The topic's id (a topic deleted and created again has a new one), fresh from
        the metadata alone: unlike :meth:`describe_topic`, no replica is asked for its
        offsets. UnknownTopicError if absent."""
        return (await self._topic_info(name, with_offsets=False)).topic_id

    async def _topic_info(
        self, name: str, with_offsets: bool, wait_for_leaders_s: float = 0.0
    ) -> TopicInfo:
        meta = await self._metadata([name], with_offsets, wait_for_leaders_s)
        for t in meta.topics:
            if t.name == name:
                return t
        raise UnknownTopicError(f"unknown topic {name!r}")

    async def list_topics(self) -> list[str]:
        resp = await self._prefer_controller(ListTopicsRequest(), ListTopicsResponse)
        return sorted(resp.names)

    async def delete_topic(self, name: str) -> None:
        await self._controller_call(DeleteTopicRequest(name), DeleteTopicResponse)
        self._topics.pop(name, None)

    async def alter_config(
        self,
        name: str,
        set_configs: dict[str, str] | None = None,
        delete: list[str] | None = None,
    ) -> TopicConfigDescription:
        """Set config overrides of topic ``name`` and delete others (back to the default).

        One atomic change through the controller. Raises InvalidRequestError
        naming an unknown key or a bad value (nothing changes then),
        UnknownTopicError when the topic does not exist. Returns the configs
        after the change.
        """
        req = AlterConfigRequest(
            name,
            [ConfigEntry(k, str(v)) for k, v in (set_configs or {}).items()],
            list(delete or []),
        )
        resp = await self._controller_call(req, AlterConfigResponse)
        return config_description(resp.topic)

    async def describe_configs(self, name: str) -> TopicConfigDescription:
        """Every config of topic ``name`` with its effective value; UnknownTopicError if absent."""
        resp = await self._prefer_controller(
            DescribeConfigsRequest([name]), DescribeConfigsResponse
        )
        for t in resp.topics:
            if t.name == name:
                return config_description(t)
        raise UnknownTopicError(f"unknown topic {name!r}")

    async def create_partitions(self, name: str, partitions: int) -> TopicMetadata:
        """Grow topic ``name`` to ``partitions`` partitions in all (Kafka's semantics: the
        new total) through the controller; the new partitions are placed over the nodes
        as a create's are. Asking for the current count changes nothing. Raises
        InvalidRequestError for a smaller count (partitions are never removed),
        UnknownTopicError when the topic does not exist."""
        if partitions < 1:
            raise InvalidRequestError(f"partitions: expected an integer >= 1, got {partitions}")
        resp = await self._controller_call(
            CreatePartitionsRequest(name, partitions), CreatePartitionsResponse
        )
        self._topics[name] = resp.topic
        return topic_metadata(resp.topic)

    async def transfer_leadership(self, topic: str, partition: int, target: int) -> int:
        """Move the leadership of ``topic/partition`` to node ``target``, one of its
        replicas, and keep it there: the controller makes ``target`` the partition's
        preferred replica, which the nodes' leader balancer follows. Returns once
        ``target`` leads (its id). Raises InvalidRequestError when ``target`` is not
        a replica, UnknownTopicError/UnknownPartitionError, and RequestTimeoutError
        when ``target`` did not take over within the request timeout (it stays
        preferred, so the leadership moves once it has caught up)."""
        if target < 0 or partition < 0:
            raise InvalidRequestError(
                f"expected a partition >= 0 and a node id >= 0, got {partition} and {target}"
            )
        resp = await self._controller_call(
            TransferLeadershipRequest(topic, partition, target), TransferLeadershipResponse
        )
        self._leader_hints[(topic, partition)] = resp.leader
        return resp.leader

    async def register_node(self, node_id: int, address: str) -> dict[int, str]:
        """Add node ``node_id``, serving at ``address`` (HOST:PORT, as it advertises
        itself), to the running cluster: every node learns its address through the
        controller, and it joins the controller group (a learner, promoted once caught
        up). Returns every node's address after the change. Registering a node again
        with the same address changes nothing; InvalidRequestError when the id is a
        member at another address or the address is malformed."""
        if node_id < 0:
            raise InvalidRequestError(f"node_id: expected an integer >= 0, got {node_id}")
        resp = await self._controller_call(
            RegisterNodeRequest(node_id, address), RegisterNodeResponse
        )
        self._nodes = {n.node_id: n.address for n in resp.nodes}
        return dict(self._nodes)

    async def move_partition(self, topic: str, partition: int, replicas: list[int]) -> bool:
        """Start moving ``topic/partition`` to ``replicas`` (node ids, the first the new
        preferred leader), or, asked again with the same target, learn whether the move
        is done: True once the partition runs with exactly ``replicas``. The move goes on
        in the cluster (the partition's leader adds each new node as a learner, promotes
        it once caught up, then removes the old ones) while writes continue.
        InvalidRequestError names a bad target (empty, repeated or unknown nodes, or
        another move of the partition in progress)."""
        resp = await self._controller_call(
            MovePartitionRequest(topic, partition, list(replicas)), MovePartitionResponse
        )
        return resp.done

    async def complete_move(self, topic: str, partition: int, replicas: list[int]) -> bool:
        """For nodes: the leader of ``topic/partition`` reports that its group runs with
        exactly ``replicas``, a move's target; True once the controller has ended it."""
        resp = await self._controller_call(
            CompleteMoveRequest(topic, partition, list(replicas)), MovePartitionResponse
        )
        return resp.done

    async def decommission_node(self, node_id: int) -> tuple[int, bool]:
        """Drain node ``node_id`` and then remove it from the cluster, or, asked again,
        learn how far that has got: (partitions still on it, removed). The controller
        stops placing replicas on it and moves each of its partitions to another node
        (as ``move_partition``, writes going on); once none is left, the node leaves the
        controller group and the cluster. InvalidRequestError names a node that is not
        in the cluster or a partition no other node can take."""
        resp = await self._controller_call(
            DecommissionNodeRequest(node_id), DecommissionNodeResponse
        )
        return resp.remaining, resp.removed

    async def metadata(self, *, with_offsets: bool = False) -> MetadataResponse:
        """The raw cluster metadata (nodes, controller leader, every topic).

        ``with_offsets``: each partition's leader and watermarks as its leader reports
        them (the node asks each other node once for all of them: one call for every
        topic, where :meth:`describe_topic` is one per topic); without, as the answering
        node's own replicas know them (-1: none)."""
        return await self._metadata([], with_offsets=with_offsets)
