"""The partition side of transactions, hardened (issue 14, item 6), over a fake consensus.

- transactional data and markers need acks=all;
- an abort bumps the epoch, so a late commit of the aborted transaction is fenced;
- a commit needs an open transaction, except the exact retry of the last one applied;
- a commit naming a record count / last sequence must match the open transaction
  (refused by the leader; a mismatching marker that reaches the log aborts);
- every session has its own transaction timeout, capped, replicated in its fence;
- sequences wrap after 2**31 - 1.
"""

from __future__ import annotations

import asyncio

import pytest

from raftlog.errors import FencedError, InvalidTxnStateError
from raftlog.producers.markers import REASON_END_TXN, make_fence, make_marker
from raftlog.producers.outcomes import Accept, AlreadyWritten
from raftlog.producers.producer_state import LastMarker
from raftlog.producers.producer_table import ProducerTable
from raftlog.producers.rm_stm import EndTxnResult, RmStm, RmStmConfig
from raftlog.producers.serial import SEQUENCE_MODULUS
from raftlog.raft.replicate_batcher import Consistency
from raftlog.storage.batch import BatchKind, RecordBatch
from tests.producers.builders import LogBuilder
from tests.producers.fake_consensus import FakeConsensus

Q = Consistency.QUORUM_ACK
PID = 42


def tx_data(seq: int, count: int = 1, *, epoch: int, pid: int = PID, ts: int = 0) -> RecordBatch:
    return RecordBatch.create(
        f"{pid}:{epoch}:{seq}".encode(),
        count,
        transactional=True,
        producer_id=pid,
        producer_epoch=epoch,
        first_sequence=seq,
        timestamp_ms=ts,
    )


def at(c: FakeConsensus, offset: int) -> RecordBatch:
    """The batch of ``c``'s log holding ``offset``."""
    (b,) = [b for b in c.log if b.base_offset <= offset <= b.last_offset]
    return b


def markers(c: FakeConsensus) -> list[tuple[BatchKind, int]]:
    return [
        (b.kind, b.producer_epoch)
        for b in c.log
        if b.kind in (BatchKind.TX_COMMIT, BatchKind.TX_ABORT)
    ]


# -- acks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("consistency", [Consistency.LEADER_ACK, Consistency.NO_ACK])
async def test_transactional_produce_without_acks_all_is_refused(consistency) -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s = await stm.init_producer(PID)
    acks = 1 if consistency is Consistency.LEADER_ACK else 0
    with pytest.raises(
        ValueError, match=rf"acks: transactional writes require acks=all \(-1\), got {acks}"
    ):
        await stm.replicate(tx_data(0, epoch=s.epoch), consistency)
    assert not any(b.kind is BatchKind.DATA for b in c.log)
    # a plain idempotent write may still use acks=1
    plain = RecordBatch.create(b"p", producer_id=PID, producer_epoch=s.epoch, first_sequence=0)
    await stm.replicate(plain, Consistency.LEADER_ACK)


# -- abort bumps the epoch -----------------------------------------------------------------


async def test_abort_bumps_the_epoch_so_a_late_commit_is_fenced() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s = await stm.init_producer(PID)
    tx = await stm.replicate(tx_data(0, 2, epoch=s.epoch), Q)
    aborted = await stm.end_transaction(PID, s.epoch, commit=False)
    assert aborted.producer_epoch == s.epoch + 1
    assert at(c, aborted.offset).kind is BatchKind.TX_ABORT
    assert at(c, aborted.offset).producer_epoch == s.epoch + 1
    assert stm.table.get(PID).epoch == s.epoch + 1
    # the zombie's late commit (and its late data) at the old epoch are fenced
    with pytest.raises(
        FencedError, match=f"epoch {s.epoch} is older than the current epoch {s.epoch + 1}"
    ):
        await stm.end_transaction(PID, s.epoch, commit=True, version=7)
    with pytest.raises(FencedError):
        await stm.replicate(tx_data(2, epoch=s.epoch), Q)
    assert markers(c) == [(BatchKind.TX_ABORT, s.epoch + 1)]
    assert stm.table.aborted.is_aborted(PID, tx.base_offset)
    assert stm.table.get(PID).last_committed_version == -1
    # the writer goes on at the new epoch, sequences from 0
    nxt = await stm.replicate(tx_data(0, epoch=aborted.producer_epoch), Q)
    done = await stm.end_transaction(PID, aborted.producer_epoch, commit=True, version=8)
    assert done == EndTxnResult(done.offset, s.epoch + 1)
    assert [b.base_offset for b in stm.visible(c.log)] == [nxt.base_offset]


async def test_retry_of_an_applied_abort_returns_its_offset_instead_of_fenced() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s = await stm.init_producer(PID)
    await stm.replicate(tx_data(0, epoch=s.epoch), Q)
    first = await stm.end_transaction(PID, s.epoch, commit=False)
    again = await stm.end_transaction(PID, s.epoch, commit=False)
    assert again == first
    assert len(markers(c)) == 1
    # an abort without an open transaction is still written, and bumps the epoch
    empty = await stm.end_transaction(PID, first.producer_epoch, commit=False)
    assert empty.producer_epoch == first.producer_epoch + 1
    # an abort written by init_producer (a newer session) answers no retry of the old one
    await stm.replicate(tx_data(0, epoch=empty.producer_epoch), Q)
    await stm.init_producer(PID)
    with pytest.raises(FencedError):
        await stm.end_transaction(PID, empty.producer_epoch, commit=False)


async def test_retry_of_an_abort_in_flight_parks_on_it() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s = await stm.init_producer(PID)
    await stm.replicate(tx_data(0, epoch=s.epoch), Q)
    c.auto_commit = False
    first = asyncio.create_task(stm.end_transaction(PID, s.epoch, commit=False))
    for _ in range(10):
        await asyncio.sleep(0)
    retry = asyncio.create_task(stm.end_transaction(PID, s.epoch, commit=False))
    for _ in range(10):
        await asyncio.sleep(0)
    assert not retry.done()
    c.commit()
    assert await retry == await first
    assert len(markers(c)) == 1


# -- commit needs an open transaction; exact retry -------------------------------------------


async def test_commit_without_a_transaction_is_refused_but_its_exact_retry_is_answered() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s = await stm.init_producer(PID)
    with pytest.raises(
        InvalidTxnStateError, match=f"producer {PID} has no open transaction at epoch 0"
    ):
        await stm.end_transaction(PID, s.epoch, commit=True, version=1)
    assert markers(c) == []
    await stm.replicate(tx_data(0, 3, epoch=s.epoch), Q)
    done = await stm.end_transaction(PID, s.epoch, True, 5, record_count=3, last_sequence=2)
    # the exact retry (e.g. after a lost answer) gets the original offset, no second marker
    assert await stm.end_transaction(PID, s.epoch, True, 5, record_count=3, last_sequence=2) == done
    assert await stm.end_transaction(PID, s.epoch, True, 5) == done  # counts not given: unchecked
    assert markers(c) == [(BatchKind.TX_COMMIT, s.epoch)]
    # anything else is not a retry of it: refused
    for kwargs in ({"record_count": 4}, {"last_sequence": 3}):
        with pytest.raises(InvalidTxnStateError, match="no open transaction"):
            await stm.end_transaction(PID, s.epoch, True, 5, **kwargs)
    with pytest.raises(InvalidTxnStateError, match="no open transaction"):
        await stm.end_transaction(PID, s.epoch, True, 6)  # another version
    # a newer session does not forget it: the retry still returns the commit's offset
    s2 = await stm.init_producer(PID)
    assert await stm.end_transaction(PID, s.epoch, True, 5, record_count=3) == done
    with pytest.raises(FencedError):
        await stm.end_transaction(PID, s.epoch, True, 6)
    assert stm.table.get(PID).last_marker == LastMarker(True, s.epoch, done.offset, 5, 3, 2)
    assert s2.last_committed_version == 5


# -- record count / last sequence --------------------------------------------------------------


async def test_commit_whose_record_count_or_last_sequence_differs_is_refused() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s = await stm.init_producer(PID)
    await stm.replicate(tx_data(0, 2, epoch=s.epoch), Q)
    await stm.replicate(tx_data(2, 3, epoch=s.epoch), Q)
    assert stm.table.get(PID).open_tx.record_count == 5
    with pytest.raises(
        InvalidTxnStateError,
        match=f"record_count: the commit of producer {PID} epoch 0 names 4 records, "
        f"the open transaction holds 5",
    ):
        await stm.end_transaction(PID, s.epoch, True, record_count=4, last_sequence=4)
    with pytest.raises(
        InvalidTxnStateError,
        match=r"last_sequence: .* names 3, the open transaction's last sequence is 4",
    ):
        await stm.end_transaction(PID, s.epoch, True, record_count=5, last_sequence=3)
    assert markers(c) == []
    assert stm.table.get(PID).open_tx is not None  # still open: the writer may abort it
    r = await stm.end_transaction(PID, s.epoch, True, 9, record_count=5, last_sequence=4)
    assert at(c, r.offset).kind is BatchKind.TX_COMMIT
    assert len(stm.visible(c.log)) == 2


async def test_the_count_includes_data_still_in_flight() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s = await stm.init_producer(PID)
    await stm.replicate(tx_data(0, 2, epoch=s.epoch), Q)
    c.auto_commit = False
    pending = asyncio.create_task(stm.replicate(tx_data(2, 3, epoch=s.epoch), Q))
    for _ in range(10):
        await asyncio.sleep(0)
    commit = asyncio.create_task(
        stm.end_transaction(PID, s.epoch, True, record_count=5, last_sequence=4)
    )
    for _ in range(10):
        await asyncio.sleep(0)
    c.commit()
    await pending
    assert at(c, (await commit).offset).kind is BatchKind.TX_COMMIT
    assert stm.table.get(PID).last_marker.commit


def test_a_mismatching_commit_marker_in_the_log_aborts_deterministically() -> None:
    log = LogBuilder()
    log.fence(PID, 0)
    tx = log.data(PID, 0, 0, 3, tx=True)
    bad = log.commit(PID, 0, version=4)
    # the same commit, but naming 2 records: rebuilt by hand (the leader never writes it)
    log.batches[-1] = bad = make_marker(
        PID,
        0,
        commit=True,
        version=4,
        record_count=2,
        requested_epoch=0,
        reason=REASON_END_TXN,
        timestamp_ms=log.now_ms,
    ).stamped(bad.base_offset, 1)
    tables = [ProducerTable(), ProducerTable()]
    for table in tables:
        for b in log.batches:
            table.apply(b)
    table = tables[0]
    assert table.aborted.is_aborted(PID, tx.base_offset)
    assert table.get(PID).last_committed_version == -1
    assert table.get(PID).last_marker == LastMarker(False, -1, bad.last_offset, 4, 2, -1)
    assert table.last_stable_offset() == bad.last_offset + 1
    assert tables[0].snapshot() == tables[1].snapshot()


# -- per-session transaction timeout --------------------------------------------------------


async def test_each_session_has_its_own_transaction_timeout() -> None:
    now = [10_000]
    c = FakeConsensus()
    stm = RmStm(c, RmStmConfig(transaction_timeout_ms=60_000), clock_ms=lambda: now[0])
    fast = await stm.init_producer(1, transaction_timeout_ms=500)
    slow = await stm.init_producer(2)  # the server default
    assert (fast.transaction_timeout_ms, slow.transaction_timeout_ms) == (500, 60_000)
    await stm.replicate(tx_data(0, epoch=fast.epoch, pid=1, ts=10_000), Q)
    await stm.replicate(tx_data(0, epoch=slow.epoch, pid=2, ts=10_000), Q)
    assert stm.min_open_timeout_ms() == 500
    assert await stm.abort_expired(10_499) == []
    assert await stm.abort_expired(10_500) == [1]
    assert list(stm.table.open_transactions()) == [2]
    with pytest.raises(FencedError):
        await stm.end_transaction(1, fast.epoch, commit=True)
    # the writer's own abort at the old epoch is answered by the timeout's abort
    r = await stm.end_transaction(1, fast.epoch, commit=False)
    assert r.producer_epoch == fast.epoch + 1
    # the timeout is replicated in the fence: a replica (a later leader) holds it too
    replica = ProducerTable()
    for b in c.log:
        replica.apply(b)
    assert replica.get(1).transaction_timeout_ms == 500
    assert replica.get(2).transaction_timeout_ms == -1
    assert replica.snapshot() == stm.snapshot()
    restored = ProducerTable()
    restored.restore(stm.snapshot())
    assert restored.transaction_timeout_ms(1, 60_000) == 500


@pytest.mark.parametrize("bad", [0, -2, 900_001])
async def test_a_timeout_outside_the_cap_is_refused_naming_the_field(bad: int) -> None:
    c = FakeConsensus()
    stm = RmStm(c, RmStmConfig(max_transaction_timeout_ms=900_000))
    with pytest.raises(
        ValueError,
        match=r"transaction_timeout_ms must be an int in \[1, 900000\] milliseconds "
        rf"\(or -1 for the server default\), got {bad}",
    ):
        await stm.init_producer(PID, transaction_timeout_ms=bad)
    assert c.log == []
    assert (
        await stm.init_producer(PID, transaction_timeout_ms=900_000)
    ).transaction_timeout_ms == 900_000


def test_fences_without_a_timeout_payload_mean_the_server_default() -> None:
    table = ProducerTable()
    old = RecordBatch.create(
        b"", kind=BatchKind.PRODUCER_FENCE, producer_id=PID, producer_epoch=0, first_sequence=-1
    ).stamped(0, 1)
    table.apply(old)
    assert table.transaction_timeout_ms(PID, 1234) == 1234
    table.apply(make_fence(PID, 1, timestamp_ms=0, transaction_timeout_ms=77).stamped(1, 1))
    assert table.transaction_timeout_ms(PID, 1234) == 77


# -- sequence wrap ---------------------------------------------------------------------------


def test_a_producer_writes_on_across_the_sequence_wrap_in_a_transaction() -> None:
    """A session that has written ~2**31 records: the next sequences wrap to 0, the
    transaction's count and last sequence follow, and a checked commit matches."""
    log = LogBuilder()
    table = ProducerTable()
    table.apply(log.fence(PID, 0))
    # start near the wrap point: as if 2**31 - 3 records were written before
    table.get(PID).last_sequence = SEQUENCE_MODULUS - 3
    batches = [(SEQUENCE_MODULUS - 2, 1), (SEQUENCE_MODULUS - 1, 3), (2, 2)]
    for first, count in batches:
        assert table.check(PID, 0, first, count) == Accept()
        table.apply(log.data(PID, 0, first, count, tx=True))
    state = table.get(PID)
    assert state.last_sequence == 3
    assert state.open_tx.record_count == 6
    # a retry of the batch that straddles the wrap is a duplicate with its offsets
    straddling = log.batches[2]
    assert table.check(PID, 0, SEQUENCE_MODULUS - 1, 3) == AlreadyWritten(
        straddling.base_offset, straddling.last_offset
    )
    assert table.check(PID, 0, 4, 1) == Accept()
    commit = make_marker(
        PID,
        0,
        commit=True,
        record_count=6,
        last_sequence=3,
        requested_epoch=0,
        reason=REASON_END_TXN,
        timestamp_ms=log.now_ms,
    )
    table.apply(log._place(commit))
    assert table.get(PID).last_marker.commit
    assert not table.aborted.is_aborted(PID, straddling.base_offset)
    restored = ProducerTable()
    restored.restore(table.snapshot())
    assert restored.producers() == table.producers()


async def test_rm_stm_accepts_a_producer_past_the_sequence_wrap() -> None:
    c = FakeConsensus()
    stm = RmStm(c)
    s = await stm.init_producer(PID)
    stm.table.get(PID).last_sequence = SEQUENCE_MODULUS - 2
    await stm.replicate(tx_data(SEQUENCE_MODULUS - 1, 2, epoch=s.epoch), Q)
    await stm.replicate(tx_data(1, 1, epoch=s.epoch), Q)
    r = await stm.end_transaction(PID, s.epoch, True, record_count=3, last_sequence=1)
    assert at(c, r.offset).kind is BatchKind.TX_COMMIT
    assert stm.table.get(PID).last_sequence == 1


def test_a_format_1_snapshot_still_restores_with_the_new_fields_at_their_defaults() -> None:
    import struct

    head = struct.pack("<4sBqqI", b"RMST", 1, 9, 1_000, 1)
    producer = struct.pack("<qhiqqqqB", PID, 3, 4, 17, 1_000, 6, 900, 1)
    recent = struct.pack("<iiqq", 0, 4, 6, 8)
    table = ProducerTable()
    table.restore(head + producer + recent + struct.pack("<I", 0))
    state = table.get(PID)
    assert (state.epoch, state.last_sequence, state.last_committed_version) == (3, 4, 17)
    assert state.open_tx.first_offset == 6 and state.open_tx.record_count == 0
    assert (state.transaction_timeout_ms, state.last_marker) == (-1, None)
    again = ProducerTable()
    again.restore(table.snapshot())  # re-encoded in the current format
    assert again.producers() == table.producers()
