"""A topic read follows the topic change the controller acknowledged, whichever node a
fresh client reaches first: a follower whose copy of the controller lags (it still holds
a topic just deleted) is not believed. The sink's first write after a delete and
re-create once saw the old topic on such a follower, skipped the create, and its tasks
then failed with "unknown topic"."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from raftlog.client import RaftlogClient, UnknownTopicError
from raftlog.rpc import codec
from raftlog.rpc.messages import (
    ConfigEntry,
    DescribeConfigsResponse,
    ErrorCode,
    ErrorResponse,
    MetadataRequest,
    MetadataResponse,
    NodeInfo,
    PartitionInfo,
    TopicConfigs,
    TopicInfo,
)
from tests.client.fake_node import FakeNodeServer, Route

LEADER, FOLLOWER = 1, 2


class ControllerNode(FakeNodeServer):
    """Node ``node_id`` of two; the controller leader knows no topic 'gone' (deleted and
    acknowledged), the lagging follower still has it."""

    def __init__(self, node_id: int) -> None:
        super().__init__()
        self.node_id = node_id
        self.peers: dict[int, str] = {}
        self.asked = 0
        self.topics_asked: list[list[str]] = []  # each metadata request's topics

    @property
    def lags(self) -> bool:
        return self.node_id == FOLLOWER

    def routes(self) -> dict[str, Route]:
        return {"describe_configs": self._describe_configs}

    async def _metadata(self, request: web.Request) -> web.Response:
        self.asked += 1
        self.topics_asked.append(codec.decode(await request.read(), MetadataRequest).topics)
        topics = [TopicInfo("gone", 1, [PartitionInfo(0, 1, LEADER, [1, 2])])] if self.lags else []
        nodes = [NodeInfo(n, a) for n, a in sorted(self.peers.items())]
        return web.Response(
            body=codec.encode(MetadataResponse(self.node_id, LEADER, nodes, topics))
        )

    async def _describe_configs(self, request: web.Request) -> web.Response:
        self.asked += 1
        if self.lags:
            reply = DescribeConfigsResponse(
                [TopicConfigs("gone", [ConfigEntry("compression.type", "producer")])]
            )
            return web.Response(body=codec.encode(reply))
        body = codec.encode(ErrorResponse(ErrorCode.UNKNOWN_TOPIC, "unknown topic 'gone'"))
        return web.Response(body=body, status=404)


@pytest.fixture
async def pair() -> AsyncIterator[dict[int, ControllerNode]]:
    nodes = {n: ControllerNode(n) for n in (LEADER, FOLLOWER)}
    for node in nodes.values():
        node.peers = {n: other.address for n, other in nodes.items()}
        await node.start()
    yield nodes
    for node in nodes.values():
        await node.stop()


@pytest.mark.parametrize("seeds", ["follower", "both"])
async def test_a_fresh_client_never_sees_a_deleted_topic_on_a_lagging_follower(
    pair: dict[int, ControllerNode], seeds: str
) -> None:
    addresses = [pair[FOLLOWER].address]
    if seeds == "both":
        addresses.append(pair[LEADER].address)
    for _ in range(20):  # the seeds are tried in a random order
        client = RaftlogClient(",".join(addresses), request_timeout_s=5.0)
        try:
            with pytest.raises(UnknownTopicError, match="unknown topic 'gone'"):
                await client.describe_topic("gone")
        finally:
            await client.close()
        client = RaftlogClient(",".join(addresses), request_timeout_s=5.0)
        try:
            with pytest.raises(UnknownTopicError, match="unknown topic 'gone'"):
                await client.describe_configs("gone")
        finally:
            await client.close()
    assert pair[LEADER].asked >= 40


async def test_a_former_controller_leader_named_by_the_client_is_passed_over(
    pair: dict[int, ControllerNode],
) -> None:
    """A client that learned the follower as the controller leader (before an election)
    follows the leader that the follower names."""
    client = RaftlogClient(pair[FOLLOWER].address, request_timeout_s=5.0)
    try:
        client._nodes = {n: node.address for n, node in pair.items()}
        client._controller_leader = FOLLOWER  # stale
        with pytest.raises(UnknownTopicError):
            await client.describe_topic("gone")
        assert client._controller_leader == LEADER
    finally:
        await client.close()


async def test_a_client_that_knows_no_controller_leader_asks_only_for_the_topic(
    pair: dict[int, ControllerNode],
) -> None:
    """The controller leader is looked up with the topic's own request, never with one
    for every topic: in a failover at 3,000 partitions every client refreshing a
    topic asked for all of them, and the nodes' loops answered them instead of
    electing."""
    for _ in range(10):  # the seeds are tried in a random order
        client = RaftlogClient(
            f"{pair[FOLLOWER].address},{pair[LEADER].address}", request_timeout_s=5.0
        )
        try:
            with pytest.raises(UnknownTopicError):
                await client.describe_topic("gone")
        finally:
            await client.close()
    asked = pair[FOLLOWER].topics_asked + pair[LEADER].topics_asked
    assert asked and all(topics == ["gone"] for topics in asked), asked
    assert len(pair[LEADER].topics_asked) == 10  # the controller leader answered each
