"""A replica whose disk lost entries it had acknowledged (issue 16): "behind its promise".

Its commit context names an offset it had flushed that its log no longer reaches.
Until its log is flushed up to that offset again it grants no vote (it could elect
a leader missing committed entries) and no leader counts it toward a commit quorum.
"""

from __future__ import annotations

import random

from raftlog.raft.configuration import Configuration, ConfigurationHistory
from raftlog.raft.consensus import Consensus
from raftlog.raft.core import CoreOptions, RaftCore, Role
from raftlog.raft.local_messages import Campaign, LocalFlushed
from raftlog.raft.messages import (
    APPEND_SUCCESS,
    AppendEntriesReply,
    AppendEntriesRequest,
    VoteReply,
    VoteRequest,
)
from raftlog.sim.core_net import CoreNet, placed
from raftlog.storage.api import CommitContext, VoteState
from raftlog.storage.memory import MemoryLog

PROMISE = 3  # node 3 had flushed (and acknowledged) offsets 0..3, then lost them


def _restarted_with_lost_data(net: CoreNet, node: int, promise: int) -> RaftCore:
    """Replace ``node`` by a core restarted on an empty log that promised ``promise``."""
    net.logs[node] = MemoryLog()
    core = RaftCore(
        1,
        node,
        ConfigurationHistory(Configuration.of(range(1, len(net.cores) + 1), ())),
        net.logs[node],
        VoteState(),
        -1,
        CoreOptions(election_timeout_ticks=10),
        random.Random(node),
        promised_offset=promise,
    )
    net.cores[node] = core
    return core


def _append_to(net: CoreNet, leader: int, node: int, prev: int, *batches) -> AppendEntriesReply:
    """One append from ``leader`` to ``node``, applied and flushed; the leader takes the reply."""
    lead = net.cores[leader]
    prev_term = lead.term_at(prev) or 0
    req = AppendEntriesRequest(
        1, leader, node, lead.term, prev, prev_term, lead.commit_index, True, list(batches),
        seq=lead.next_seq(node),
    )  # fmt: skip
    reply = net.deliver_append(node, req)
    assert reply.result == APPEND_SUCCESS
    net.answer(leader, node, reply, term=req.term, prev=prev)
    return reply


def test_replica_behind_its_promise_refuses_votes_and_campaigns_not() -> None:
    net = CoreNet(3)
    # Nodes 1 and 3 had 0..3 committed; node 2 only ever got offset 0.
    net.write(1, placed(0, 1, count=PROMISE + 1))
    net.write(2, placed(0, 1))
    _restarted_with_lost_data(net, 3, PROMISE)
    # Node 3's empty log makes node 2 look up to date; only the promise stops node 3
    # from electing node 2, which lacks the committed offsets 1..3.
    net.cores[2].step(Campaign(prevote=True))
    assert net.deliver() == [
        "2->1 prevote term=1: rejected",
        "2->3 prevote term=1: rejected",
    ]
    net.cores[2].step(Campaign(prevote=False))
    assert net.deliver() == [
        "2->1 vote term=1: rejected",
        "2->3 vote term=1: rejected",
    ]
    assert net.cores[2].role is Role.CANDIDATE
    assert net.logs[3].load_vote().voted_for == -1
    # It does not campaign itself either: it may be missing committed entries.
    net.cores[3].step(Campaign(prevote=True))
    assert net.deliver() == []
    assert net.cores[3].role is Role.FOLLOWER


def test_leader_does_not_count_a_replica_behind_its_promise_until_it_caught_up() -> None:
    net = CoreNet(3)
    follower = _restarted_with_lost_data(net, 3, PROMISE)
    net.cores[1].step(Campaign(prevote=True))
    net.deliver()
    leader = net.cores[1]
    assert leader.is_leader and leader.term == 1  # elected by node 2 alone
    net.cut = {2}
    net.write(1, placed(0, 1, count=PROMISE), placed(PROMISE, 1))
    leader.step(LocalFlushed())
    # Node 3 gets and flushes 0..2 (still below its promise): its ack must not complete a
    # quorum with the leader, since it may have acknowledged other entries it lost.
    reply = _append_to(net, 1, 3, -1, placed(0, 1, count=PROMISE))
    assert leader.commit_index == -1
    assert follower.behind_promise
    assert (reply.last_matched_offset, reply.last_flushed_offset) == (PROMISE - 1, -1)
    # Caught up to the promise: it counts again (and the promise is gone for good).
    reply = _append_to(net, 1, 3, PROMISE - 1, placed(PROMISE, 1))
    assert not follower.behind_promise and follower.promised_offset == -1
    assert reply.last_flushed_offset == PROMISE
    assert leader.commit_index == PROMISE
    # And it votes again.
    vote = net.request(3, VoteRequest(1, 1, 3, 2, False, PROMISE, 1, True))
    assert isinstance(vote, VoteReply) and vote.granted


def test_open_with_a_log_below_the_commit_context_starts_behind_and_keeps_it_durable() -> None:
    log = MemoryLog()
    # The context (saved only for offsets this replica had flushed) says 0..5 were
    # flushed here; the log now ends at 1: acknowledged data was lost.
    log.append([placed(0, 1, count=2)])
    log.flush()
    log.save_commit_context(CommitContext(5, 1))
    config = Configuration.of([1, 2, 3], ())
    c = Consensus(1, 3, config, log, transport=None)  # type: ignore[arg-type]
    assert c.core.promised_offset == 5 and c.core.behind_promise
    # While behind, no context below the promise replaces the stored one: a crash now
    # must find the promise again.
    c.core.commit_index = 1
    c.save_commit_context()
    ctx = log.load_commit_context()
    assert ctx is not None and ctx.committed_offset == 5
    # Caught up and committed past it: the context moves on, clearing the promise.
    log.append([placed(2, 1, count=5)])
    log.flush()
    c.core.commit_index = 6
    assert not c.core.behind_promise
    c.save_commit_context()
    ctx = log.load_commit_context()
    assert ctx is not None and ctx.committed_offset == 6
    reopened = Consensus(1, 3, config, log, transport=None)  # type: ignore[arg-type]
    assert reopened.core.promised_offset == -1
