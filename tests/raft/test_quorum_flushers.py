"""A ``quorum_ack`` append asks only a majority to flush at once.

The commit needs the leader and as many followers as make a majority durable;
the other followers write the append and flush it by bytes and delay. The core
picks the followers in ``REPLICATE`` with the fewest appends unanswered, and keeps
the ones it picked while their window has room (so the fsyncs stay on the same
followers). A ``leader_ack`` append asks no one. The commit index still moves only
on a majority's flushed offsets.
"""

from __future__ import annotations

from raftlog.raft.local_messages import Campaign, Propose
from raftlog.raft.messages import AppendEntriesRequest
from raftlog.raft.progress import ProgressState
from raftlog.sim.core_net import CoreNet, placed

LEADER = 1


def _leader(nodes: int) -> CoreNet:
    net = CoreNet(nodes)
    net.cores[LEADER].step(Campaign(prevote=False))
    assert net.deliver()
    core = net.cores[LEADER]
    assert core.is_leader
    assert all(p.state is ProgressState.REPLICATE for p in core.progress.values())
    return net


def _propose(net: CoreNet, flush: bool) -> dict[int, AppendEntriesRequest]:
    core = net.cores[LEADER]
    offset = core.log.dirty_offset + 1
    core.step(Propose([placed(offset, core.term)], flush=flush))
    return {node: req for node, req in net.carry_out(LEADER).appends}


def test_three_voters_ask_one_follower_and_keep_asking_it() -> None:
    net = _leader(3)
    for _ in range(3):
        sent = _propose(net, flush=True)
        assert sorted(sent) == [2, 3]
        assert [n for n, r in sorted(sent.items()) if r.flush] == [2]  # fewest unanswered, id
    # n2 now has 3 appends unanswered and n3 as many: n2 keeps the role
    assert len(net.cores[LEADER].progress[2].inflights) == 3


def test_the_role_stays_while_the_follower_has_room_then_moves() -> None:
    net = _leader(3)
    core = net.cores[LEADER]
    window = core.progress[2].inflights.max_count
    _propose(net, flush=True)
    # n3 answers everything at once, n2 nothing: n2 waits on more and more appends.
    # It keeps the role however far behind n3 it falls, until its window is full.
    flushed_by = []
    for _ in range(window + 1):
        for seq, _last in core.progress[3].inflights.sent():
            core.progress[3].inflights.release(seq)  # answered (the reply is not needed)
        sent = _propose(net, flush=True)
        flushed_by.append([n for n, r in sorted(sent.items()) if r.flush])
    assert flushed_by == [[2]] * (window - 1) + [[3]] * 2, flushed_by


def test_the_role_does_not_move_back_and_forth_under_load() -> None:
    """Under load the follower asked to flush lags: here it has its 3 newest appends
    unanswered when the next comes, the other none. The role stays on it; when it moved
    to the fewest unanswered at a gap of 3, it went back and forth."""
    net = _leader(3)
    core = net.cores[LEADER]
    lag = 3
    assert core.progress[2].inflights.max_count > lag
    flushed_by = []
    for _ in range(40):
        sent = _propose(net, flush=True)
        flushers = [n for n, r in sorted(sent.items()) if r.flush]
        flushed_by.append(flushers)
        for node in (2, 3):
            window = core.progress[node].inflights
            sent_seqs = window.sent()
            for seq, _last in sent_seqs[: -lag if node in flushers else len(sent_seqs)]:
                window.release(seq)
    assert flushed_by == [[2]] * 40, flushed_by


def test_five_voters_ask_two_and_a_leader_ack_write_asks_none() -> None:
    net = _leader(5)
    sent = _propose(net, flush=True)
    assert sorted(n for n, r in sent.items() if r.flush) == [2, 3]
    sent = _propose(net, flush=False)
    assert sorted(sent) == [2, 3, 4, 5] and not any(r.flush for r in sent.values())
