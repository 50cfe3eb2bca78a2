"""Count-based leader balancing (Redpanda's ``leader_balancer``, by count): which
partitions should lead elsewhere so every live node leads about as many as the others.

Pure decision logic, no IO and no clock: the controller leader's loop
(``raftlog.node.upkeep``) feeds it the leaders it sees and carries out the moves by
making the new leader the partition's preferred replica; each node's
``_balance_loop`` then hands the leadership over.

The rule: a partition's leadership may move from its leader to another of its
replicas when both nodes are live and the partition is not *frozen* (a user's recent
``transfer-leadership`` pin, a move in progress, a leadership still on its way: the
caller decides). Leaders are counted per live node (a live node that leads nothing
counts 0). While some node leads at least 2 more than another node it can reach, one
leadership is shifted along the shortest chain of moves ``u -> ... -> w`` (each step
moves one partition from a node to a replica of it), which lowers ``u`` by one, raises
``w`` by one and leaves the nodes in between unchanged. When no such chain is left the
counts are as even as the placement allows (an optimal semi-matching, Harvey et al.):
in particular max - min <= 1 over the live nodes whenever any choice of leaders among
live replicas achieves it.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence

__all__ = [
    "MAX_MOVES_PER_ROUND",
    "LeaderMove",
    "electing",
    "leader_counts",
    "plan_leader_moves",
]

#: Leaderships moved per round at most (a chain longer than that is still taken whole
#: when it is the round's first, so a round always makes progress).
MAX_MOVES_PER_ROUND = 3


@dataclasses.dataclass(frozen=True, slots=True)
class LeaderMove:
    """Move ``group_id``'s leadership from ``from_node`` to ``to_node`` (a live replica)."""

    group_id: int
    from_node: int
    to_node: int


def electing(
    leaders: Mapping[int, int], replicas: Mapping[int, Sequence[int]], up: Callable[[int], bool]
) -> int:
    """How many partitions can elect a leader and have none up: their leader unknown
    (-1) or on a node ``up`` says is down, and a majority of their replicas up. While
    any is, a round plans no move: a failover's elections are under way on the live
    nodes, and each move would be one more election among them."""
    return sum(
        1
        for gid, leader in leaders.items()
        if not (leader > 0 and up(leader))
        and 2 * sum(1 for r in replicas[gid] if up(r)) > len(replicas[gid])
    )


def leader_counts(leaders: Mapping[int, int], live: Collection[int]) -> dict[int, int]:
    """Partitions led per live node (0 for a live node leading none); leaders that are
    not live (or unknown, -1) are not counted."""
    counts = dict.fromkeys(sorted(live), 0)
    for node in leaders.values():
        if node in counts:
            counts[node] += 1
    return counts


def plan_leader_moves(
    leaders: Mapping[int, int],
    replicas: Mapping[int, Sequence[int]],
    live: Collection[int],
    frozen: Collection[int] = (),
    max_moves: int = MAX_MOVES_PER_ROUND,
) -> list[LeaderMove]:
    """The moves of one round (see the module doc), in the order they are to be made.

    ``leaders``: group id -> the node leading it (-1 unknown); ``replicas``: group id ->
    its replicas; ``live``: the nodes that are up and may lead; ``frozen``: groups never
    to move. A partition moves at most once per round, only between live nodes, and
    every move goes to one of its replicas. At most ``max_moves`` moves, except that
    the round's first chain is taken whole. Deterministic for equal inputs.
    """
    alive = set(live)
    lead = {g: n for g, n in leaders.items() if n in alive}
    counts = leader_counts(lead, alive)
    fixed = set(frozen)
    moves: list[LeaderMove] = []
    while len(moves) < max_moves:
        chain = _cost_reducing_chain(lead, replicas, alive, fixed, counts)
        if chain is None or (moves and len(moves) + len(chain) > max_moves):
            break
        for move in chain:
            lead[move.group_id] = move.to_node
            fixed.add(move.group_id)
            moves.append(move)
        counts[chain[0].from_node] -= 1
        counts[chain[-1].to_node] += 1
    return moves


def _cost_reducing_chain(
    lead: Mapping[int, int],
    replicas: Mapping[int, Sequence[int]],
    alive: set[int],
    fixed: set[int],
    counts: Mapping[int, int],
) -> list[LeaderMove] | None:
    """The shortest chain from the most loaded node that has one to a node leading at
    least 2 fewer (the least loaded such node first); None when there is none."""
    # edges[u]: (group, v) for each movable partition led by u and each live replica v
    edges: dict[int, list[tuple[int, int]]] = collections.defaultdict(list)
    for g in sorted(lead):
        u = lead[g]
        if g in fixed:
            continue
        for v in replicas.get(g, ()):
            if v != u and v in alive:
                edges[u].append((g, v))
    for source in sorted(counts, key=lambda n: (-counts[n], n)):
        # BFS from source; parent[v] = (group, u) of the step that reached v
        parent: dict[int, tuple[int, int]] = {}
        seen = {source}
        frontier = [source]
        while frontier:
            nxt = []
            for u in frontier:
                for g, v in edges.get(u, ()):
                    if v not in seen:
                        seen.add(v)
                        parent[v] = (g, u)
                        nxt.append(v)
            frontier = nxt
        targets = [w for w in seen if counts[w] <= counts[source] - 2]
        if not targets:
            continue
        # the least loaded first; BFS order is not kept in ``seen``, so ties go by id
        target = min(targets, key=lambda w: (counts[w], _depth(parent, w), w))
        chain: list[LeaderMove] = []
        w = target
        while w != source:
            g, u = parent[w]
            chain.append(LeaderMove(g, u, w))
            w = u
        chain.reverse()
        return chain
    return None


def _depth(parent: Mapping[int, tuple[int, int]], node: int) -> int:
    depth = 0
    while node in parent:
        node = parent[node][1]
        depth += 1
    return depth
