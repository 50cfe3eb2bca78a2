"""The read index: the core's one decision behind every linearizable read.

Driven on the pure core (CoreNet). A leader may not serve a read before an entry of its
own term is committed (its commit index may lag what the previous leader acknowledged),
nor once it has not heard from a quorum for an election timeout (it may have been
deposed, before its quorum check steps it down), nor after it learnt of a newer term,
nor while it hands its leadership away. The planted fault (``read_before_commit_in_term``)
makes the first scenario fail.
"""

from __future__ import annotations

import pytest

from raftlog.raft import mutations
from raftlog.raft.core import RaftCore
from raftlog.raft.local_messages import (
    Campaign,
    HeartbeatFrom,
    LocalFlushed,
    Propose,
    Tick,
    TransferLeadership,
)
from raftlog.raft.messages import (
    APPEND_SUCCESS,
    AppendEntriesReply,
    Heartbeat,
    HeartbeatReply,
)
from raftlog.sim.core_net import CoreNet, placed
from raftlog.storage.batch import BatchKind, RecordBatch


def _ok(peer: int, term: int, matched: int, seq: int) -> AppendEntriesReply:
    return AppendEntriesReply(1, peer, 1, term, APPEND_SUCCESS, matched, matched, matched, seq=seq)


def _new_leader_behind() -> tuple[CoreNet, RaftCore]:
    """Offsets 0 and 1 (term 1) are on every node; the term-1 leader (node 3) committed
    and acknowledged both, but node 1 learnt only offset 0 committed before it was
    elected in term 2 (by a leadership transfer: the voters' leases ignored)."""
    net = CoreNet(3)
    for n in (1, 2, 3):
        net.write(n, placed(0, 1), placed(1, 1))
    net.request(1, HeartbeatFrom(3, Heartbeat(1, 1, 0, 1, 0)))
    net.request(2, HeartbeatFrom(3, Heartbeat(1, 1, 1, 1, 1)))
    assert (net.cores[1].commit_index, net.cores[2].commit_index) == (0, 1)
    net.cores[1].step(Campaign(prevote=False, transfer=True))
    net.deliver()
    leader = net.cores[1]
    assert (leader.role.value, leader.term, leader.commit_index) == ("leader", 2, 0)
    return net, leader


def _commit_noop(net: CoreNet, leader: RaftCore) -> None:
    """The new leader's no-op (offset 2, term 2) flushed here and on node 2: committed."""
    noop = RecordBatch.create(b"", kind=BatchKind.NOOP, timestamp_ms=0)
    leader.step(Propose([noop], flush=True))
    net.process(1)
    net.logs[1].flush()
    leader.step(LocalFlushed())
    assert leader.commit_index == 0  # on the leader alone: not committed
    net.answer(1, 2, _ok(2, 2, 2, seq=100), prev=1)
    assert leader.commit_index == 2


def test_a_new_leader_serves_no_read_before_an_entry_of_its_term_commits() -> None:
    net, leader = _new_leader_behind()
    decision = leader.read_index()
    # Its commit index, 0, lags offset 1, which the previous leader acknowledged.
    assert decision.leader and not decision.ready
    assert "has not committed an entry of its term yet" in decision.why
    _commit_noop(net, leader)
    decision = leader.read_index()
    assert (decision.ready, decision.index) == (True, 2)
    # Later commits of its own entries do not move the term's read index.
    leader.step(Propose([placed(0, 0)], flush=True))
    net.process(1)
    net.logs[1].flush()
    leader.step(LocalFlushed())
    net.answer(1, 2, _ok(2, 2, 3, seq=101), prev=2)
    assert leader.commit_index == 3
    assert leader.read_index().index == 2


def test_the_planted_fault_is_caught() -> None:
    """``read_before_commit_in_term``: the new leader answers at its lagging commit index."""
    with mutations.planted("read_before_commit_in_term"):
        mutated = r"ReadIndex\(index=0, leader=True, why=.*\)\.ready"
        with pytest.raises(AssertionError, match=mutated):
            test_a_new_leader_serves_no_read_before_an_entry_of_its_term_commits()
        _, leader = _new_leader_behind()
        assert (leader.read_index().ready, leader.read_index().index) == (True, 0)


def test_a_deposed_leader_serves_no_read() -> None:
    net, leader = _new_leader_behind()
    _commit_noop(net, leader)
    assert leader.read_index().ready
    # A follower answers from a newer term: this leader learns it was deposed.
    net.answer(1, 3, HeartbeatReply(1, 5, APPEND_SUCCESS, 2, 2, 2, seq=200), term=2, prev=2)
    decision = leader.read_index()
    assert (leader.role.value, decision.leader, decision.ready) == ("follower", False, False)


def test_a_leader_cut_off_stops_reads_before_its_quorum_check_steps_it_down() -> None:
    net, leader = _new_leader_behind()
    _commit_noop(net, leader)
    timeout = net.options.election_timeout_ticks
    for _ in range(timeout // 2):
        leader.step(Tick())
    # Both followers answer a heartbeat half a timeout in, then nothing more arrives.
    for peer in (2, 3):
        net.answer(1, peer, HeartbeatReply(1, 2, APPEND_SUCCESS, 2, 2, 2, seq=300), prev=2)
    heard_at = leader.ticks
    while leader.ticks < heard_at + timeout - 1:
        leader.step(Tick())
        assert leader.read_index().ready, f"tick {leader.ticks}"
    leader.step(Tick())  # a whole election timeout without a quorum: a newer leader may exist
    decision = leader.read_index()
    assert leader.role.value == "leader"  # its quorum check has not run yet ...
    assert not decision.ready and "has not heard from a quorum" in decision.why
    for _ in range(timeout):
        leader.step(Tick())
    assert leader.role.value == "follower"  # ... and steps it down later
    assert not leader.read_index().leader


def test_a_leader_handing_over_serves_no_read() -> None:
    net, leader = _new_leader_behind()
    _commit_noop(net, leader)
    leader.step(TransferLeadership(2))
    decision = leader.read_index()
    assert not decision.ready and "handing its leadership to node 2" in decision.why
