"""The leader balancer's decision function on many random placements: after rounds of
moves the counts are as even as any choice of leaders allows (max - min <= 1 whenever
that is possible), no move goes to a node that is down or is not a replica, and frozen
(pinned) partitions never move."""

from __future__ import annotations

import itertools
import random

import pytest

from raftlog.controller.leader_balancer import (
    MAX_MOVES_PER_ROUND,
    LeaderMove,
    electing,
    leader_counts,
    plan_leader_moves,
)

MAX_ROUNDS = 500


def _spread(counts: dict[int, int]) -> int:
    return max(counts.values()) - min(counts.values()) if counts else 0


def _best_spread(
    leaders: dict[int, int], replicas: dict[int, list[int]], live: set[int], frozen: set[int]
) -> int:
    """The smallest max - min over every choice of leaders the balancer may make: each
    movable partition with a live leader led by any live replica (brute force)."""
    movable = sorted(g for g, n in leaders.items() if n in live and g not in frozen)
    fixed = {g: n for g, n in leaders.items() if n in live and g in frozen}
    choices = [[r for r in replicas[g] if r in live] for g in movable]
    best = None
    for pick in itertools.product(*choices):
        counts = leader_counts({**fixed, **dict(zip(movable, pick, strict=True))}, live)
        best = _spread(counts) if best is None else min(best, _spread(counts))
    assert best is not None
    return best


def _balance(
    leaders: dict[int, int],
    replicas: dict[int, list[int]],
    live: set[int],
    frozen: set[int],
) -> tuple[dict[int, int], list[LeaderMove]]:
    """Run rounds, carrying out every move, until a round plans none."""
    now = dict(leaders)
    made: list[LeaderMove] = []
    for _ in range(MAX_ROUNDS):
        moves = plan_leader_moves(now, replicas, live, frozen)
        if not moves:
            return now, made
        for m in moves:
            assert now[m.group_id] == m.from_node, m
            now[m.group_id] = m.to_node
        made += moves
    raise AssertionError(f"no fixed point after {MAX_ROUNDS} rounds")


def _random_case(
    rng: random.Random,
) -> tuple[dict[int, int], dict[int, list[int]], set[int], set[int]]:
    nodes = list(range(1, rng.randint(2, 5) + 1))
    live = {n for n in nodes if rng.random() < 0.8} or {rng.choice(nodes)}
    replicas: dict[int, list[int]] = {}
    leaders: dict[int, int] = {}
    for g in range(rng.randint(1, 7)):
        reps = rng.sample(nodes, rng.randint(1, min(3, len(nodes))))
        replicas[g] = reps
        up = [r for r in reps if r in live]
        # mostly piled on the smallest live replica; sometimes no leader is known
        leaders[g] = -1 if not up or rng.random() < 0.1 else min(up)
    frozen = {g for g in replicas if rng.random() < 0.15}
    return leaders, replicas, live, frozen


@pytest.mark.parametrize("seed", range(8))
def test_random_placements_end_as_even_as_possible(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(60):
        leaders, replicas, live, frozen = _random_case(rng)
        final, made = _balance(leaders, replicas, live, frozen)
        case = (leaders, replicas, live, frozen)
        for m in made:
            assert m.to_node in live and m.from_node in live, (case, m)
            assert m.to_node in replicas[m.group_id] and m.to_node != m.from_node, (case, m)
            assert m.group_id not in frozen, (case, m)
        # frozen partitions, and those without a live leader, are exactly as they were
        for g in replicas:
            if g in frozen or leaders[g] not in live:
                assert final[g] == leaders[g], (case, final)
        counts = leader_counts(final, live)
        assert _spread(counts) == _best_spread(leaders, replicas, live, frozen), (case, final)
        if _best_spread(leaders, replicas, live, frozen) <= 1:
            assert _spread(counts) <= 1, (case, final)


def test_every_round_is_bounded_and_moves_a_partition_once() -> None:
    rng = random.Random(99)
    for _ in range(300):
        leaders, replicas, live, frozen = _random_case(rng)
        moves = plan_leader_moves(leaders, replicas, live, frozen, max_moves=2)
        groups = [m.group_id for m in moves]
        assert len(groups) == len(set(groups))
        # beyond the bound only when the round's first chain is longer than it
        assert len(moves) <= max(2, len(live) - 1)


def test_all_on_one_node_of_three_spreads_to_two_each() -> None:
    # 6 partitions on nodes 1,2,3, all led by 1 (every preferred replica moved there)
    replicas = {g: [1, 2, 3] for g in range(6)}
    leaders = dict.fromkeys(range(6), 1)
    first = plan_leader_moves(leaders, replicas, {1, 2, 3})
    assert len(first) == MAX_MOVES_PER_ROUND
    assert all(m.from_node == 1 for m in first)
    final, _ = _balance(leaders, replicas, {1, 2, 3}, set())
    assert leader_counts(final, {1, 2, 3}) == {1: 2, 2: 2, 3: 2}


def test_never_onto_a_down_node() -> None:
    replicas = {g: [1, 2, 3] for g in range(6)}
    leaders = dict.fromkeys(range(6), 1)
    final, made = _balance(leaders, replicas, {1, 2}, set())
    assert {m.to_node for m in made} == {2}
    assert leader_counts(final, {1, 2}) == {1: 3, 2: 3}


def test_pinned_partitions_stay() -> None:
    replicas = {g: [1, 2, 3] for g in range(6)}
    leaders = dict.fromkeys(range(6), 1)
    final, made = _balance(leaders, replicas, {1, 2, 3}, frozen={0, 1, 2, 3})
    assert {m.group_id for m in made} <= {4, 5}
    assert [final[g] for g in range(4)] == [1, 1, 1, 1]
    assert leader_counts(final, {1, 2, 3}) == {1: 4, 2: 1, 3: 1}


def test_a_chain_reaches_a_node_no_overloaded_partition_is_on() -> None:
    # node 1 leads 3 with replicas on 1,2 only; node 2 leads 1 with a replica on 3;
    # node 3 leads nothing: only the chain 1 -> 2 -> 3 evens them out
    replicas = {0: [1, 2], 1: [1, 2], 2: [1, 2], 3: [2, 3]}
    leaders = {0: 1, 1: 1, 2: 1, 3: 2}
    moves = plan_leader_moves(leaders, replicas, {1, 2, 3}, max_moves=1)
    assert moves == [LeaderMove(0, 1, 2), LeaderMove(3, 2, 3)]
    final, _ = _balance(leaders, replicas, {1, 2, 3}, set())
    assert leader_counts(final, {1, 2, 3}) == {1: 2, 2: 1, 3: 1}


def test_balanced_counts_plan_nothing() -> None:
    replicas = {g: [1, 2, 3] for g in range(7)}
    leaders = {0: 1, 1: 2, 2: 3, 3: 1, 4: 2, 5: 3, 6: 1}
    assert plan_leader_moves(leaders, replicas, {1, 2, 3}) == []


def test_elections_under_way_are_counted_only_where_a_majority_is_up() -> None:
    """A round plans no move while a partition that can elect has no leader up (the
    failover's elections come first): leader unknown, or on a node declared dead, with
    a majority of its replicas up. A partition that cannot elect (a majority down)
    never holds the balancer back, nor does one led by a node that is up."""
    replicas = {1: [1, 2, 3], 2: [2, 3, 1], 3: [3, 1, 2], 4: [1, 2, 3], 5: [2, 3, 4]}
    everyone = {1: 1, 2: 2, 3: 3, 4: 1, 5: 2}
    assert electing(everyone, replicas, lambda n: True) == 0
    node_1_down = lambda n: n != 1  # noqa: E731
    # 1 and 4 were led by node 1 (a majority of their replicas is up); 5 never had node 1
    assert electing(everyone, replicas, node_1_down) == 2
    assert electing({**everyone, 1: 2, 4: -1}, replicas, node_1_down) == 1
    assert electing({**everyone, 1: 2, 4: 3}, replicas, node_1_down) == 0
    # nodes 1 and 2 down: only 5 (on 2, 3 and 4) can elect, whatever the others report
    assert electing({g: -1 for g in replicas}, replicas, lambda n: n not in (1, 2)) == 1
