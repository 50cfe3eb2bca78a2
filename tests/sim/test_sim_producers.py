"""The producer simulation: rm_stm on every replica, producers retrying through faults."""

from __future__ import annotations

import pytest

import raftlog.producers.rm_stm as rm_stm
from raftlog.producers.markers import make_fence, make_marker
from raftlog.producers.outcomes import Accept, AlreadyWritten
from raftlog.producers.producer_table import ProducerTable
from raftlog.sim.checks import InvariantViolation
from raftlog.sim.producers import ProducerSimConfig, run_seed, run_seeds
from raftlog.sim.txn_model import LogModel, Status
from raftlog.storage.batch import RecordBatch

SEEDS = 256


def test_many_seeds_keep_every_producer_invariant() -> None:
    summary = run_seeds(range(SEEDS), processes=2)
    assert summary.seeds == SEEDS
    assert [r.seed for r in summary.failed] == [], summary.failed[0].error
    # The histories did real work of every kind (figures of the seeds 0..255: 13.5k
    # idempotent batches, 1,353 commits, 718 aborts, 499 dead sessions, 249 transactions
    # aborted by a fence or the timeout, 31.6k retried requests).
    assert summary.idempotent_acked > 5000
    assert summary.committed > 500
    assert summary.aborted > 200
    assert summary.died > 150
    assert summary.timeout_aborts > 80
    assert summary.retries > 10_000


def test_a_seed_replays_exactly() -> None:
    first = run_seed(4242)
    assert first.ok, first.error
    assert run_seed(4242) == first
    assert first.idempotent_acked > 0


def test_both_group_sizes_are_simulated() -> None:
    sizes = {run_seed(s, ProducerSimConfig(chaos_s=0.3)).nodes for s in range(12)}
    assert sizes == {3, 5}


# -- the checks catch broken producers -------------------------------------------------------


def _failures(seeds: range) -> list[str]:
    return [r.error for r in (run_seed(s) for s in seeds) if not r.ok]


def test_a_filter_that_shows_aborted_data_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_aborted_filter(batches, lso, aborted):  # type: ignore[no-untyped-def]
        return [b for b in batches if b.last_offset < lso and not b.is_control]

    monkeypatch.setattr(rm_stm, "visible_batches", no_aborted_filter)
    errors = _failures(range(8))
    assert errors
    assert all("the model hides (aborted or fenced)" in e for e in errors), errors[0]
    assert "replay: raftlog.sim.producers.run_seed(" in errors[0]


def test_a_table_that_writes_retries_again_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    check = ProducerTable.check

    def no_dedup(self, *args, **kw):  # type: ignore[no-untyped-def]
        outcome = check(self, *args, **kw)
        return Accept() if isinstance(outcome, AlreadyWritten) else outcome

    monkeypatch.setattr(ProducerTable, "check", no_dedup)
    errors = _failures(range(8))
    assert errors
    assert any("duplicate in producer" in e for e in errors), errors[0]


def test_an_lso_past_open_transactions_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ProducerTable, "last_stable_offset", lambda self: self.applied_offset + 1)
    errors = _failures(range(4))
    assert errors
    assert all("open transaction" in e for e in errors), errors[0]


# -- the model ---------------------------------------------------------------------------------


def _at(batch: RecordBatch, base: int) -> RecordBatch:
    return batch.stamped(base, 1)


def _data(pid: int, epoch: int, seq: int, base: int, tx: bool = True) -> RecordBatch:
    b = RecordBatch.create(
        b"d",
        transactional=tx,
        producer_id=pid,
        producer_epoch=epoch,
        first_sequence=seq,
        timestamp_ms=0,
    )
    return _at(b, base)


def test_model_commits_aborts_and_holds_the_lso_at_an_open_transaction() -> None:
    m = LogModel()
    m.feed(1, [_at(make_fence(7, 0, timestamp_ms=0), 0), _at(make_fence(8, 0, timestamp_ms=0), 1)])
    m.feed(1, [_data(7, 0, 0, 2), _data(8, 0, 0, 3), _data(7, 0, 1, 4)])
    assert m.last_stable_offset() == 2
    m.feed(1, [_at(make_marker(7, 0, commit=True, version=3, timestamp_ms=0), 5)])
    assert m.last_stable_offset() == 3  # producer 8's transaction is still open
    assert m.status[2] is m.status[4] is Status.VISIBLE
    assert m.status[3] is Status.PENDING
    # a newer epoch (a fence, or the timeout's abort marker) aborts the open transaction
    m.feed(1, [_at(make_marker(8, 1, commit=False, timestamp_ms=0), 6)])
    assert m.status[3] is Status.HIDDEN
    assert m.bump_aborts == 1
    assert m.last_stable_offset() == 7
    assert [b.base_offset for b in m.visible()] == [2, 4]
    assert m.last_committed_version(7) == 3


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        (_data(7, 0, 1, 3), "duplicate in producer 7 epoch 0: sequence 1 at offset 3, expected 2"),
        (_data(7, 0, 3, 3), "gap in producer 7 epoch 0: sequence 3 at offset 3, expected 2"),
        (_data(7, 1, 0, 3), "before that epoch's fence"),
        (_data(9, 0, 0, 3), "before any fence of it"),
    ],
)
def test_model_rejects_duplicates_gaps_and_unfenced_data(batch: RecordBatch, message: str) -> None:
    m = LogModel()
    m.feed(1, [_at(make_fence(7, 0, timestamp_ms=0), 0), _data(7, 0, 0, 1), _data(7, 0, 1, 2)])
    m.feed(1, [_data(7, 0, 1, 2)])  # already fed: ignored
    with pytest.raises(InvariantViolation, match=message):
        m.feed(1, [batch])


def test_model_rejects_data_of_a_fenced_epoch() -> None:
    m = LogModel()
    m.feed(1, [_at(make_fence(7, 0, timestamp_ms=0), 0), _at(make_fence(7, 1, timestamp_ms=0), 1)])
    with pytest.raises(InvariantViolation, match="at fenced epoch 0 landed at offset 2"):
        m.feed(1, [_data(7, 0, 0, 2)])


def test_model_rejects_a_gap_in_the_log() -> None:
    m = LogModel()
    with pytest.raises(InvariantViolation, match="leaves a gap after -1"):
        m.feed(3, [_data(7, 0, 0, 5)])


def test_the_table_agrees_with_the_model_on_a_short_log() -> None:
    log = [
        _at(make_fence(7, 0, timestamp_ms=0), 0),
        _data(7, 0, 0, 1),
        _data(7, 0, 1, 2),
        _at(make_marker(7, 0, commit=False, timestamp_ms=0), 3),
        _data(7, 0, 2, 4, tx=False),
    ]
    table, model = ProducerTable(), LogModel()
    for b in log:
        table.apply(b)
    model.feed(1, log)
    assert model.last_stable_offset() == table.last_stable_offset() == 5
    assert [b.base_offset for b in model.visible()] == [4]
    assert not table.aborted.is_aborted(7, 4) and table.aborted.is_aborted(7, 1)
