"""A brand-new group's preferred voter campaigns after ``first_election_ticks``.

A topic's partitions are new groups: without this, none had a leader for a whole
randomized election timeout (0.5-1 s at 10 ticks of 50 ms), most of the time of
a small ``df.write`` into a new topic. Only a group that never had a term or an
entry hurries, and only on its highest-priority voter, so the others do not race
it and a restarted group still waits out its timeout (its old leader may live).
"""

from __future__ import annotations

import random

import pytest

from raftlog.raft.configuration import Configuration, ConfigurationHistory
from raftlog.raft.core import CoreOptions, RaftCore, Role
from raftlog.raft.local_messages import Tick
from raftlog.sim.core_net import CoreNet, placed
from raftlog.storage.api import VoteState
from raftlog.storage.memory import MemoryLog

FIRST = 2
PRIORITIES = {1: 3, 2: 2, 3: 1}


def _net(first_election_ticks: int, seed: int = 0) -> CoreNet:
    """A new 3-voter group; ``seed`` varies every core's election timer."""
    net = CoreNet(
        3,
        priorities=PRIORITIES,
        options=CoreOptions(election_timeout_ticks=10, first_election_ticks=first_election_ticks),
    )
    for node in net.cores:
        net.cores[node] = _core(
            VoteState(), net.logs[node], node=node, rng=random.Random(seed * 10 + node),
            first_election_ticks=first_election_ticks,
        )  # fmt: skip
    return net


def _tick_all(net: CoreNet, ticks: int) -> None:
    for _ in range(ticks):
        for core in net.cores.values():
            core.step(Tick())
        net.deliver()


@pytest.mark.parametrize("seed", range(20))
def test_the_preferred_voter_of_a_new_group_leads_after_the_first_election_ticks(
    seed: int,
) -> None:
    net = _net(FIRST, seed)
    _tick_all(net, FIRST - 1)
    assert [c.role for c in net.cores.values()] == [Role.FOLLOWER] * 3
    _tick_all(net, 1)
    assert net.cores[1].role is Role.LEADER, net.state()
    assert [net.cores[n].role for n in (2, 3)] == [Role.FOLLOWER, Role.FOLLOWER]


def test_without_the_option_a_new_group_waits_a_whole_election_timeout() -> None:
    net = _net(0)
    _tick_all(net, 9)  # the timeout is drawn from [10, 20) ticks
    assert [c.role for c in net.cores.values()] == [Role.FOLLOWER] * 3
    assert all(c.term == 0 for c in net.cores.values())


def test_only_the_highest_priority_voter_hurries() -> None:
    net = _net(FIRST)
    assert net.cores[1].timer.timeout == FIRST
    assert all(net.cores[n].timer.timeout >= 10 for n in (2, 3))


def _core(
    vote: VoteState,
    log: MemoryLog,
    voters: tuple[int, ...] = (1, 2, 3),
    node: int = 1,
    rng: random.Random | None = None,
    first_election_ticks: int = FIRST,
) -> RaftCore:
    return RaftCore(
        1,
        node,
        ConfigurationHistory(Configuration.of(voters, (), PRIORITIES)),
        log,
        vote,
        -1,
        CoreOptions(election_timeout_ticks=10, first_election_ticks=first_election_ticks),
        rng or random.Random(node),
    )


def test_a_group_that_had_a_term_waits_its_timeout() -> None:
    """Restarted after an election: its old leader may still serve, so no hurry."""
    assert _core(VoteState(term=1, voted_for=2), MemoryLog()).timer.timeout >= 10


def test_a_group_with_entries_waits_its_timeout() -> None:
    """Term 0 on disk but an entry in the log (a vote state lost or never saved):
    the log says a leader existed, so no hurry either."""
    log = MemoryLog()
    log.append([placed(0, 1)])
    assert log.dirty_offset == 0
    assert _core(VoteState(), log).timer.timeout >= 10


def test_a_voter_not_of_the_highest_priority_waits_its_timeout() -> None:
    core = _core(VoteState(), MemoryLog(), voters=(2, 3, 4))  # node 1 is not a voter
    assert core.timer.timeout >= 10
