"""Priority voting after the top-priority leader dies: the next one campaigns at once.

Redpanda-style priorities order elections (the highest live priority should win),
but a follower whose leader went silent knows that leader is not serving. Counting
it in the first target made every survivor decline one whole election timeout
first, which doubled the time from a leader kill to the first acknowledged write.
"""

from __future__ import annotations

from raftlog.raft.local_messages import Campaign, HeartbeatFrom, HeartbeatRound
from raftlog.sim.core_net import CoreNet


def _elect_node_1(net: CoreNet) -> None:
    net.cores[1].step(Campaign(prevote=True))
    net.deliver()
    net.cores[1].step(HeartbeatRound())
    for peer, hb in net.carry_out(1).heartbeats:  # the first tells the followers who leads
        net.request(peer, HeartbeatFrom(1, hb))
    assert [net.cores[n].leader_id for n in (1, 2, 3)] == [1, 1, 1]


def test_next_priority_campaigns_at_the_first_timeout_after_its_leader_went_silent() -> None:
    net = CoreNet(3, priorities={1: 3, 2: 2, 3: 1})
    _elect_node_1(net)
    second, third = net.cores[2], net.cores[3]
    # node 1 is dead: its followers' timers fire without hearing from it
    second._on_election_timeout()
    assert second.role.value == "candidate"  # no round wasted declining
    third._on_election_timeout()
    assert third.role.value == "follower"  # node 2 outranks it; it waits one round
    assert third.priority_target.value == 1
    third._on_election_timeout()
    assert third.role.value == "candidate"  # and then campaigns, should node 2 be dead too


def test_a_follower_that_never_had_a_leader_still_waits_for_the_top_priority() -> None:
    net = CoreNet(3, priorities={1: 3, 2: 2, 3: 1})
    net.cores[2]._on_election_timeout()
    assert net.cores[2].role.value == "follower"
    assert net.cores[2].priority_target.value == 2


def test_a_lower_priority_follower_whose_timer_fired_grants_the_next_ones_prevote() -> None:
    """Node 3's timer fires first: it may not campaign (node 2 outranks it), and it must
    not go on protecting the silent leader's lease either. Kept, it refused node 2's
    prevote, and node 3 itself won a timeout later (1.3-1.8 s failovers)."""
    net = CoreNet(3, priorities={1: 3, 2: 2, 3: 1})
    _elect_node_1(net)
    net.cut.add(1)  # node 1 is dead
    third, second = net.cores[3], net.cores[2]
    third._on_election_timeout()
    assert third.role.value == "follower"
    second._on_election_timeout()
    trace = net.deliver()
    assert "2->3 prevote term=2: granted" in trace, trace
    assert second.role.value == "leader", trace
    assert third.leader_id in (-1, 2)


def test_the_election_counters_tell_a_deferred_campaign_a_lease_refusal_and_a_win() -> None:
    """What the raftlog_raft_* election metrics sum over a node's groups: the test of a
    failover that stalls is which of these grows."""
    net = CoreNet(3, priorities={1: 3, 2: 2, 3: 1})
    _elect_node_1(net)
    assert net.cores[1].elections["prevotes_started"] == 1
    assert net.cores[1].elections["votes_started"] == 1
    assert net.cores[1].elections["leaderships_won"] == 1
    third, second = net.cores[3], net.cores[2]
    # node 3 may not campaign while node 2 outranks it
    third._on_election_timeout()
    assert third.elections["campaigns_deferred"] == 1
    assert third.elections["prevotes_started"] == 0
    # node 2 campaigns while node 1 still leads: node 3 grants (its timer fired, so it
    # holds no lease), node 1 refuses both the prevote and the vote as the leader
    second._on_election_timeout()
    trace = net.deliver()
    assert second.elections["prevotes_started"] == 1, trace
    assert second.elections["votes_started"] == 1, trace
    assert net.cores[1].elections["votes_refused_lease"] == 2, trace
    assert third.elections["votes_refused_lease"] == 0, trace
    assert second.elections["leaderships_won"] == 1, trace
    assert [c.elections["votes_refused_log"] for c in net.cores.values()] == [0, 0, 0]
