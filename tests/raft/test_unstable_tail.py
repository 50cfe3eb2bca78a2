"""The leader's unstable tail is the core's own (etcd's ``raftLog.unstable``).

A ``Propose`` places batches after the core's own log end: the log's end, or the
last batch placed by a proposal whose ready the driver has not carried out yet.
The ready's ``append`` lists what to append, and :meth:`RaftCore.advance` tells
the core the driver did: until then the core answers for those offsets itself
(their terms, the predecessor of the next append), after it the log does. So
two proposals stepped before a ready is taken place contiguously, and each
follower is sent them in order with the right predecessors; before, the second
was refused (``propose before the last one was appended``).
"""

from __future__ import annotations

from raftlog.raft.core import Ready
from raftlog.raft.local_messages import Campaign, Propose, StepDown
from raftlog.raft.messages import APPEND_SUCCESS, AppendEntriesRequest
from raftlog.sim.core_net import CoreNet
from raftlog.storage.batch import RecordBatch


def _leader() -> CoreNet:
    net = CoreNet(3)
    net.cores[1].step(Campaign(prevote=False))
    assert net.deliver()
    assert net.cores[1].is_leader
    return net


def _to(ready: Ready, node: int) -> list[AppendEntriesRequest]:
    return [req for target, req in ready.appends if target == node]


def test_two_proposals_before_the_ready_is_taken_place_contiguously() -> None:
    net = _leader()
    leader, log = net.cores[1], net.logs[1]
    end, term = log.dirty_offset, leader.term
    leader.step(Propose([RecordBatch.create(b"a")], flush=True))
    leader.step(Propose([RecordBatch.create(b"b"), RecordBatch.create(b"c")], flush=False))
    ready = leader.take_ready()
    assert [(b.base_offset, b.term) for b in ready.append] == [
        (end + 1, term),
        (end + 2, term),
        (end + 3, term),
    ]
    # Nothing is in the log yet: the core answers for its tail itself.
    assert log.dirty_offset == end
    assert [leader.term_at(o) for o in (end + 1, end + 3, end + 4)] == [term, term, None]
    first, second = _to(ready, 2)
    assert (first.prev_log_offset, [b.base_offset for b in first.batches]) == (end, [end + 1])
    assert (second.prev_log_offset, second.prev_log_term) == (end + 1, term)
    assert [b.base_offset for b in second.batches] == [end + 2, end + 3]

    net.append_local(1, ready.append)
    leader.advance(ready)
    assert log.dirty_offset == end + 3 and leader.term_at(end + 3) == term  # the log's now
    leader.advance(ready)  # advancing it again changes nothing
    assert leader.term_at(end + 4) is None
    # The follower takes both appends in order: its log matches the leader's.
    replies = [net.deliver_append(2, req) for req in (first, second)]
    assert [(r.result, r.last_matched_offset) for r in replies] == [
        (APPEND_SUCCESS, end + 1),
        (APPEND_SUCCESS, end + 3),
    ]
    assert [b.base_offset for b in net.logs[2].read(0, 1 << 20)] == [
        b.base_offset for b in log.read(0, 1 << 20)
    ]


def test_a_leader_that_steps_down_drops_its_tail_and_the_log_answers_after_the_append() -> None:
    net = _leader()
    leader, log = net.cores[1], net.logs[1]
    end, term = log.dirty_offset, leader.term
    leader.step(Propose([RecordBatch.create(b"a")], flush=False))
    leader.step(StepDown())
    assert leader.term_at(end + 1) is None  # not the core's any more, not yet the log's
    ready = leader.take_ready()
    assert [b.base_offset for b in ready.append] == [end + 1]
    net.append_local(1, ready.append)
    leader.advance(ready)
    assert leader.term_at(end + 1) == term
