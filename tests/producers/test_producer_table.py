"""The pure producer table: every outcome, transactions, LSO, expiry, LRU and snapshots."""

from __future__ import annotations

import pytest

from raftlog.producers.outcomes import (
    Accept,
    AlreadyWritten,
    Fenced,
    OlderDuplicate,
    OutOfOrder,
)
from raftlog.producers.producer_state import SequenceTail
from raftlog.producers.producer_table import ProducerTable, ProducerTableConfig
from raftlog.producers.serial import SEQUENCE_MODULUS
from tests.producers.builders import LogBuilder

PID = 7


def table_with(log: LogBuilder, config: ProducerTableConfig | None = None) -> ProducerTable:
    table = ProducerTable(config)
    for b in log.batches:
        table.apply(b)
    return table


def test_next_sequence_is_accepted_and_applied_state_tracks_it() -> None:
    log = LogBuilder()
    log.data(PID, 0, 0, 3)
    table = table_with(log)
    assert table.get(PID).last_sequence == 2
    assert table.check(PID, 0, 3, 2) == Accept()
    assert table.applied_offset == 2


def test_written_sequence_returns_original_offsets_within_last_five() -> None:
    log = LogBuilder()
    log.plain(10)  # offsets 0..9 belong to someone else
    written = [log.data(PID, 0, seq, 2) for seq in range(0, 12, 2)]  # 6 batches
    table = table_with(log)
    for b in written[1:]:
        assert table.check(PID, 0, b.first_sequence, 2) == AlreadyWritten(
            b.base_offset, b.last_offset
        )
    # the 6th-last batch is out of the cache: a duplicate carrying the last sequence
    assert table.check(PID, 0, 0, 2) == OlderDuplicate(last_sequence=11)


def test_gap_is_out_of_order_and_partial_overlap_too() -> None:
    log = LogBuilder()
    log.data(PID, 0, 0, 5)
    table = table_with(log)
    assert table.check(PID, 0, 6, 1) == OutOfOrder(expected_sequence=5, first_sequence=6)
    assert table.check(PID, 0, 3, 4) == OutOfOrder(expected_sequence=5, first_sequence=3)


def test_older_epoch_is_fenced_and_newer_epoch_restarts_at_zero() -> None:
    log = LogBuilder()
    log.data(PID, 3, 0, 5)
    table = table_with(log)
    assert table.check(PID, 2, 5, 1) == Fenced(current_epoch=3, request_epoch=2)
    assert table.check(PID, 4, 0, 1) == Accept()
    assert table.check(PID, 4, 5, 1) == OutOfOrder(expected_sequence=0, first_sequence=5)
    log.data(PID, 4, 0, 1)
    table = table_with(log)
    state = table.get(PID)
    assert (state.epoch, state.last_sequence, len(state.recent)) == (4, 0, 1)
    assert table.check(PID, 3, 5, 1) == Fenced(current_epoch=4, request_epoch=3)


def test_unknown_producer_is_accepted_at_any_epoch_and_sequence() -> None:
    table = ProducerTable()
    assert table.check(PID, 9, 12345, 3) == Accept()


def test_tail_overrides_the_expected_sequence_but_duplicates_still_resolve() -> None:
    log = LogBuilder()
    first = log.data(PID, 0, 0, 1)
    table = table_with(log)
    tail = SequenceTail(epoch=0, last_sequence=3)  # seqs 1..3 are in flight
    assert table.check(PID, 0, 4, 1, tail) == Accept()
    assert table.check(PID, 0, 1, 1, tail) == OlderDuplicate(last_sequence=3)
    assert table.check(PID, 0, 0, 1, tail) == AlreadyWritten(first.base_offset, first.last_offset)
    assert table.check(PID, 0, 0, 1, SequenceTail(1, -1)) == Fenced(1, 0)


def test_sequences_wrap_around() -> None:
    log = LogBuilder()
    log.data(PID, 0, SEQUENCE_MODULUS - 2, 2)
    table = ProducerTable()
    table.apply(log.batches[0])  # an unknown producer may start anywhere
    assert table.get(PID).last_sequence == SEQUENCE_MODULUS - 1
    assert table.check(PID, 0, 0, 1) == Accept()
    log.data(PID, 0, 0, 3)
    table.apply(log.batches[1])
    assert table.check(PID, 0, 3, 1) == Accept()
    assert table.check(PID, 0, SEQUENCE_MODULUS - 2, 2) == AlreadyWritten(0, 1)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((-1, 0, 0, 1), "producer_id"),
        ((PID, 2**15, 0, 1), "producer_epoch"),
        ((PID, 0, -1, 1), "first_sequence"),
        ((PID, 0, 0, 0), "record_count"),
    ],
)
def test_bad_request_fields_are_named(args: tuple[int, ...], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ProducerTable().check(*args)


def test_transaction_commit_records_version_and_moves_lso() -> None:
    log = LogBuilder()
    log.plain(2)
    tx = log.data(PID, 0, 0, 3, tx=True)
    table = table_with(log)
    assert table.open_transactions()[PID].first_offset == tx.base_offset
    assert table.last_stable_offset() == tx.base_offset == 2
    marker = log.commit(PID, 0, version=41)
    table.apply(marker)
    assert table.open_transactions() == {}
    assert table.last_stable_offset() == marker.last_offset + 1
    assert table.get(PID).last_committed_version == 41
    assert len(table.aborted) == 0


def test_abort_marker_records_aborted_range() -> None:
    log = LogBuilder()
    log.plain(1)
    tx = log.data(PID, 0, 0, 2, tx=True)
    log.plain(1)  # another writer's data in the middle stays visible
    marker = log.abort(PID, 0)
    table = table_with(log)
    assert list(table.aborted.entries()) == [(PID, tx.base_offset, marker.last_offset)]
    assert table.aborted.is_aborted(PID, tx.last_offset)
    assert not table.aborted.is_aborted(PID + 1, tx.last_offset)
    assert table.get(PID).last_committed_version == -1


def test_fence_aborts_the_open_transaction_of_the_older_epoch() -> None:
    log = LogBuilder()
    tx = log.data(PID, 0, 0, 2, tx=True)
    log.commit(PID, 0, version=5)
    tx2 = log.data(PID, 0, 2, 2, tx=True)
    fence = log.fence(PID, 1)
    table = table_with(log)
    state = table.get(PID)
    assert (state.epoch, state.last_sequence, state.last_committed_version) == (1, -1, 5)
    assert state.open_tx is None
    assert list(table.aborted.entries()) == [(PID, tx2.base_offset, fence.base_offset - 1)]
    assert not table.aborted.is_aborted(PID, tx.base_offset)
    # the new session starts at sequence 0; the old one is fenced
    assert table.check(PID, 1, 0, 1) == Accept()
    assert table.check(PID, 0, 4, 1) == Fenced(1, 0)


def test_stale_epoch_batches_are_ignored_by_apply() -> None:
    log = LogBuilder()
    log.fence(PID, 2)
    log.data(PID, 1, 0, 1, tx=True)
    table = table_with(log)
    assert table.get(PID).last_sequence == -1
    assert table.open_transactions() == {}
    assert table.applied_offset == 1


def test_reapplying_already_applied_batches_changes_nothing() -> None:
    log = LogBuilder()
    log.data(PID, 0, 0, 1, tx=True)
    log.abort(PID, 0)
    table = table_with(log)
    before = table.snapshot()
    for b in log.batches:
        table.apply(b)
    assert table.snapshot() == before


def test_idle_producers_expire_by_batch_time_but_open_transactions_stay() -> None:
    config = ProducerTableConfig(producer_expiry_ms=1_000)
    log = LogBuilder(now_ms=0)
    log.data(1, 0, 0, 1)
    log.data(2, 0, 0, 1, tx=True)
    log.now_ms = 500
    log.data(3, 0, 0, 1)
    log.now_ms = 1_200
    log.plain()
    table = table_with(log, config)
    assert [p.producer_id for p in table.producers()] == [2, 3]
    # the expired producer is unknown again: its next batch is accepted at any sequence
    assert table.check(1, 0, 17, 1) == Accept()


def test_lru_bound_drops_the_least_recently_active_producer() -> None:
    config = ProducerTableConfig(max_producers=2)
    log = LogBuilder()
    log.data(1, 0, 0, 1, tx=True)
    log.data(2, 0, 0, 1)
    log.data(3, 0, 0, 1)
    log.data(4, 0, 0, 1)
    table = table_with(log, config)
    # producer 1 holds an open transaction, so it is kept over the bound
    assert [p.producer_id for p in table.producers()] == [1, 4]
    log.commit(1, 0)
    log.data(5, 0, 0, 1)
    table = table_with(log, config)
    assert [p.producer_id for p in table.producers()] == [1, 5]


def test_bad_config_names_the_field() -> None:
    with pytest.raises(ValueError, match="max_producers"):
        ProducerTableConfig(max_producers=0)
    with pytest.raises(ValueError, match="producer_expiry_ms"):
        ProducerTableConfig(producer_expiry_ms=-5)


def test_snapshot_restore_round_trips_everything() -> None:
    log = LogBuilder()
    for seq in range(0, 14, 2):
        log.data(PID, 0, seq, 2)
    log.data(PID + 1, 3, 0, 1, tx=True)
    log.abort(PID + 1, 3)
    log.data(PID + 1, 3, 1, 1, tx=True)
    log.data(PID + 2, 0, 0, 1, tx=True)
    log.commit(PID + 2, 0, version=9)
    table = table_with(log)
    restored = ProducerTable()
    restored.restore(table.snapshot())
    assert restored.producers() == table.producers()
    assert restored.aborted == table.aborted
    assert restored.open_transactions() == table.open_transactions()
    assert restored.applied_offset == table.applied_offset
    assert restored.snapshot() == table.snapshot()
    # the restored table keeps going exactly like the original
    nxt = log.commit(PID + 1, 3, version=1)
    table.apply(nxt)
    restored.apply(nxt)
    assert restored.snapshot() == table.snapshot()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "truncated"),
        (b"XXXX" + bytes(40), "must start with"),
        (b"RMST\x09" + bytes(40), "format must be 1"),
    ],
)
def test_bad_snapshot_is_rejected_with_a_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ProducerTable().restore(data)


def test_snapshot_with_trailing_bytes_is_rejected() -> None:
    with pytest.raises(ValueError, match="trailing bytes"):
        ProducerTable().restore(ProducerTable().snapshot() + b"\x00")


def test_activity_is_the_log_clock_so_an_old_batch_timestamp_does_not_expire_it() -> None:
    config = ProducerTableConfig(producer_expiry_ms=1_000)
    log = LogBuilder(now_ms=50_000)
    log.plain()
    log.now_ms = 10  # a batch stamped far in the past (a leader whose clock is behind)
    log.data(PID, 0, 0, 1)
    log.now_ms = 50_500
    log.plain()
    table = table_with(log, config)
    assert table.log_clock_ms == 50_500
    assert table.get(PID).last_activity_ms == 50_000


def test_the_open_listener_hears_the_first_transaction_open_and_the_last_one_end() -> None:
    """What the node's transaction-timeout loop relies on to look at only the partitions
    with a transaction open: every change between none open and some open is told, by
    apply (begin, commit, abort, fence) and by restore, and nothing else is."""
    log = LogBuilder()
    log.data(PID, 0, 0, 1, tx=True)  # opens: told True
    log.data(PID + 1, 0, 0, 1, tx=True)  # a second one: nothing
    log.data(PID, 0, 1, 1, tx=True)  # more of the first: nothing
    log.commit(PID, 0, version=1)  # one left: nothing
    log.abort(PID + 1, 0)  # none left: told False
    log.data(PID + 2, 0, 0, 1, tx=True)  # told True
    log.fence(PID + 2, 1)  # fenced, so aborted: told False
    heard: list[bool] = []
    table = ProducerTable()
    table.open_listener = heard.append
    seen = []
    for b in log.batches:
        table.apply(b)
        seen.append(table.has_open_transactions)
    assert heard == [True, False, True, False]
    assert seen == [True, True, True, True, False, True, False]
    # restore: told when the snapshot's state differs from the table's
    opened = ProducerTable()
    for b in log.batches[:2]:
        opened.apply(b)
    table.restore(opened.snapshot())
    table.restore(opened.snapshot())
    table.restore(ProducerTable().snapshot())
    assert heard == [True, False, True, False, True, False]
