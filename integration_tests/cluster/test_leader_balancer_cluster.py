"""The leader balancer on a real 3-node cluster: every leadership is put on node 1 with
``transfer-leadership`` (which pins it for ``--leader-balance-pin-ms``); while the pins
hold the balancer leaves them there, and once they expire it spreads them, two
partitions per node, each led by its preferred replica."""

from __future__ import annotations

import asyncio
import collections
import pathlib
import time
import uuid
from collections.abc import Iterator

import pytest
from ops_helpers import wait_until

from benchmarks.workloads.cluster_handle import ClusterHandle, running_cluster
from raftlog.client import BlockingRaftlogClient, RaftlogClient

PIN_S = 12.0
PARTITIONS = 6


@pytest.fixture
def balanced_cluster(tmp_path: pathlib.Path) -> Iterator[ClusterHandle]:
    """A private 3-node cluster whose balancer looks every 500 ms and whose
    transfer-leadership pins last ``PIN_S``."""
    flags = [
        "--leader-balance-interval-ms", "500",
        "--leader-balance-pin-ms", str(int(PIN_S * 1000)),
    ]  # fmt: skip
    with running_cluster(tmp_path / "cluster", extra_args=flags) as handle:
        yield handle


def _leaders(client: BlockingRaftlogClient) -> dict[tuple[str, int], tuple[int, list[int]]]:
    """(topic, partition) -> (leader, replicas) of every partition of every topic."""
    out = {}
    for name in client.list_topics():
        for p in client.describe_topic(name).partitions:
            out[(name, p.partition)] = (p.leader, list(p.replicas))
    return out


def _counts(leaders: dict[tuple[str, int], tuple[int, list[int]]]) -> dict[int, int]:
    counts = collections.Counter(leader for leader, _ in leaders.values())
    return {n: counts.get(n, 0) for n in (1, 2, 3)}


async def _transfer_all_to(servers: list[str], topic: str, node: int) -> None:
    async with RaftlogClient(servers, request_timeout_s=30.0) as client:
        for p in range(PARTITIONS):
            assert await client.transfer_leadership(topic, p, node) == node


def test_the_balancer_spreads_leaders_piled_on_one_node(
    balanced_cluster: ClusterHandle,
) -> None:
    servers = balanced_cluster.servers
    topic = f"bal-{uuid.uuid4().hex[:8]}"
    with BlockingRaftlogClient(servers, request_timeout_s=30.0) as client:
        client.create_topic(topic, partitions=PARTITIONS, replication_factor=3)
        wait_until(
            lambda: all(leader >= 0 for leader, _ in _leaders(client).values()),
            30,
            "every partition to elect a leader",
        )
        pinned_from = time.monotonic()
        asyncio.run(_transfer_all_to(servers, topic, 1))
        # the pins hold: nothing moves before PIN_S after the first transfer
        assert time.monotonic() < pinned_from + PIN_S - 3, "transfers too slow to check the pins"
        time.sleep(2.0)
        piled = _leaders(client)
        assert time.monotonic() < pinned_from + PIN_S, "the check ran after the pins expired"
        assert _counts(piled) == {1: PARTITIONS, 2: 0, 3: 0}, piled
        assert all(replicas[0] == 1 for _, replicas in piled.values()), piled

        # once the pins expire the balancer spreads them, each to its preferred replica
        def spread() -> dict[tuple[str, int], tuple[int, list[int]]] | None:
            now = _leaders(client)
            counts = _counts(now)
            even = max(counts.values()) - min(counts.values()) <= 1
            settled = all(leader == replicas[0] for leader, replicas in now.values())
            return now if even and settled else None

        done = wait_until(spread, PIN_S + 20, "the leaderships to spread over the nodes")
        assert _counts(done) == {1: 2, 2: 2, 3: 2}, done
        # and they stay spread: the balancer has nothing more to do
        time.sleep(1.5)
        assert _counts(_leaders(client)) == {1: 2, 2: 2, 3: 2}
