"""Replica placement: spread partitions, and their preferred leaders, evenly."""

from __future__ import annotations


def place_partitions(
    partitions: int, replication_factor: int, nodes: list[int], start: int
) -> list[list[int]]:
    """Round-robin replica lists for ``partitions`` partitions.

    Partition p's replicas are ``replication_factor`` consecutive nodes of the
    sorted node list starting at ``(start + p) mod len(nodes)``. The first
    replica is the preferred leader, so leaders rotate over the nodes too;
    ``start`` (the controller's running partition count) keeps successive
    topics from all piling their first leader on the same node.

    Invariants: every list has distinct nodes; over any ``len(nodes)``
    consecutive partitions each node is preferred leader exactly once.

    The followers keep the nodes' order (Kafka rotates it), so all the partitions a
    node leads fail over to the same next node: the order is the voting priority,
    and a verdict on a dead leader's node names the live replica of the highest
    priority to campaign. Rotated, each live node of a 3-node cluster campaigned for
    half of them, and failover at 3,000 partitions got slower in every run measured
    (docs/operations.md, "Failover at 3,000 on 2026-12-02"); why is not known.
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
    return [
        [ordered[(start + p + j) % n] for j in range(replication_factor)] for p in range(partitions)
    ]
