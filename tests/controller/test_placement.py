"""Replica placement: leaders rotate, and the second replica of a node's partitions
rotates over the other nodes (the failover of a node's partitions spreads)."""

from __future__ import annotations

from collections import Counter

import pytest

from raftlog.controller.placement import place_partitions


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("start", [0, 1, 7, 3001])
def test_lists_are_distinct_and_leaders_rotate(n: int, start: int) -> None:
    nodes = list(range(1, n + 1))
    for rf in range(1, n + 1):
        lists = place_partitions(3 * n * max(1, n - 1), rf, nodes, start)
        for replicas in lists:
            assert len(replicas) == rf and len(set(replicas)) == rf, replicas
            assert set(replicas) <= set(nodes)
        for i in range(0, len(lists) - n + 1):
            window = [r[0] for r in lists[i : i + n]]
            assert sorted(window) == nodes, (i, window)


@pytest.mark.parametrize("n", [2, 3, 4, 5])
@pytest.mark.parametrize("start", [0, 2, 3001])
def test_the_second_replica_of_a_nodes_partitions_rotates(n: int, start: int) -> None:
    """What a verdict on a dead leader's node relies on (the replica order is the
    voting priority): of the partitions a node leads, each other node is second
    equally often, so their failover spreads over the live nodes."""
    nodes = list(range(1, n + 1))
    for rf in range(2, n + 1):
        lists = place_partitions(n * (n - 1) * 4, rf, nodes, start)
        pairs = Counter((r[0], r[1]) for r in lists)
        assert set(pairs.values()) == {4}, (rf, pairs)
        assert len(pairs) == n * (n - 1)


def test_three_nodes_three_replicas_alternate_the_followers() -> None:
    assert place_partitions(6, 3, [1, 2, 3], 0) == [
        [1, 2, 3],
        [2, 3, 1],
        [3, 1, 2],
        [1, 3, 2],
        [2, 1, 3],
        [3, 2, 1],
    ]


@pytest.mark.parametrize(
    ("partitions", "rf", "nodes", "text"),
    [
        (3, 1, [], "the cluster has no nodes"),
        (0, 1, [1], "partitions must be >= 1, got 0"),
        (3, 4, [1, 2, 3], "replication_factor must be between 1 and the node count 3, got 4"),
        (3, 0, [1, 2, 3], "replication_factor must be between 1 and the node count 3, got 0"),
    ],
)
def test_bad_input_is_named(partitions: int, rf: int, nodes: list[int], text: str) -> None:
    with pytest.raises(ValueError, match=text):
        place_partitions(partitions, rf, nodes, 0)
