"""A metadata answer held for partitions without a known leader
(``MetadataRequest.wait_for_leaders_ms``) is event-driven: it wakes when a replica of
the node learns a leader, and asks again only for the partitions still without one.
Before, it rebuilt the whole answer every 10 ms, the statuses of every partition asked
from the other nodes included: at 3,000 partitions a quarter to two fifths of a node's
event loop during topic creation."""

from __future__ import annotations

import argparse
import asyncio
import pathlib
from typing import Any

from raftlog.controller import PartitionAssignment, TopicAssignment
from raftlog.node.config import add_server_arguments, config_from_args
from raftlog.node.process import Node
from raftlog.rpc.messages import (
    MetadataRequest,
    MetadataResponse,
    PartitionStatus,
    PartitionStatusRequest,
    PartitionStatusResponse,
)

PARTITIONS = 20
FIRST_GROUP = 100
HELD_S = 0.3
"""How long the test lets an answer wait before its last leader is known: 30 rounds of
the old 10 ms timer."""


class _Replica:
    """A partition replica of node 1 as the metadata answer sees it: its status."""

    def __init__(self, gid: int, leader: int) -> None:
        self.gid = gid
        self.leader = leader

    def status(self) -> PartitionStatus:
        return PartitionStatus(self.gid, self.leader, 0, 0, 0)


class _Peers:
    """The transport to the other nodes: answers partition statuses as ``leaders`` says
    (group -> leader) and records every request."""

    def __init__(self, leaders: dict[int, int]) -> None:
        self.leaders = leaders
        self.asked: list[tuple[int, list[int]]] = []

    async def send(self, node: int, req: Any) -> Any:
        assert isinstance(req, PartitionStatusRequest), req
        self.asked.append((node, list(req.group_ids)))
        return PartitionStatusResponse(
            [PartitionStatus(g, self.leaders[g], 0, 7, 7) for g in req.group_ids]
        )


def _node(tmp_path: pathlib.Path, replicas: dict[int, list[int]]) -> Node:
    """Node 1 of 4 (not started), hosting topic ``t``'s partitions of whose ``replicas``
    it is one."""
    parser = argparse.ArgumentParser()
    add_server_arguments(parser)
    peers = ",".join(f"{i}=127.0.0.1:{i}" for i in range(1, 5))
    args = ["--node-id", "1", "--listen", "127.0.0.1:1", "--data-dir", str(tmp_path)]
    node = Node(config_from_args(parser.parse_args([*args, "--peers", peers])))
    parts = [PartitionAssignment(p, FIRST_GROUP + p, r) for p, r in replicas.items()]
    node.controller_stm.topics["t"] = TopicAssignment("t", 3, parts)
    return node


def _leaders(resp: MetadataResponse) -> list[int]:
    (topic,) = resp.topics
    return [p.leader for p in topic.partitions]


def test_a_held_answer_asks_again_only_when_a_replica_learns_the_missing_leader(
    tmp_path: pathlib.Path,
) -> None:
    """19 partitions led by node 2, the last one's replica here knows no leader yet."""
    last = FIRST_GROUP + PARTITIONS - 1
    node = _node(tmp_path, {p: [2, 1, 3] for p in range(PARTITIONS)})
    for g in range(FIRST_GROUP, FIRST_GROUP + PARTITIONS):
        node.partitions[g] = _Replica(g, -1 if g == last else 2)
    peers = _Peers({g: 2 for g in node.partitions})
    node.ctx.transport = peers  # type: ignore[assignment]

    async def scenario() -> MetadataResponse:
        held = asyncio.ensure_future(node.metadata.metadata(MetadataRequest(["t"], True, 2000)))
        await asyncio.sleep(HELD_S)
        assert not held.done()
        # one ask of node 2, for the 19 partitions it leads, while the answer was held
        assert peers.asked == [(2, list(range(FIRST_GROUP, last)))]
        node.partitions[last].leader = 2  # type: ignore[attr-defined]
        node.host.leader_notices.leader_known(last, 2)  # as its Consensus tells it
        return await asyncio.wait_for(held, 1.5)

    resp = asyncio.run(scenario())
    assert _leaders(resp) == [2] * PARTITIONS
    assert [p.high_watermark for p in resp.topics[0].partitions] == [7] * PARTITIONS
    assert peers.asked[1:] == [(2, [last])]  # then the one partition that learned it
    assert node.host.leader_notices.waiting() == 0  # the answer's watch is gone


def test_a_partition_without_a_replica_here_is_the_only_one_polled(
    tmp_path: pathlib.Path,
) -> None:
    """The last partition has no replica on node 1 (nothing here can tell it its leader):
    it alone is asked again, until its preferred replica names one."""
    last = FIRST_GROUP + PARTITIONS - 1
    replicas = {p: [2, 1, 3] for p in range(PARTITIONS - 1)} | {PARTITIONS - 1: [4, 2, 3]}
    node = _node(tmp_path, replicas)
    for g in range(FIRST_GROUP, last):
        node.partitions[g] = _Replica(g, 2)
    peers = _Peers({g: 2 for g in node.partitions} | {last: -1})
    node.ctx.transport = peers  # type: ignore[assignment]

    async def scenario() -> MetadataResponse:
        held = asyncio.ensure_future(node.metadata.metadata(MetadataRequest(["t"], True, 2000)))
        await asyncio.sleep(HELD_S)
        assert not held.done()
        peers.leaders[last] = 4
        return await asyncio.wait_for(held, 1.5)

    resp = asyncio.run(scenario())
    assert _leaders(resp) == [2] * (PARTITIONS - 1) + [4]
    # node 2 once for its 19, then node 4 (the preferred replica) for the last alone
    assert peers.asked[0] == (2, list(range(FIRST_GROUP, last))), peers.asked[0]
    again = peers.asked[1:]
    assert len(again) >= 2 and all(asked == (4, [last]) for asked in again), peers.asked
    # polled at most every LEADER_POLL_S (10 ms) for HELD_S, not faster
    assert len(again) <= HELD_S / 0.01 + 5, len(again)


def test_an_answer_with_every_leader_known_is_not_held(tmp_path: pathlib.Path) -> None:
    node = _node(tmp_path, {p: [1, 2, 3] for p in range(PARTITIONS)})
    for g in range(FIRST_GROUP, FIRST_GROUP + PARTITIONS):
        node.partitions[g] = _Replica(g, 1)
    peers = _Peers({})
    node.ctx.transport = peers  # type: ignore[assignment]
    resp = asyncio.run(
        asyncio.wait_for(node.metadata.metadata(MetadataRequest(["t"], True, 2000)), 1.0)
    )
    assert _leaders(resp) == [1] * PARTITIONS and peers.asked == []
