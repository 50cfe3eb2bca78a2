"""A new partition leader answers reads (fetch, list offsets, a time lookup) only from
state that includes what its predecessor acknowledged: once an entry of its own term is
committed and rm_stm has applied the commit index as it stood then. Before, a time
lookup at a leader whose high watermark still lagged found nothing and answered its
last stable offset, 0, and ``consume --from-timestamp`` read every earlier record
(CI, stop 30: a partition whose leader had just changed). A follower may learn the
commit index only once it leads and commits its own entry; its applier then starts
from far behind while reads already pass Raft's read rule."""

from __future__ import annotations

import asyncio
import pathlib
from types import SimpleNamespace

import pytest

from raftlog.node.data_api import DataApi
from raftlog.node.partition_replica import PartitionReplica
from raftlog.raft.errors import NotLeaderError, ReadNotReadyError
from raftlog.raft.read_index import ReadIndex, unready_reason
from raftlog.rpc.messages import (
    ErrorCode,
    ListOffsetsRequest,
    OffsetForTimestampRequest,
)
from raftlog.rpc.server import RequestError
from raftlog.storage.batch import BatchKind, RecordBatch
from raftlog.storage.log import SegmentedLog

TOPIC = "orders"
EARLY_MS, LATE_MS = 1_000, 2_000


class FakeConsensus:
    """A partition's consensus as the read barrier sees it: the core's read index decision
    is set by the test, the rest is Consensus's (unready_reason); the log is a real one."""

    def __init__(self, log: SegmentedLog, term: int) -> None:
        self.node_id = 1
        self.leader_id = 1
        self.is_leader = True
        self.log = log
        self.last_applied = -1
        self.core = SimpleNamespace(term=term, commit_index=-1)
        self.decision = ReadIndex(-1, True, "has not committed an entry of its term yet")

    @property
    def high_watermark(self) -> int:
        return self.core.commit_index + 1

    @property
    def live_leader_id(self) -> int:  # no node declared dead here
        return self.leader_id

    def check_readable(self) -> int:
        if not self.is_leader:
            raise NotLeaderError(7, self.leader_id)
        why = unready_reason(self.decision, self.last_applied)
        if why:
            raise ReadNotReadyError(f"node 1, leader of term {self.core.term}: it {why}")
        return self.decision.index

    async def read_barrier(self, timeout_s: float) -> int:
        return self.check_readable()  # the wait is Consensus's (tests/raft)


class FakeRm:
    """rm_stm's last stable offset: what it applied, capped by the high watermark."""

    def __init__(self, c: FakeConsensus) -> None:
        self._c = c

    @property
    def last_stable_offset(self) -> int:
        return min(self._c.last_applied + 1, self._c.high_watermark)


def _data_part(replica: PartitionReplica) -> DataApi:
    """The node's data part over a context of one replica (group 7), with a metadata
    part that places every partition in that group."""
    ctx = SimpleNamespace(
        node_id=1, config=SimpleNamespace(peers={1: "http://127.0.0.1:1"}), partitions={7: replica}
    )
    metadata = SimpleNamespace(
        assignment=lambda topic, partition: (object(), SimpleNamespace(group_id=7))
    )
    return DataApi(ctx, metadata)  # type: ignore[arg-type]


def _new_leader(tmp_path: pathlib.Path) -> tuple[DataApi, FakeConsensus]:
    """A replica elected in term 2 over offsets 0-4 (early, term 1) and 5-7 (late, term 1,
    acknowledged by the old leader) plus its own no-op at 8, none of which it knows to
    be committed yet."""
    log = SegmentedLog.open(tmp_path / "log")
    early = RecordBatch.create(b"e", record_count=5, timestamp_ms=EARLY_MS)
    late = RecordBatch.create(b"l", record_count=3, timestamp_ms=LATE_MS)
    noop = RecordBatch.create(b"", kind=BatchKind.NOOP, timestamp_ms=LATE_MS)
    log.append([early.stamped(0, 1), late.stamped(5, 1)])
    log.append([noop.stamped(8, 2)])
    c = FakeConsensus(log, term=2)
    rep = PartitionReplica(TOPIC, 0, 7, tmp_path, [1, 2, 3], c, FakeRm(c))  # type: ignore[arg-type]
    return _data_part(rep), c


async def _ask(node: DataApi, req: object) -> object:
    if isinstance(req, OffsetForTimestampRequest):
        return await node.offset_for_timestamp(req)
    return await node.list_offsets(req)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "req",
    [OffsetForTimestampRequest(TOPIC, 0, LATE_MS), ListOffsetsRequest(TOPIC, 0)],
    ids=["offset_for_timestamp", "list_offsets"],
)
def test_a_new_leader_refuses_reads_until_it_committed_and_applied(
    tmp_path: pathlib.Path, req: object
) -> None:
    node, c = _new_leader(tmp_path)
    c.core.commit_index = 4  # learned as a follower: the early batch only

    def refused() -> str:
        with pytest.raises(RequestError) as info:
            asyncio.run(_ask(node, req))
        assert info.value.code is ErrorCode.LEADER_NOT_AVAILABLE
        return str(info.value)

    assert "has not committed an entry of its term yet" in refused()
    # its no-op commits: the commit index covers everything before its term
    c.core.commit_index, c.decision = 8, ReadIndex(8, True)
    c.last_applied = 4
    assert "applied the log only to offset 4, below its read index 8" in refused()
    c.last_applied = 8
    got = asyncio.run(_ask(node, req))
    if isinstance(req, OffsetForTimestampRequest):
        assert (got.offset, got.timestamp_ms, got.last_stable_offset) == (5, LATE_MS, 9)
    else:
        assert (got.start_offset, got.high_watermark, got.last_stable_offset) == (0, 9, 9)
    # later in the term, commits the applier has not caught up with are no barrier (the
    # core keeps the term's read index)
    c.core.commit_index = 20
    assert asyncio.run(_ask(node, req)).last_stable_offset == 9


def test_a_follower_names_the_leader(tmp_path: pathlib.Path) -> None:
    node, c = _new_leader(tmp_path)
    c.is_leader, c.leader_id = False, 3
    with pytest.raises(RequestError) as info:
        asyncio.run(node.offset_for_timestamp(OffsetForTimestampRequest(TOPIC, 0, LATE_MS)))
    assert info.value.code is ErrorCode.NOT_LEADER and "leader: 3" in str(info.value)
