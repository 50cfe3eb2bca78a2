"""Replica placement: spread partitions, and their preferred leaders, evenly."""

from __future__ import annotations


def place_partitions(
    partitions: int, replication_factor: int, nodes: list[int], start: int
) -> list[list[int]]:
    """Round-robin replica lists for ``partitions`` partitions, as Kafka assigns them.

    Partition p (the cluster's ``q = start + p``-th) is preferred-led by node
    ``q mod len(nodes)`` of the sorted node list: the first replica is the preferred
    leader, so leaders rotate over the nodes; ``start`` (the controller's running
    partition count) keeps successive topics from all piling their first leader on
    the same node. The other replicas follow it at distinct shifts, and the shifts
    rotate every ``len(nodes)`` partitions (Kafka's ``nextReplicaShift``): the second
    replica of the partitions one node leads is each of the other nodes in turn.
    Why: the replica order is the voting priority (``group_host.priorities``), and a
    verdict on a dead leader's node names the live replica of the highest priority to
    campaign; with the followers always in the same order, every partition a node led
    failed over to the same next node (981 of 1,000 at 3,000 partitions on 3 nodes),
    which ran all the elections while the other only voted.

    Invariants: every list has distinct nodes; over any ``len(nodes)`` consecutive
    partitions each node is preferred leader exactly once; over ``len(nodes) *
    (len(nodes) - 1)`` consecutive partitions each ordered (leader, second replica)
    pair occurs equally often.
    """
    ordered = sorted(set(nodes))
    if not ordered:
        raise ValueError("cannot place partitions: the cluster has no nodes")
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    if not 1 <= replication_factor <= len(ordered):
        raise ValueError(
            f"replication_factor must be between 1 and the node count {len(ordered)}, "
            f"got {replication_factor}"
        )
    n = len(ordered)
    lists = []
    for p in range(partitions):
        q = start + p
        first = q % n
        shift = (q // n) % (n - 1) if n > 1 else 0
        followers = [
            ordered[(first + 1 + (shift + j) % (n - 1)) % n] for j in range(replication_factor - 1)
        ]
        lists.append([ordered[first], *followers])
    return lists
