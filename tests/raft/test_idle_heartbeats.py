"""An idle follower is heartbeated every ``idle_heartbeat_ticks``, and so is a busy one.

A simulated 3-node group with the production timing (50 ms ticks and heartbeat
rounds, election timeout 10 ticks, idle heartbeats every 3 ticks). Idle, each follower gets about a
third of the rounds' heartbeats, and the group keeps its leader and term: three
heartbeats per election timeout keep the followers' timers and the leader's quorum
check satisfied. Under writes (one append a tick), the follower that flushes each
append gets no more: the appends do a heartbeat's work (Redpanda's heartbeat manager
skips followers an append went to lately); the one that flushes by delay still gets
one every round, since its heartbeat replies carry its flushes. The group keeps its
leader, and once the writes stop the followers learn the last commit index within a
few ticks. Heartbeats are counted as they leave the core, in the readies of the
leader's steps; terms and commit indexes are read through ``RaftCore.status()``. With the
idle interval planted above the election timeout, the same idle check fails: the
followers time out and elect another leader, so the check can fail.

Why: a cluster's idle cost was its heartbeats. With 150 partitions (3 replicas)
an idle 3-node local cluster took 0.82 cores, 1.81 with 450, before this. Under the
Spark sink's writes, heartbeats were 7-12% of the nodes' CPU samples.
"""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from raftlog.raft.consensus import Consensus
from raftlog.raft.core import Message, Ready
from raftlog.raft.options import ConsensusOptions
from raftlog.sim.cluster import SimCluster, sim_options
from raftlog.sim.loop import run_virtual

HEARTBEAT_INTERVAL_S = 0.05  # NodeConfig's default: one round per tick
WATCH_S = 10.0
ROUNDS = WATCH_S / HEARTBEAT_INTERVAL_S


def _count_heartbeats(consensus: Consensus) -> Counter[int]:
    """Count, by follower, the heartbeats that leave ``consensus``'s core from now on:
    those in the readies of the messages stepped into it (a heartbeat round's)."""
    counts: Counter[int] = Counter()
    step = consensus.step

    def counting(message: Message) -> Ready:
        ready = step(message)
        counts.update(node for node, _hb in ready.heartbeats)
        return ready

    consensus.step = counting  # type: ignore[method-assign]
    return counts


SETTLE_S = 0.3  # 6 ticks after the last write


def _watch(
    idle_heartbeat_ticks: int, writes: bool
) -> tuple[Counter[int], bool, list[int], list[int]]:
    """Heartbeats by follower over WATCH_S, whether the first leader kept leading, every
    node's term before and after, flattened, and every node's commit index SETTLE_S
    after the watch (the leader's first)."""

    async def scenario() -> tuple[Counter[int], bool, list[int], list[int]]:
        options = sim_options()
        options.idle_heartbeat_ticks = idle_heartbeat_ticks
        # The cadence of a group that is awake: quiesced, an idle group gets none
        # (tests/raft/testdata/quiesce_idle_group.txt, tests/raft/test_node_clock.py).
        options.quiesce = False
        cluster = SimCluster(3, seed=11, options=options, heartbeat_interval_s=HEARTBEAT_INTERVAL_S)
        await cluster.start()
        await cluster.write(b"first")
        leader = await cluster.wait_for_leader()
        await asyncio.sleep(1.0)  # the commit index reaches the followers: idle from here
        terms = [n.consensus.core.status().term for n in cluster.nodes.values()]
        counts = _count_heartbeats(leader.consensus)
        loop = asyncio.get_running_loop()
        end = loop.time() + WATCH_S
        n = 0
        while loop.time() < end:  # bounded by the virtual clock
            if writes:
                await cluster.write(f"w{n}".encode())
                n += 1
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
        kept = cluster.leader() is leader
        terms += [n.consensus.core.status().term for n in cluster.nodes.values()]
        await asyncio.sleep(SETTLE_S)
        commits = [leader.consensus.core.status().commit_index] + [
            n.consensus.core.status().commit_index
            for n in cluster.nodes.values()
            if n is not leader
        ]
        await cluster.stop()
        return counts, kept, terms, commits

    return run_virtual(scenario())


def test_an_idle_follower_gets_a_heartbeat_every_third_tick_and_the_leader_stays() -> None:
    counts, kept, terms, _ = _watch(idle_heartbeat_ticks=3, writes=False)
    assert len(counts) == 2, counts
    for follower, n in counts.items():
        # one round in three (the 4th tick after the last, when rounds and ticks skew)
        assert ROUNDS / 4.5 <= n <= ROUNDS / 2.5, (follower, n, ROUNDS)
    assert kept, "the idle group lost its leader"
    assert len(set(terms)) == 1, f"terms moved while idle: {terms}"


def test_a_flushed_follower_taking_appends_gets_no_more_heartbeats_all_learn_the_commit() -> None:
    counts, kept, terms, commits = _watch(idle_heartbeat_ticks=3, writes=True)
    assert len(counts) == 2, counts
    # the follower asked to flush every append (the quorum's) gets a third of the rounds;
    # the other flushes by delay, and its heartbeat replies are how the leader learns of
    # those flushes: it still gets one every round
    fewer, more = sorted(counts.values())
    assert ROUNDS / 4.5 <= fewer <= ROUNDS / 2.5, (counts, ROUNDS)
    assert more >= ROUNDS * 0.8, (counts, ROUNDS)
    assert kept, "the group taking writes lost its leader"
    assert len(set(terms)) == 1, f"terms moved under writes: {terms}"
    assert commits[0] >= ROUNDS * 0.9, commits  # the writes committed
    assert len(set(commits)) == 1, f"a follower missed the last commit index: {commits}"


def test_without_heartbeats_after_appends_the_followers_miss_the_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The planted fault: a follower an append went to is never heartbeated again (every
    node's readies lose the heartbeats to a follower that one of its earlier readies
    sent an append). The leader's first append (its no-op) ends the heartbeats: either
    the followers time out before the writes begin and no leader settles, or the writes'
    appends keep the leader until they stop, and then the followers miss the last
    commit index (or time out and elect another): the check above fails."""
    step = Consensus.step
    appended: dict[int, set[int]] = {}  # by the Consensus's id: followers sent an append

    def never_after_an_append(self: Consensus, message: Message) -> Ready:
        ready = step(self, message)
        sent = appended.setdefault(id(self), set())
        sent.update(node for node, _req in ready.appends)
        ready.heartbeats[:] = [(node, hb) for node, hb in ready.heartbeats if node not in sent]
        return ready

    monkeypatch.setattr(Consensus, "step", never_after_an_append)
    try:
        _, kept, terms, commits = _watch(idle_heartbeat_ticks=3, writes=True)
    except TimeoutError as exc:
        assert "no leader" in str(exc)
        return
    assert not kept or len(set(terms)) > 1 or len(set(commits)) > 1, (kept, terms, commits)


def test_idle_heartbeats_rarer_than_the_election_timeout_lose_the_leader(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The planted fault: idle heartbeats every 25 ticks, longer than any election
    timeout (10-19 ticks). The followers time out: the idle check above fails (or no
    leader settles at all: after its first append, a leader goes as long without
    heartbeating). (The
    fault is planted past ConsensusOptions.validate, which refuses such options.)"""
    monkeypatch.setattr(ConsensusOptions, "validate", lambda self: None)
    try:
        _, kept, terms, _ = _watch(idle_heartbeat_ticks=25, writes=False)
    except TimeoutError as exc:  # the followers time out before a leader settles
        assert "no leader" in str(exc)
        return
    assert not kept or len(set(terms)) > 1, f"no election without heartbeats: {terms}"
