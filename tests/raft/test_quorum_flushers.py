"""A ``quorum_ack`` append asks only a majority to flush at once.

The commit needs the leader and as many followers as make a majority durable;
the other followers write the append and flush it by bytes and delay. The core
picks the followers in ``REPLICATE`` with the fewest appends unanswered, and keeps
the ones it picked until ``FLUSHER_HYSTERESIS`` more appends wait on them than on
another (so the fsyncs stay on the same followers). A ``leader_ack`` append asks
no one. The commit index still moves only on a majority's flushed offsets.
"""

from __future__ import annotations

from raftlog.raft.core import FLUSHER_HYSTERESIS
from raftlog.raft.messages import AppendEntriesRequest
from raftlog.raft.progress import ProgressState
from raftlog.sim.core_net import CoreNet, placed

LEADER = 1


def _leader(nodes: int) -> CoreNet:
    net = CoreNet(nodes)
    net.cores[LEADER].campaign(prevote=False, transfer=False)
    assert net.deliver()
    core = net.cores[LEADER]
    assert core.is_leader
    assert all(p.state is ProgressState.REPLICATE for p in core.progress.values())
    return net


def _propose(net: CoreNet, flush: bool) -> dict[int, AppendEntriesRequest]:
    core = net.cores[LEADER]
    offset = core.log.dirty_offset + 1
    core.propose([placed(offset, core.term)], flush=flush)
    ready = core.take_ready()
    net.append_local(LEADER, ready.append)
    return {node: req for node, req in ready.appends}


def test_three_voters_ask_one_follower_and_keep_asking_it() -> None:
    net = _leader(3)
    for _ in range(3):
        sent = _propose(net, flush=True)
        assert sorted(sent) == [2, 3]
        assert [n for n, r in sorted(sent.items()) if r.flush] == [2]  # fewest unanswered, id
    # n2 now has 3 appends unanswered and n3 as many: n2 keeps the role
    assert len(net.cores[LEADER].progress[2].inflights) == 3


def test_the_role_moves_once_the_follower_falls_behind_by_the_hysteresis() -> None:
    net = _leader(3)
    core = net.cores[LEADER]
    _propose(net, flush=True)
    # n3 answers everything at once, n2 nothing: n2 waits on more and more appends
    flushed_by = []
    for _ in range(FLUSHER_HYSTERESIS + 2):
        for seq, _last in core.progress[3].inflights.sent():
            core.progress[3].inflights.release(seq)  # answered (the reply is not needed)
        sent = _propose(net, flush=True)
        flushed_by.append([n for n, r in sorted(sent.items()) if r.flush])
    # n2 keeps it while at most FLUSHER_HYSTERESIS more wait on it, then n3 has it
    assert flushed_by == [[2]] * FLUSHER_HYSTERESIS + [[3]] * 2, flushed_by


def test_five_voters_ask_two_and_a_leader_ack_write_asks_none() -> None:
    net = _leader(5)
    sent = _propose(net, flush=True)
    assert sorted(n for n, r in sent.items() if r.flush) == [2, 3]
    sent = _propose(net, flush=False)
    assert sorted(sent) == [2, 3, 4, 5] and not any(r.flush for r in sent.values())
