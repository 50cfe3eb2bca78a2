"""An idle follower is heartbeated every ``idle_heartbeat_ticks``, a busy one every round.

A simulated 3-node group with the production timing (50 ms ticks and heartbeat
rounds, election timeout 10 ticks, idle heartbeats every 3 ticks). Heartbeats are
counted where the leader's core makes them. Idle, each follower gets about a
third of the rounds' heartbeats, and the group keeps its leader and term: three
heartbeats per election timeout keep the followers' timers and the leader's quorum
check satisfied. Under writes, every round heartbeats every follower. With the
idle interval planted above the election timeout, the same idle check fails: the
followers time out and elect another leader, so the check can fail.

Why: a cluster's idle cost was its heartbeats. With 150 partitions (3 replicas)
an idle 3-node local cluster took 0.82 cores, 1.81 with 450, before this.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from raftlog.raft.core import RaftCore
from raftlog.raft.messages import Heartbeat
from raftlog.raft.options import ConsensusOptions
from raftlog.sim.cluster import SimCluster, sim_options
from raftlog.sim.loop import run_virtual

HEARTBEAT_INTERVAL_S = 0.05  # NodeConfig's default: one round per tick
WATCH_S = 10.0
ROUNDS = WATCH_S / HEARTBEAT_INTERVAL_S


def _count_heartbeats(core: RaftCore) -> Counter[int]:
    """Count, by follower, the heartbeats ``core`` makes from now on."""
    counts: Counter[int] = Counter()
    made = core.heartbeat_for

    def counting(node: int) -> Heartbeat:
        counts[node] += 1
        return made(node)

    core.heartbeat_for = counting  # type: ignore[method-assign]
    return counts


def _watch(idle_heartbeat_ticks: int, writes: bool) -> tuple[Counter[int], bool, list[int]]:
    """Heartbeats by follower over WATCH_S, whether the first leader kept leading, and
    every node's term before and after, flattened."""

    async def scenario() -> tuple[Counter[int], bool, list[int]]:
        options = sim_options()
        options.idle_heartbeat_ticks = idle_heartbeat_ticks
        cluster = SimCluster(3, seed=11, options=options, heartbeat_interval_s=HEARTBEAT_INTERVAL_S)
        await cluster.start()
        await cluster.write(b"first")
        leader = await cluster.wait_for_leader()
        await asyncio.sleep(1.0)  # the commit index reaches the followers: idle from here
        terms = [n.consensus.core.term for n in cluster.nodes.values()]
        counts = _count_heartbeats(leader.consensus.core)
        loop = asyncio.get_running_loop()
        end = loop.time() + WATCH_S
        n = 0
        while loop.time() < end:  # bounded by the virtual clock
            if writes:
                await cluster.write(f"w{n}".encode())
                n += 1
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
        kept = cluster.leader() is leader
        terms += [n.consensus.core.term for n in cluster.nodes.values()]
        await cluster.stop()
        return counts, kept, terms

    return run_virtual(scenario())


def test_an_idle_follower_gets_a_heartbeat_every_third_tick_and_the_leader_stays() -> None:
    counts, kept, terms = _watch(idle_heartbeat_ticks=3, writes=False)
    assert len(counts) == 2, counts
    for follower, n in counts.items():
        # one round in three (the 4th tick after the last, when rounds and ticks skew)
        assert ROUNDS / 4.5 <= n <= ROUNDS / 2.5, (follower, n, ROUNDS)
    assert kept, "the idle group lost its leader"
    assert len(set(terms)) == 1, f"terms moved while idle: {terms}"


def test_a_follower_of_a_group_taking_writes_gets_a_heartbeat_every_round() -> None:
    counts, kept, _ = _watch(idle_heartbeat_ticks=3, writes=True)
    assert len(counts) == 2, counts
    for follower, n in counts.items():
        assert n >= ROUNDS * 0.8, (follower, n, ROUNDS)
    assert kept


def test_idle_heartbeats_rarer_than_the_election_timeout_lose_the_leader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The planted fault: idle heartbeats every 25 ticks, longer than any election
    timeout (10-19 ticks). The followers time out: the idle check above fails. (The
    fault is planted past ConsensusOptions.validate, which refuses such options.)"""
    monkeypatch.setattr(ConsensusOptions, "validate", lambda self: None)
    _, kept, terms = _watch(idle_heartbeat_ticks=25, writes=False)
    assert not kept or len(set(terms)) > 1, f"no election without heartbeats: {terms}"
