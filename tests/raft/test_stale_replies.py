"""Replies are matched to requests: a reply older than the newest applied is ignored."""

from __future__ import annotations

import pytest

from raftlog.raft import mutations
from raftlog.raft.core import RaftCore, reply_in
from raftlog.raft.local_messages import (
    AppendPersisted,
    Campaign,
    HeartbeatAnswered,
    HeartbeatFrom,
    HeartbeatRound,
    LocalFlushed,
    StepDown,
)
from raftlog.raft.messages import (
    APPEND_FAILURE,
    APPEND_SUCCESS,
    AppendEntriesReply,
    AppendEntriesRequest,
    Heartbeat,
    HeartbeatReply,
)
from raftlog.sim.core_net import CoreNet, placed


def _leader_with_unflushed_entry() -> tuple[CoreNet, RaftCore]:
    """Node 1 leads term 1 of 3 nodes and has flushed entry 0; no follower has it yet."""
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False))
    net.deliver()
    leader = net.cores[1]
    assert leader.is_leader
    net.write(1, placed(0, 1))
    leader.step(LocalFlushed())
    return net, leader


def _heartbeat(net: CoreNet, follower: int) -> Heartbeat:
    """Leader 1's heartbeat to ``follower``, made now (it draws a seq), not delivered."""
    net.cores[1].step(HeartbeatRound(only=follower))
    ((_, hb),) = net.carry_out(1).heartbeats
    return hb


def _hb_reply(net: CoreNet, leader: int, hb: Heartbeat) -> HeartbeatReply:
    """Follower 2's reply to ``hb`` from ``leader``."""
    reply = net.request(2, HeartbeatFrom(leader, hb))
    assert isinstance(reply, HeartbeatReply)
    return reply


def _reply(peer: int, seq: int, matched: int, flushed: int, dirty: int) -> AppendEntriesReply:
    return AppendEntriesReply(1, peer, 1, 1, APPEND_SUCCESS, matched, flushed, dirty, seq)


def test_reversed_replies_do_not_count_a_stale_flushed_offset() -> None:
    """Follower 2 flushed entry 0 (reply seq 1), then crashed losing it (reply seq 2).

    Delivered in reverse order, the older reply (flushed 0) must not overwrite
    the newer (flushed -1): otherwise the leader counts entry 0 flushed on a
    majority (itself and node 2) and commits an entry only it holds.
    """
    net, leader = _leader_with_unflushed_entry()
    seq_a, seq_b = leader.next_seq(2), leader.next_seq(2)
    older = _reply(2, seq_a, matched=0, flushed=0, dirty=0)
    newer = _reply(2, seq_b, matched=-1, flushed=-1, dirty=-1)
    net.answer(1, 2, newer)
    net.answer(1, 2, older)
    p = leader.progress[2]
    assert (p.flushed_offset, p.dirty_offset, p.durable_offset) == (-1, -1, -1)
    assert leader.commit_index == -1
    assert leader.stale_replies == 1


def test_a_duplicated_reply_is_applied_once() -> None:
    net, leader = _leader_with_unflushed_entry()
    seq = leader.next_seq(3)
    reply = _reply(3, seq, matched=0, flushed=0, dirty=0)
    net.answer(1, 3, reply)
    assert leader.commit_index == 0
    net.answer(1, 3, reply)
    assert leader.stale_replies == 1


def test_a_late_heartbeat_reply_is_ignored_after_a_newer_append_reply() -> None:
    net, leader = _leader_with_unflushed_entry()
    hb = _heartbeat(net, 2)  # draws a seq before the append's
    append_seq = leader.next_seq(2)
    net.answer(1, 2, _reply(2, append_seq, 0, 0, 0))
    assert leader.commit_index == 0
    late = HeartbeatReply(1, 1, APPEND_SUCCESS, -1, -1, -1, hb.seq)
    leader.step(HeartbeatAnswered(2, hb, late))
    assert leader.progress[2].flushed_offset == 0


def test_an_unsequenced_reply_is_never_applied() -> None:
    net, leader = _leader_with_unflushed_entry()
    net.answer(1, 2, AppendEntriesReply(1, 2, 1, 1, 0, 0, 0, 0))
    assert leader.commit_index == -1


def test_followers_echo_the_request_seq() -> None:
    net = CoreNet(3)
    req = AppendEntriesRequest(1, 1, 2, 1, -1, 0, -1, True, [placed(0, 1)], seq=41)
    assert net.deliver_append(2, req).seq == 41
    refused = AppendEntriesRequest(1, 1, 2, 0, -1, 0, -1, True, [], seq=42)
    assert net.deliver_append(2, refused).seq == 42
    assert _hb_reply(net, 1, Heartbeat(1, 1, 0, 1, 0, seq=43)).seq == 43


def test_seqs_increase_per_follower_across_terms() -> None:
    net, leader = _leader_with_unflushed_entry()
    first = [leader.next_seq(2), _heartbeat(net, 2).seq]
    leader.step(StepDown())
    leader.step(Campaign(prevote=False))
    net.deliver()
    assert leader.is_leader and leader.term == 2
    assert leader.next_seq(2) > max(first)
    assert leader.next_seq(3) == 1  # independent per follower


def test_the_stale_reply_mutation_is_caught_by_the_reversal_test() -> None:
    """Plant the fault: applying stale replies makes the reversal test fail."""
    with mutations.planted("accept_stale_replies"), pytest.raises(AssertionError):
        test_reversed_replies_do_not_count_a_stale_flushed_offset()


def test_a_reply_never_carries_a_higher_seq_than_a_newer_state() -> None:
    """A heartbeat (seq 6) overtakes an append (seq 5) on the network: the append's reply,
    produced later, describes a newer state, so it must carry seq > 6 (an equal seq would
    make whichever reply arrives second stale); the heartbeat's reply, with the older
    state, must then be the stale one at the leader."""
    net = CoreNet(3)
    hb = _hb_reply(net, 1, Heartbeat(1, 1, -1, 0, -1, seq=6))
    assert hb.seq == 6
    req = AppendEntriesRequest(1, 1, 2, 1, -1, 0, -1, True, [placed(0, 1)], seq=5)
    reply = net.deliver_append(2, req)
    assert reply.seq == 7 and reply.last_flushed_offset == 0
    # A new leader's seqs start afresh.
    assert _hb_reply(net, 3, Heartbeat(1, 2, -1, 0, -1, seq=1)).seq == 1


def test_a_stale_mismatch_still_moves_recovery_back() -> None:
    """Follower 2 lost its log: recovery's request (prev 0) waits on the follower for
    its predecessor while a heartbeat is answered, so the mismatch reply carries the
    heartbeat's seq and is stale. It must still move ``next_offset`` back, else
    recovery resends the same request forever (the follower never catches up)."""
    net, leader = _leader_with_unflushed_entry()
    net.write(1, placed(1, 1))
    p = leader.progress[2]
    p.become_probe(2)
    append_seq = leader.next_seq(2)
    hb = _heartbeat(net, 2)
    leader.step(HeartbeatAnswered(2, hb, HeartbeatReply(1, 1, APPEND_SUCCESS, -1, -1, -1, hb.seq)))
    assert append_seq < hb.seq
    mismatch = AppendEntriesReply(1, 2, 1, 1, APPEND_FAILURE, -1, -1, -1, hb.seq)
    net.answer(1, 2, mismatch, prev=1)
    assert leader.stale_replies == 1
    assert p.next_offset == 0 and p.recovering


def test_a_deposed_leaders_late_request_does_not_reset_the_seqs_answered() -> None:
    """Leader 1 of term 2: a heartbeat (seq 6) overtakes an append (seq 5). Between the
    two replies, a request of leader 3's older term 1 arrives late and is refused. The
    append's reply, produced after the heartbeat's, must still carry seq > 6."""
    net = CoreNet(3)
    _hb_reply(net, 3, Heartbeat(1, 1, -1, 0, -1, seq=9))  # term 1, leader 3
    assert _hb_reply(net, 1, Heartbeat(1, 2, -1, 0, -1, seq=6)).seq == 6
    late = _hb_reply(net, 3, Heartbeat(1, 1, -1, 0, -1, seq=10))
    assert late.term == 2 and late.result == APPEND_FAILURE
    req = AppendEntriesRequest(1, 1, 2, 2, -1, 0, -1, True, [placed(0, 2)], seq=5)
    assert net.deliver_append(2, req).seq == 7


def test_the_reply_made_last_names_everything_matched_so_far() -> None:
    """Appends 1 (seq 1, entry 0) and 2 (seq 2, entry 1) wait on one flush; the reply to
    append 2 is made first. The reply to append 1, made after it, carries a higher seq
    and so wins at the leader: it must name entry 1 as matched too, else the leader
    applies the older view (matched 0), drops the newer reply as stale, and sends a
    follower that holds everything to recovery (measured: up to 825 recovery appends,
    each read back from the log, in a 480 MiB load of 1 MiB appends)."""
    net = CoreNet(3)
    first = AppendEntriesRequest(1, 1, 2, 1, -1, 0, -1, True, [placed(0, 1)], seq=1)
    second = AppendEntriesRequest(1, 1, 2, 1, 0, 1, -1, True, [placed(1, 1)], seq=2)
    for req in (first, second):
        assert len(net.step(2, req).persist) == 1  # appended by the harness
    net.logs[2].flush()
    made_first = reply_in(net.step(2, AppendPersisted(second)))
    made_last = reply_in(net.step(2, AppendPersisted(first)))
    assert isinstance(made_first, AppendEntriesReply)
    assert isinstance(made_last, AppendEntriesReply)
    assert (made_first.seq, made_first.last_matched_offset) == (2, 1)
    assert made_last.seq > made_first.seq
    assert made_last.last_matched_offset == 1
