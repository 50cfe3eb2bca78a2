"""The node's marker writer (raftlog.node.txn_markers.PeerMarkers): a marker reaches the
participant partition's leader through leader changes and lost links, and a refusal that
settles it comes back as rm_stm's own error, which the coordinator interprets."""

from __future__ import annotations

import pytest

from raftlog.errors import FencedError, InvalidTxnStateError
from raftlog.node.txn_markers import PeerMarkers
from raftlog.raft.errors import TransportError
from raftlog.rpc.messages import ErrorCode, Participant
from raftlog.rpc.peer import WriteTxnMarkerReply, WriteTxnMarkerRequest

P = Participant("a0", "r1", "t", 2, 77, 3, records=10, last_sequence=9, topic_id=40)


class Cluster:
    """Nodes 1..3 of which ``leader`` leads t/2; the others answer NOT_LEADER naming it
    (``hint``), or drop the link (``down``)."""

    def __init__(self, leader: int, *, hint: bool = True, down: frozenset[int] = frozenset()):
        self.leader = leader
        self.hint = hint
        self.down = down
        self.sent: list[tuple[int, WriteTxnMarkerRequest]] = []
        self.answer = WriteTxnMarkerReply(123)
        self.lagging: frozenset[int] = frozenset()  # have not applied the topic's creation
        self.deleted = False  # this node's controller state: topic t of id 40 deleted
        self.asked_gone: list[tuple[str, int]] = []

    async def at(self, node: int, req: WriteTxnMarkerRequest) -> WriteTxnMarkerReply:
        self.sent.append((node, req))
        if node in self.down:
            raise TransportError(f"node {node}: connection refused")
        if node in self.lagging:
            return WriteTxnMarkerReply(-1, ErrorCode.UNKNOWN_TOPIC, -1, "unknown topic 't'")
        if node != self.leader:
            known = self.leader if self.hint else -1
            return WriteTxnMarkerReply(-1, ErrorCode.NOT_LEADER, known, "not the leader")
        return self.answer

    def markers(self, me: int = 1, first: int = 1) -> PeerMarkers:
        order = [first, *(n for n in (1, 2, 3) if n != first)]

        async def local(req: WriteTxnMarkerRequest) -> WriteTxnMarkerReply:
            return await self.at(me, req)

        def gone(topic: str, topic_id: int) -> bool:
            self.asked_gone.append((topic, topic_id))
            return self.deleted

        return PeerMarkers(me, lambda t, p: order, local, self.at, gone, retry_s=5.0)


async def test_a_commit_marker_follows_the_leader_hint_and_carries_the_counts() -> None:
    cluster = Cluster(leader=3)
    assert await cluster.markers().write_marker(P, True) == 123
    assert [n for n, _ in cluster.sent] == [1, 3]  # local first, then the named leader
    req = cluster.sent[-1][1]
    assert (req.topic, req.partition, req.producer_id, req.producer_epoch) == ("t", 2, 77, 3)
    assert (req.commit, req.record_count, req.last_sequence) == (True, 10, 9)


async def test_an_abort_marker_is_unchecked_and_tries_each_replica_without_a_hint() -> None:
    cluster = Cluster(leader=3, hint=False, down=frozenset({2}))
    assert await cluster.markers().write_marker(P, False) == 123
    assert [n for n, _ in cluster.sent] == [1, 2, 3]
    req = cluster.sent[-1][1]
    assert (req.commit, req.record_count, req.last_sequence) == (False, -1, -1)


@pytest.mark.parametrize(
    ("code", "error"),
    [
        (ErrorCode.FENCED, FencedError),
        (ErrorCode.INVALID_TXN_STATE, InvalidTxnStateError),
        (ErrorCode.UNKNOWN_TOPIC, InvalidTxnStateError),
    ],
)
async def test_a_settling_refusal_is_rm_stms_error(code: ErrorCode, error: type) -> None:
    cluster = Cluster(leader=1)
    cluster.deleted = True  # an unknown topic settles only a proven deletion
    cluster.answer = WriteTxnMarkerReply(-1, code, -1, f"refused: {code.name}")
    with pytest.raises(error):
        await cluster.markers().write_marker(P, False)
    assert len(cluster.sent) == 1  # not retried


async def test_a_marker_nobody_leads_gives_up_within_its_bound() -> None:
    cluster = Cluster(leader=9, hint=False)  # no replica leads
    markers = cluster.markers()
    markers._retry_s = 0.3
    with pytest.raises(Exception, match="not the leader"):
        await markers.write_marker(P, True)
    assert len(cluster.sent) >= 3


async def test_a_replica_that_has_not_applied_the_topic_yet_does_not_settle_an_abort() -> None:
    """The abort of a topic just created: the first replica tried has not applied the
    creation and calls the topic unknown. Taken for a deletion, the abort would count as
    done with no marker written, and the open transaction would hold the partition's
    last stable offset until its timeout (a two-phase-commit test saw it)."""
    for lagging in ({1}, {1, 2}):
        cluster = Cluster(leader=3, hint=False)
        cluster.lagging = frozenset(lagging)
        assert await cluster.markers().write_marker(P, False) == 123
        assert [n for n, _ in cluster.sent] == [1, 2, 3]
        assert cluster.asked_gone == [("t", 40)] * len(lagging)


async def test_an_unknown_topic_not_known_deleted_is_retried_within_the_bound() -> None:
    cluster = Cluster(leader=3, hint=False)
    cluster.lagging = frozenset({1, 2, 3})
    markers = cluster.markers()
    markers._retry_s = 0.3
    with pytest.raises(Exception, match="not known deleted"):
        await markers.write_marker(P, False)
    assert len(cluster.sent) >= 3
