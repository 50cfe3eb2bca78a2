"""Scripted scenarios against the pure core, in the style of etcd's interaction tests.

Each scenario drives cores by hand and compares a readable trace or state.
"""

from __future__ import annotations

from raftlog.raft.core import CoreOptions, SafetyViolation, reply_in
from raftlog.raft.local_messages import (
    AppendAnswered,
    AppendPersisted,
    Campaign,
    HeartbeatFrom,
    LocalFlushed,
    NodeAlive,
    NodeDead,
    Propose,
    RecoveryLost,
    Tick,
    TransferLeadership,
)
from raftlog.raft.messages import (
    APPEND_FAILURE,
    APPEND_SUCCESS,
    GROUP_UNAVAILABLE_TERM,
    AppendEntriesReply,
    AppendEntriesRequest,
    Heartbeat,
    HeartbeatReply,
    TimeoutNowReply,
    VoteReply,
    VoteRequest,
)
from raftlog.sim.core_net import CoreNet, placed
from raftlog.storage.batch import BatchKind, RecordBatch


def _append(leader: int, target: int, term: int, prev: int, prev_term: int, batches, commit=-1):
    return AppendEntriesRequest(1, leader, target, term, prev, prev_term, commit, True, batches)


def test_election_prevote_then_vote() -> None:
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=True, transfer=False))
    assert net.deliver() == [
        "1->2 prevote term=1: granted",
        "1->3 prevote term=1: granted",
        "1->2 vote term=1: granted",
        "1->3 vote term=1: granted",
    ]
    assert net.state() == [
        "n1 leader term=1 vote=1 leader=1 commit=-1",
        "n2 follower term=1 vote=1 leader=-1 commit=-1",
        "n3 follower term=1 vote=1 leader=-1 commit=-1",
    ]
    # The vote was persisted before it was granted.
    assert net.logs[2].load_vote().voted_for == 1


def test_partitioned_node_prevotes_without_bumping_its_term() -> None:
    net = CoreNet(3)
    net.cut = {3}
    for _ in range(3):
        net.cores[3].step(Campaign(prevote=True, transfer=False))
        net.deliver()
    assert net.state()[2] == "n3 candidate term=0 vote=-1 leader=-1 commit=-1"
    # Back in the network it did not disrupt anything: others still at term 0.
    assert [c.term for c in net.cores.values()] == [0, 0, 0]


def test_stale_term_is_rejected() -> None:
    net = CoreNet(3)
    core = net.cores[2]
    net.request(2, VoteRequest(1, 1, 2, 5, False, -1, 0, False))
    assert core.term == 5
    reply = net.request(2, _append(3, 2, 4, -1, 0, [placed(0, 4)]))
    assert isinstance(reply, AppendEntriesReply)
    assert (reply.result, reply.term) == (APPEND_FAILURE, 5)
    stale_vote = net.request(2, VoteRequest(1, 3, 2, 4, False, 10, 4, False))
    assert isinstance(stale_vote, VoteReply)
    assert (stale_vote.granted, stale_vote.term) == (False, 5)
    hb = net.request(2, HeartbeatFrom(3, Heartbeat(1, 4, -1, 0, 0)))
    assert isinstance(hb, HeartbeatReply)
    assert (hb.result, hb.term) == (APPEND_FAILURE, 5)
    assert core.leader_id == -1


def test_vote_denied_to_candidate_with_shorter_log() -> None:
    net = CoreNet(3)
    net.write(2, placed(0, 1), placed(1, 1))
    net.write(3, placed(0, 1), placed(1, 1))
    net.cores[1].step(Campaign(prevote=True, transfer=False))
    assert net.deliver() == [
        "1->2 prevote term=1: rejected",
        "1->3 prevote term=1: rejected",
    ]
    assert net.cores[1].term == 0


def test_leader_lease_ignores_a_disruptive_candidate() -> None:
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=True, transfer=False))
    net.deliver()
    net.request(2, HeartbeatFrom(1, Heartbeat(1, 1, -1, 0, -1)))
    reply = net.request(2, VoteRequest(1, 3, 2, 2, False, 100, 1, False))
    assert isinstance(reply, VoteReply)
    assert (reply.granted, net.cores[2].term) == (False, 1)
    # ... unless it is a leadership transfer (timeout-now).
    reply = net.request(2, VoteRequest(1, 3, 2, 2, False, 100, 1, True))
    assert isinstance(reply, VoteReply)
    assert (reply.granted, net.cores[2].term) == (True, 2)


def test_priority_voting_lower_priority_waits_and_decays() -> None:
    net = CoreNet(3, priorities={1: 100, 2: 10, 3: 10})
    core = net.cores[2]
    trace = []
    for _ in range(12):
        core._on_election_timeout()
        trace.append(f"target={core.priority_target.value} role={core.role.value}")
        if core.role.value == "candidate":
            break
    # target decays by (n-1)/n per declined round until node 2's priority reaches it.
    assert trace == [
        "target=66 role=follower",
        "target=44 role=follower",
        "target=29 role=follower",
        "target=19 role=follower",
        "target=12 role=follower",
        "target=8 role=follower",
        "target=8 role=candidate",
    ]
    assert net.cores[1].priority_target.may_campaign(net.cores[1].configs.latest, 1)


def test_commit_needs_current_term_entry_flushed_on_majority() -> None:
    """Raft §5.4.2: an old-term entry on a majority is not committed by counting."""
    net = CoreNet(3)
    for n in (1, 2):
        net.write(n, placed(0, 1))
    # Node 1 becomes leader in term 2 with a term-1 entry replicated on 1 and 2.
    net.request(1, VoteRequest(1, 3, 1, 1, False, -1, 0, False))
    net.cores[1].step(Campaign(prevote=False, transfer=False))
    net.deliver()
    leader = net.cores[1]
    assert (leader.role.value, leader.term) == ("leader", 2)
    ok = AppendEntriesReply(1, 2, 1, 2, APPEND_SUCCESS, 0, 0, 0, seq=1)
    net.answer(1, 2, ok, term=2)
    assert leader.commit_index == -1  # term-1 entry on a majority: still not committed
    net.write(1, placed(1, 2), flush=False)  # the new leader's noop, not yet flushed
    ok = AppendEntriesReply(1, 2, 1, 2, APPEND_SUCCESS, 1, 1, 1, seq=2)
    net.answer(1, 2, ok, term=2, prev=0)
    assert leader.commit_index == -1  # flushed on node 2 only; the leader has not flushed
    net.logs[1].flush()
    leader.step(LocalFlushed())
    assert leader.commit_index == 1


def test_dirty_offsets_do_not_commit() -> None:
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False, transfer=False))
    net.deliver()
    leader = net.cores[1]
    net.write(1, placed(0, 1))
    for peer in (2, 3):  # appended but not flushed on the followers
        net.answer(1, peer, AppendEntriesReply(1, peer, 1, 1, 0, 0, -1, 0, 1), term=1)
    assert (leader.progress[2].dirty_offset, leader.progress[2].flushed_offset) == (0, -1)
    assert leader.commit_index == -1
    net.answer(1, 3, AppendEntriesReply(1, 3, 1, 1, 0, 0, 0, 0, 2), term=1)
    assert leader.commit_index == 0


def test_log_repair_plan_truncates_the_divergent_suffix_only() -> None:
    net = CoreNet(3)
    # Follower 2 has 0..1@1 and a divergent 2..4@2; the term-3 leader has 2..3@3.
    net.write(2, placed(0, 1, 2), placed(2, 2, 3))
    (plan,) = net.decide(2, _append(1, 2, 3, 1, 1, [placed(2, 3, 2)])).persist
    assert (plan.truncate_at, [b.base_offset for b in plan.batches]) == (2, [2])
    # A mismatch at prev is refused, reporting the follower's dirty offset for backoff.
    reply = reply_in(net.decide(2, _append(1, 2, 3, 4, 3, [placed(5, 3)])))
    assert isinstance(reply, AppendEntriesReply)
    assert (reply.result, reply.last_dirty_offset) == (APPEND_FAILURE, 4)
    # Duplicates of entries it already has are skipped, not re-appended.
    (plan,) = net.decide(2, _append(1, 2, 3, -1, 0, [placed(0, 1, 2)])).persist
    assert (plan.truncate_at, plan.batches) == (-1, [])


def test_truncating_below_the_commit_index_is_refused() -> None:
    net = CoreNet(3)
    net.write(2, placed(0, 1), placed(1, 1))
    follower = net.cores[2]
    net.request(2, HeartbeatFrom(1, Heartbeat(1, 1, 1, 1, 1)))
    assert follower.commit_index == 1
    try:
        follower.step(_append(3, 2, 2, 0, 1, [placed(1, 2)]))
    except SafetyViolation as exc:
        assert "truncate at 1 <= commit index 1" in str(exc)
    else:
        raise AssertionError("a committed entry was allowed to be truncated")


def test_leadership_transfer_timeout_now_starts_an_election() -> None:
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False, transfer=False))
    net.deliver()
    for n in (2, 3):
        net.request(n, HeartbeatFrom(1, Heartbeat(1, 1, -1, 0, -1)))
    leader = net.cores[1]
    leader.step(TransferLeadership(3))  # 3 matches the leader's (empty) log: timeout-now at once
    assert not leader.accepting_writes
    assert net.deliver() == [
        "1->3 timeout-now",
        "3->1 vote term=2: granted",
        "3->2 vote term=2: granted",
    ]
    assert net.state() == [
        "n1 follower term=2 vote=3 leader=-1 commit=-1",
        "n2 follower term=2 vote=3 leader=-1 commit=-1",
        "n3 leader term=2 vote=3 leader=3 commit=-1",
    ]


def test_leadership_transfer_waits_for_the_target_to_catch_up_then_resends() -> None:
    """The core decides the transfer: no timeout-now while the target lags; once a reply
    shows it matches the log end, timeout-now goes in the ready; a refusal makes the
    next tick send it again; the transfer ends after ``transfer_timeout_ticks`` without
    a takeover."""
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False, transfer=False))
    net.deliver()
    leader = net.cores[1]
    leader.step(Propose([RecordBatch.create(b"x")], flush=True))
    net.process(1)
    leader.step(TransferLeadership(3))
    sent = [m for _t, m in leader.take_ready().messages]
    assert sent == []  # 3 has not matched offset 0 yet (the append to it is in flight)
    reply = AppendEntriesReply(1, 3, 1, leader.term, 0, 0, 0, 0, leader.next_seq(3))
    net.answer(1, 3, reply)
    messages = leader.take_ready().messages
    assert [(t, type(m).__name__) for t, m in messages] == [(3, "TimeoutNowRequest")]
    leader.step(TimeoutNowReply(1, 3, 1, leader.term, False))
    leader.step(Tick())
    assert [type(m).__name__ for _t, m in leader.take_ready().messages] == ["TimeoutNowRequest"]
    for _ in range(leader.options.transfer_timeout_ticks + 1):
        leader.step(Tick())
    assert leader.transfer_target == -1  # given up (writes resume while it leads)


def test_an_append_reaching_below_a_compacted_log_start_is_taken_not_truncated() -> None:
    """A follower whose log starts at 6 (compacted, or a snapshot installed) gets an append
    from prev 2: the entries below its start are committed, so equal to the leader's; it
    skips them, appends what is new and matches, instead of seeing a conflict at 3 (and
    truncating committed entries). Found by the simulation once it compacted logs."""
    net = CoreNet(3)
    follower, log = net.cores[2], net.logs[2]
    log.append([placed(i, 1) for i in range(10)])
    log.flush()
    net.deliver_append(2, _append(1, 2, 1, 9, 1, [], commit=9))
    assert follower.commit_index == 9
    log.prefix_truncate(6)
    assert (log.start_offset, log.term_at(5), log.term_at(3)) == (6, 1, None)
    req = _append(1, 2, 1, 2, 1, [placed(i, 1) for i in range(3, 11)])
    (plan,) = net.decide(2, req).persist
    assert plan.truncate_at == -1
    assert [b.base_offset for b in plan.batches] == [10]
    log.append(plan.batches)
    reply = reply_in(net.decide(2, AppendPersisted(req)))
    assert isinstance(reply, AppendEntriesReply)
    assert (reply.result, reply.last_matched_offset) == (0, 10)
    # prev inside the log still has to match
    bad = net.request(2, _append(1, 2, 1, 7, 2, [placed(8, 2)]))
    assert isinstance(bad, AppendEntriesReply) and bad.result == 1


def test_recovery_gives_up_after_three_failures_in_a_row_as_the_core_decides() -> None:
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False, transfer=False))
    net.deliver()
    leader = net.cores[1]
    term = leader.term

    def lost(node: int, term: int) -> bool:
        """Step a lost recovery request in: whether the core asks to send it again."""
        return node in net.step(1, RecoveryLost(node, term)).recovery_retry

    assert [lost(2, term) for _ in range(3)] == [True, True, False]
    assert lost(2, term)  # counted afresh after giving up
    net.answer(1, 2, HeartbeatReply(1, term, 0, -1, -1, -1, leader.next_seq(2)))
    assert leader.progress[2].recovery_failures == 0  # a usable reply resets the count
    assert not lost(2, term + 1)  # another term's recovery stops
    assert not lost(9, term)  # not a follower


def test_no_recovery_runs_to_a_node_declared_dead_until_it_is_back() -> None:
    """A follower in probe on a node declared dead is not recovered: every chunk would
    fail, and after a kill -9 each of the thousand groups a live node took over ran a
    recovery to the dead node, restarted by each write. Its return asks for it again.
    (Planted: the dead-node check taken out of ``_request_recovery``, the proposal's
    ready names node 3.)"""
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False, transfer=False))
    net.deliver()
    leader = net.cores[1]
    for p in (2, 3):
        leader.progress[p].become_probe(0)  # both behind: a recovery each, as a rule
    assert sorted(net.step(1, Propose([placed(0, leader.term)], flush=True)).recover) == [2, 3]
    net.step(1, NodeDead(3))
    for _ in range(3):
        ready = net.step(1, Propose([placed(0, leader.term)], flush=True))
        assert ready.recover == [2], ready.recover
    assert net.step(1, NodeAlive(3)).recover == [3]


def test_the_controller_campaigns_at_the_next_tick_after_the_verdict() -> None:
    """``campaign_first`` (the controller group): the voter named to campaign when its
    leader's node is declared dead prevotes at the next tick; a partition's waits
    VERDICT_CAMPAIGN_TICKS plus a spread (here at least 3 ticks), so that the
    controller, whose read barrier the new controller leader's metadata answers wait
    on, elects ahead of the thousand partitions told at the same verdict."""

    def ticks_to_campaign(campaign_first: bool) -> int:
        net = CoreNet(
            3, options=CoreOptions(election_timeout_ticks=10, campaign_first=campaign_first)
        )
        net.cores[1].step(Campaign(prevote=False, transfer=False))
        net.deliver()
        term = net.cores[1].term
        for node in (2, 3):
            net.request(node, HeartbeatFrom(1, Heartbeat(1, term, -1, 0, -1)))
        net.cut = {1}
        for node in (2, 3):
            net.step(node, NodeDead(1))
        named = net.cores[3]  # group 1: the live voter at 1 modulo 2
        for ticks in range(1, 30):
            net.step(3, Tick())
            if named.role.value == "candidate":
                return ticks
        raise AssertionError("never campaigned")

    assert ticks_to_campaign(True) == 1
    assert ticks_to_campaign(False) >= 3


def test_the_named_voter_skips_the_prevote_only_when_the_leaders_port_refused() -> None:
    """A verdict on a refused link (nothing listens at the dead leader's address) lets
    the voter it names campaign with a vote at once: no prevote round (at 3,000
    partitions a failover's thousand elections each spent one more round trip on two
    busy loops). A verdict on silence alone keeps the prevote: the leader may still
    serve the others across an asymmetric partition, and a vote would raise the term
    under it. Priorities do not pick the named voter (group 1: the live voter at 1
    modulo 2, node 3, whatever the priorities)."""

    def first_request(refused: bool) -> VoteRequest:
        net = CoreNet(3, priorities={1: 3, 2: 2, 3: 1})
        net.cores[1].step(Campaign(prevote=False, transfer=False))
        net.deliver()
        term = net.cores[1].term
        for node in (2, 3):
            net.request(node, HeartbeatFrom(1, Heartbeat(1, term, -1, 0, -1)))
        net.cut = {1}
        for node in (2, 3):
            net.step(node, NodeDead(1, refused))
        for _ in range(30):
            ready = net.step(3, Tick())
            sent = [m for _, m in ready.messages if isinstance(m, VoteRequest)]
            if sent:
                assert sent[0].term == term + 1
                return sent[0]
        raise AssertionError("node 3 never campaigned")

    assert first_request(refused=True).prevote is False
    assert first_request(refused=False).prevote is True


def test_a_leader_on_a_node_declared_dead_is_reported_as_none() -> None:
    """``live_leader_id``: what the node reports as the partition's leader (metadata,
    NOT_LEADER hints, the leaderless gauge). A follower keeps ``leader_id`` until its
    timeout fires, but once the leader's node is declared dead it reports none (a
    dead node named as leader sent clients and held metadata answers to a closed port
    until the election ended); heard again, the leader is reported again."""
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False, transfer=False))
    net.deliver()
    term = net.cores[1].term
    follower = net.cores[2]
    net.request(2, HeartbeatFrom(1, Heartbeat(1, term, -1, 0, -1)))
    assert (follower.leader_id, follower.live_leader_id) == (1, 1)
    net.step(2, NodeDead(3))  # another node: the leader stands
    assert follower.live_leader_id == 1
    net.step(2, NodeDead(1))
    assert (follower.leader_id, follower.live_leader_id) == (1, -1)
    net.step(2, NodeAlive(1))
    assert follower.live_leader_id == 1


def test_a_stale_mismatch_below_the_log_start_still_asks_for_a_snapshot() -> None:
    """A follower that waited on a request it cannot take answers after the heartbeats
    sent meanwhile, so its mismatch reply carries their (higher, already applied) seq:
    stale. Below the leader's log start it must still move the follower to snapshot,
    else recovery resends the same chunk forever (a partition move onto a new node hung
    1 run in 3 this way)."""
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False, transfer=False))
    net.deliver()
    leader, log = net.cores[1], net.logs[1]
    log.append([placed(i, 1) for i in range(6)])
    log.flush()
    log.prefix_truncate(4)
    term = leader.term
    # 3 to probe (recovery owns it): an append to it was not delivered
    lost = AppendEntriesRequest(1, 1, 3, term, -1, 0, -1, False, [], seq=-1)
    leader.step(AppendAnswered(3, lost, None))
    assert leader.progress[3].state.value == "probe"
    request_seq = leader.next_seq(3)
    heartbeat_seq = leader.next_seq(3)
    net.answer(1, 3, HeartbeatReply(1, term, 0, -1, -1, -1, heartbeat_seq), prev=3)
    stale = AppendEntriesReply(1, 3, 1, term, 1, -1, -1, -1, heartbeat_seq)  # raised seq
    assert stale.seq > request_seq
    net.answer(1, 3, stale, prev=3)
    assert leader.stale_replies == 1
    assert leader.progress[3].state.value == "snapshot"
    assert 3 in leader.take_ready().recover


def test_leader_without_a_quorum_steps_down() -> None:
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False, transfer=False))
    net.deliver()
    leader = net.cores[1]
    leader.take_ready()
    for _ in range(10):
        leader.step(Tick())
    assert leader.role.value == "follower"
    assert leader.take_ready().stepped_down


def test_pre_candidates_do_not_hold_a_lease_against_each_other() -> None:
    """Found by the simulator: after the leader is cut off, the two followers both
    pre-campaign; each had reset its own timer and still remembered the leader, so each
    refused the other's prevote as if a leader lease were in force, and no election
    succeeded for seconds. A pre-candidate forgets its leader, as etcd's does."""
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=True, transfer=False))
    net.deliver()
    for n in (2, 3):
        net.request(n, HeartbeatFrom(1, Heartbeat(1, 1, -1, 0, -1)))
    net.cut = {1}
    net.cores[3].step(Campaign(prevote=True, transfer=False))  # its timer fired first
    net.deliver()
    assert net.cores[3].leader_id == -1
    net.cores[2].step(Campaign(prevote=True, transfer=False))
    trace = net.deliver()
    assert "3->2 prevote term=2: rejected" not in trace  # (already answered above)
    assert "2->3 prevote term=2: granted" in trace, trace
    assert net.cores[2].is_leader and net.cores[2].term == 2


def test_a_leader_places_data_batches_in_timestamp_order() -> None:
    """A data batch stamped before one the leader already placed (its request overtaken
    on the way to the log, or behind rm_stm's later-stamped barrier) is placed with the
    later time, so data timestamps never fall along the log; control batches keep
    theirs (a no-op batch at 0 stays 0). The followers are sent the same."""
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False, transfer=False))
    net.deliver()
    leader = net.cores[1]
    stamps = [5_000, 3_000, 7_000, 6_000]
    barrier = RecordBatch.create(b"", kind=BatchKind.NOOP, timestamp_ms=8_000)
    noop = RecordBatch.create(b"", kind=BatchKind.NOOP, timestamp_ms=0)
    placed = []
    for ms in stamps:
        leader.step(Propose([RecordBatch.create(b"x", timestamp_ms=ms)], flush=True))
        placed += net.carry_out(1).append
    leader.step(Propose([barrier, RecordBatch.create(b"y", timestamp_ms=7_500), noop], True))
    placed += net.carry_out(1).append
    assert [b.timestamp_ms for b in placed] == [5_000, 5_000, 7_000, 7_000, 8_000, 8_000, 0]
    sent = [b.timestamp_ms for o in net.outbox if o.target == 2 for b in o.request.batches]
    # what the followers are sent (and store) is what the leader placed
    assert len(sent) >= len(stamps) and sent == [b.timestamp_ms for b in placed][: len(sent)]


def test_a_voter_that_does_not_host_the_group_yet_is_asked_again_at_the_next_tick() -> None:
    """A new topic's replicas each create the group as they apply the controller's
    command, so the preferred voter's first vote requests can reach a node that has not
    yet: it answers "unavailable" (GROUP_UNAVAILABLE_TERM). That is no refusal: the
    candidate asks again at its next tick, within the round, and wins as soon as the
    group is there. Counted as refusals, the round was lost and the group stayed
    leaderless until the election timeout (10 ticks here)."""
    net = CoreNet(3, priorities={1: 3, 2: 2, 3: 1}, options=CoreOptions(
        election_timeout_ticks=10, first_election_ticks=1
    ))  # fmt: skip
    candidate = net.cores[1]

    def vote_requests(ready) -> dict[int, VoteRequest]:
        return {t: m for t, m in ready.messages if isinstance(m, VoteRequest)}

    first = vote_requests(net.step(1, Tick()))
    assert sorted(first) == [2, 3]  # it campaigns at its first tick
    for peer, req in first.items():  # neither hosts the group yet
        candidate.step(
            VoteReply(1, peer, 1, GROUP_UNAVAILABLE_TERM, req.prevote, False, False)
        )  # fmt: skip
    net.unsent[1] = []
    again = vote_requests(net.step(1, Tick()))
    assert again == first  # the same round's requests, asked again
    net.unsent[1] = [(t, m) for t, m in again.items()]
    net.deliver()  # now they host it: the round is won
    assert candidate.is_leader
    assert candidate.ticks == 2
