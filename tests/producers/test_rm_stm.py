"""RmStm over a fake consensus: outcomes, pipelining, unknown outcomes, transactions."""

from __future__ import annotations

import asyncio

import pytest

from raftlog.errors import (
    DuplicateSequenceError,
    ErrorCode,
    FencedError,
    InvalidProducerEpochError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
)
from raftlog.producers.outcomes import ProduceResult, UnknownOutcomeError
from raftlog.producers.producer_table import ProducerTable
from raftlog.producers.rm_stm import RmStm, RmStmConfig, SyncError
from raftlog.raft.errors import NotLeaderError
from raftlog.raft.replicate_batcher import Consistency
from raftlog.storage.batch import BatchKind, RecordBatch
from tests.producers.fake_consensus import FakeConsensus

Q = Consistency.QUORUM_ACK
PID = 42


def data(seq: int, count: int = 1, *, epoch: int = 0, tx: bool = False, pid: int = PID):
    return RecordBatch.create(
        f"{pid}:{epoch}:{seq}".encode(),
        count,
        transactional=tx,
        producer_id=pid,
        producer_epoch=epoch,
        first_sequence=seq,
    )


def data_seqs(c: FakeConsensus, pid: int = PID) -> list[int]:
    return [b.first_sequence for b in c.log if b.kind is BatchKind.DATA and b.producer_id == pid]


async def test_written_sequence_returns_original_offsets_without_a_second_copy() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    first = await stm.replicate(data(0, 3), Q)
    again = await stm.replicate(data(0, 3), Q)
    assert again == first
    assert data_seqs(c) == [0]


async def test_older_duplicate_and_gap_and_fenced_errors() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    for seq in range(6):
        await stm.replicate(data(seq, epoch=2), Q)
    with pytest.raises(DuplicateSequenceError, match="last sequence is 5") as dup:
        await stm.replicate(data(0, epoch=2), Q)
    assert dup.value.code is ErrorCode.DUPLICATE_SEQUENCE  # the code the node answers
    with pytest.raises(OutOfOrderSequenceError, match="expected first_sequence 6, got 8"):
        await stm.replicate(data(8, epoch=2), Q)
    with pytest.raises(FencedError, match="epoch 1 is older than the current epoch 2"):
        await stm.replicate(data(6, epoch=1), Q)
    with pytest.raises(OutOfOrderSequenceError, match="expected first_sequence 0, got 6"):
        await stm.replicate(data(6, epoch=3), Q)
    assert await stm.replicate(data(0, epoch=3), Q) == ProduceResult(7, 7)
    assert data_seqs(c) == [0, 1, 2, 3, 4, 5, 0]


async def test_bad_requests_name_the_field() -> None:
    stm = RmStm(FakeConsensus())
    with pytest.raises(ValueError, match="first_sequence"):
        await stm.replicate(data(0).__class__.create(b"x", producer_id=1, producer_epoch=0), Q)
    with pytest.raises(ValueError, match="batch kind must be DATA"):
        await stm.replicate(RecordBatch.create(b"", kind=BatchKind.TX_COMMIT), Q)


async def test_one_producer_keeps_five_requests_in_flight() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    await stm.sync()
    c.auto_commit = False
    tasks = [asyncio.create_task(stm.replicate(data(seq), Q)) for seq in range(5)]
    await asyncio.sleep(0)
    for _ in range(10):  # bounded: each pass lets every task reach its next await
        await asyncio.sleep(0)
    assert data_seqs(c) == [0, 1, 2, 3, 4]  # all enqueued, none finished
    assert not any(t.done() for t in tasks)
    c.commit()
    results = await asyncio.gather(*tasks)
    assert [r.base_offset for r in results] == [1, 2, 3, 4, 5]  # offset 0 is the sync barrier


async def test_retry_of_an_in_flight_request_parks_and_gets_the_original_result() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    await stm.sync()
    c.auto_commit = False
    original = asyncio.create_task(stm.replicate(data(0, 2), Q))
    for _ in range(5):
        await asyncio.sleep(0)
    retry = asyncio.create_task(stm.replicate(data(0, 2), Q))
    for _ in range(5):
        await asyncio.sleep(0)
    assert not retry.done()
    c.commit()
    assert await retry == await original == ProduceResult(1, 2)
    assert data_seqs(c) == [0]


async def test_next_request_while_one_is_in_flight_follows_the_in_flight_tail() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    await stm.sync()
    c.auto_commit = False
    t0 = asyncio.create_task(stm.replicate(data(0, 2), Q))
    for _ in range(5):
        await asyncio.sleep(0)
    with pytest.raises(OutOfOrderSequenceError, match="expected first_sequence 2, got 3"):
        await stm.replicate(data(3), Q)
    t1 = asyncio.create_task(stm.replicate(data(2), Q))
    for _ in range(5):
        await asyncio.sleep(0)
    c.commit()
    assert [(await t0).base_offset, (await t1).base_offset] == [1, 3]


@pytest.mark.parametrize("kept", [True, False])
async def test_unknown_outcome_steps_down_and_the_next_leader_resolves_the_retry(
    kept: bool,
) -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    await stm.sync()
    c.auto_commit = False
    first = asyncio.create_task(stm.replicate(data(0), Q))
    for _ in range(5):
        await asyncio.sleep(0)
    c.new_term(keep_uncommitted=kept)  # the append's fate is now up to the next leader
    with pytest.raises(UnknownOutcomeError, match="leader stepped down"):
        await first
    assert c.step_downs == 1 and not c.is_leader
    c.new_term(keep_uncommitted=True)
    c.auto_commit = True
    result = await stm.replicate(data(0), Q)
    assert data_seqs(c) == [0]  # exactly one copy either way
    assert c.log[result.base_offset].first_sequence == 0


async def test_failed_enqueue_is_a_known_outcome_and_retry_succeeds() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    await stm.sync()
    c.fail_enqueue = NotLeaderError(0, 2)
    with pytest.raises(NotLeaderError):
        await stm.replicate(data(0), Q)
    assert c.step_downs == 0
    assert await stm.replicate(data(0), Q) == ProduceResult(1, 1)


async def test_follower_refuses_and_each_term_is_synced_with_a_barrier() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    c.is_leader = False
    with pytest.raises(NotLeaderError):
        await stm.replicate(data(0), Q)
    c.is_leader = True
    await stm.replicate(data(0), Q)
    c.new_term(keep_uncommitted=True)
    await stm.replicate(data(1), Q)
    assert [(b.kind, b.term) for b in c.log] == [
        (BatchKind.NOOP, 1),
        (BatchKind.DATA, 1),
        (BatchKind.NOOP, 2),
        (BatchKind.DATA, 2),
    ]


async def test_init_producer_bumps_epoch_fences_and_aborts_the_open_transaction() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s0 = await stm.init_producer(PID)
    assert (s0.epoch, s0.last_committed_version) == (0, -1)
    tx = await stm.replicate(data(0, 2, tx=True), Q)
    s1 = await stm.init_producer(PID)
    assert s1.epoch == 1
    assert [b.kind for b in c.log[-2:]] == [BatchKind.TX_ABORT, BatchKind.PRODUCER_FENCE]
    assert stm.table.aborted.is_aborted(PID, tx.base_offset)
    assert stm.table.open_transactions() == {}
    with pytest.raises(FencedError):
        await stm.replicate(data(2, tx=True), Q)
    assert await stm.replicate(data(0, epoch=1, tx=True), Q) == ProduceResult(6, 6)


async def test_commit_records_the_version_that_the_next_session_sees() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s = await stm.init_producer(PID)
    await stm.replicate(data(0, epoch=s.epoch, tx=True), Q)
    marker_offset = (await stm.end_transaction(PID, s.epoch, commit=True, version=17)).offset
    assert c.log[-1].kind is BatchKind.TX_COMMIT and c.log[-1].base_offset == marker_offset
    again = await stm.init_producer(PID)
    assert (again.epoch, again.last_committed_version) == (1, 17)


async def test_end_transaction_errors() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    with pytest.raises(InvalidTxnStateError, match="call init_producer first"):
        await stm.end_transaction(PID, 0, commit=True)
    await stm.init_producer(PID)
    await stm.init_producer(PID)
    with pytest.raises(FencedError):
        await stm.end_transaction(PID, 0, commit=True)
    with pytest.raises(InvalidProducerEpochError, match="never granted"):
        await stm.end_transaction(PID, 5, commit=False)
    with pytest.raises(ValueError, match="version"):
        await stm.end_transaction(PID, 1, commit=True, version=-7)


async def test_unknown_session_or_epoch_is_answered_after_a_quorum_round_only() -> None:
    """Before saying "no session" or "never granted", the leader proves with a quorum
    round that no newer leader could have granted it; the round writes nothing. A
    leader whose followers do not answer (cut off) says SyncError, retriable, naming
    the term, instead of the stale answer; syncing to a term writes nothing either
    (the group's own no-op is the only entry of the term)."""
    c = FakeConsensus()
    stm = RmStm(c, RmStmConfig(sync_timeout_s=0.05))
    with pytest.raises(InvalidTxnStateError, match="call init_producer first"):
        await stm.end_transaction(PID, 0, commit=True)
    assert c.quorum_rounds == 1
    assert [b.kind for b in c.log] == [BatchKind.NOOP]
    await stm.init_producer(PID)
    c.quorum_answers = False
    with pytest.raises(SyncError, match="confirm its leadership in term 1") as info:
        await stm.end_transaction(PID, 5, commit=False)
    assert info.value.code.retriable
    with pytest.raises(SyncError, match="confirm its leadership in term 1"):
        await stm.end_transaction(PID + 1, 0, commit=True)
    c.quorum_answers = True
    with pytest.raises(InvalidProducerEpochError, match="never granted"):
        await stm.end_transaction(PID, 5, commit=False)
    assert [b.kind for b in c.log] == [BatchKind.NOOP, BatchKind.PRODUCER_FENCE]


async def test_lso_and_fetch_filter_hide_open_aborted_and_control_batches() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    a = await stm.init_producer(1)
    b = await stm.init_producer(2)
    plain = await stm.replicate(RecordBatch.create(b"plain", timestamp_ms=1), Q)
    open_tx = await stm.replicate(data(0, tx=True, pid=1, epoch=a.epoch), Q)
    aborted = await stm.replicate(data(0, tx=True, pid=2, epoch=b.epoch), Q)
    after = await stm.replicate(RecordBatch.create(b"after", timestamp_ms=1), Q)
    assert stm.last_stable_offset == open_tx.base_offset
    assert [x.base_offset for x in stm.visible(c.log)] == [plain.base_offset]
    await stm.end_transaction(2, b.epoch, commit=False)
    await stm.end_transaction(1, a.epoch, commit=True, version=3)
    assert stm.last_stable_offset == c.high_watermark
    seen = [x.base_offset for x in stm.visible(c.log)]
    assert seen == [plain.base_offset, open_tx.base_offset, after.base_offset]
    assert aborted.base_offset not in seen


async def test_abort_expired_aborts_old_transactions_and_fences_their_writer() -> None:
    now = [10_000]
    c = FakeConsensus()
    stm = RmStm(c, RmStmConfig(transaction_timeout_ms=1_000), clock_ms=lambda: now[0])
    await stm.init_producer(1)
    await stm.init_producer(2)
    old = RecordBatch.create(
        b"old",
        transactional=True,
        producer_id=1,
        producer_epoch=0,
        first_sequence=0,
        timestamp_ms=10_000,
    )
    young = RecordBatch.create(
        b"young",
        transactional=True,
        producer_id=2,
        producer_epoch=0,
        first_sequence=0,
        timestamp_ms=10_800,
    )
    await stm.replicate(old, Q)
    await stm.replicate(young, Q)
    assert await stm.abort_expired(11_000) == [1]
    assert list(stm.table.open_transactions()) == [2]
    assert stm.table.get(1).epoch == 1
    with pytest.raises(FencedError):
        await stm.end_transaction(1, 0, commit=True)
    c.is_leader = False
    assert await stm.abort_expired(99_000) == []


async def test_replicas_rebuild_the_same_table_and_snapshots_restore_it() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s = await stm.init_producer(PID)
    for seq in range(7):
        await stm.replicate(data(seq, epoch=s.epoch, tx=seq < 3), Q)
    await stm.end_transaction(PID, s.epoch, commit=False)
    await stm.replicate(data(0, pid=9), Q)
    replica = ProducerTable()
    for b in c.log:
        replica.apply(b)
    assert replica.snapshot() == stm.snapshot()
    restarted = RmStm(FakeConsensus())
    restarted.restore(stm.snapshot())
    assert restarted.table.producers() == stm.table.producers()
    assert restarted.table.aborted == stm.table.aborted


async def _steps(n: int = 10) -> None:
    for _ in range(n):  # bounded: lets tasks reach their next await
        await asyncio.sleep(0)


async def test_requests_that_overtake_their_predecessor_wait_for_it_and_are_written() -> None:
    """Concurrent requests of one producer may arrive out of order (separate connections).
    Those ahead of a gap wait for it to close instead of failing as out of order."""
    c = FakeConsensus()
    stm = RmStm(c, RmStmConfig(reorder_wait_s=30.0))  # long: the test never waits for it
    await stm.replicate(data(0), Q)
    later = [asyncio.create_task(stm.replicate(data(seq), Q)) for seq in (4, 2, 3)]
    await _steps()
    assert not any(t.done() for t in later)
    assert data_seqs(c) == [0]  # nothing written past the gap
    first = await stm.replicate(data(1), Q)
    results = await asyncio.gather(*later)
    assert data_seqs(c) == [0, 1, 2, 3, 4]
    assert [first.base_offset, *sorted(r.base_offset for r in results)] == [2, 3, 4, 5]
    assert not stm._reorder


async def test_a_gap_that_does_not_close_is_rejected_after_the_reorder_wait() -> None:
    c = FakeConsensus()
    stm = RmStm(c, RmStmConfig(reorder_wait_s=0.05))
    await stm.replicate(data(0), Q)
    with pytest.raises(OutOfOrderSequenceError, match="expected first_sequence 1, got 3"):
        await stm.replicate(data(3), Q)
    # with no wait configured, at once (and a gap in a new epoch never waits)
    stm0 = RmStm(FakeConsensus(), RmStmConfig(reorder_wait_s=0))
    await stm0.replicate(data(0), Q)
    with pytest.raises(OutOfOrderSequenceError, match="expected first_sequence 1, got 2"):
        await stm0.replicate(data(2), Q)
    assert data_seqs(c) == [0]


async def test_at_most_four_requests_of_a_producer_wait_for_a_gap() -> None:
    c = FakeConsensus()
    stm = RmStm(c, RmStmConfig(reorder_wait_s=30.0))
    await stm.replicate(data(0), Q)
    waiting = [asyncio.create_task(stm.replicate(data(seq), Q)) for seq in (2, 3, 4, 5)]
    await _steps()
    with pytest.raises(OutOfOrderSequenceError, match="expected first_sequence 1, got 6"):
        await stm.replicate(data(6), Q)
    await stm.replicate(data(1), Q)
    await asyncio.gather(*waiting)
    assert data_seqs(c) == [0, 1, 2, 3, 4, 5]


async def test_a_waiting_request_fails_as_not_leader_after_a_leadership_loss() -> None:
    c = FakeConsensus()
    stm = RmStm(c, RmStmConfig(reorder_wait_s=30.0))
    await stm.replicate(data(0), Q)
    waiting = asyncio.create_task(stm.replicate(data(2), Q))
    await _steps()
    c.step_down()
    with pytest.raises(NotLeaderError):
        await waiting


async def test_a_batch_the_table_raises_on_still_wakes_the_callers_waiting_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The applier skips a batch whose apply raised; whoever waits for the table to
    reach it (a new leader's read barrier) must not wait for the partition's next one."""
    stm = RmStm(FakeConsensus())
    batch = data(0).stamped(7, 1)

    def broken(state, b) -> None:
        raise ValueError("a bug in applying this batch")

    monkeypatch.setattr(stm.table, "_apply_data", broken)
    waiting = asyncio.ensure_future(stm._wait_applied(7, timeout=5.0))
    await _steps()
    assert not waiting.done()
    with pytest.raises(ValueError, match="a bug in applying"):
        stm.apply(batch)
    await asyncio.wait_for(waiting, 1.0)
    assert stm.table.applied_offset == 7
