"""The seeded simulation: 500 seeds of faults against the real core and stages."""

from __future__ import annotations

import pytest

from raftlog.raft.replicate_batcher import ReplicateResult
from raftlog.sim import SimConfig, run_seed, run_seeds
from raftlog.sim.checks import InvariantChecker, InvariantViolation
from raftlog.storage.batch import RecordBatch


def test_five_hundred_seeds_keep_every_invariant() -> None:
    """Each seed now plays directed scenarios and checks more invariants (about twice the
    cost of the first simulator), so CI runs 500; ``python -m benchmarks sim`` runs 10,000."""
    summary = run_seeds(range(500), processes=2)
    assert summary.seeds == 500
    assert [r.seed for r in summary.failed] == [], summary.failed[0].error
    # The histories did real work: thousands of quorum_ack writes were checked.
    assert summary.acked > 10_000
    assert summary.checks > 500 * 200


def test_a_seed_replays_exactly() -> None:
    first = run_seed(4242)
    second = run_seed(4242)
    assert first == second
    assert first.ok, first.error
    assert first.acked > 0


def test_both_group_sizes_are_simulated() -> None:
    sizes = {run_seed(s, SimConfig(chaos_s=0.5)).nodes for s in range(20)}
    assert sizes == {3, 5}


def _placed(base: int, term: int, payload: bytes, count: int = 1) -> RecordBatch:
    return RecordBatch.create(payload, count, timestamp_ms=0).stamped(base, term)


def test_checker_rejects_a_lost_quorum_ack_entry() -> None:
    checker = InvariantChecker()
    checker.record_ack(ReplicateResult(0, 0, 1), RecordBatch.create(b"a", timestamp_ms=0))
    with pytest.raises(InvariantViolation, match="quorum_ack entry at offset 0 term 1 was lost"):
        checker._merge(2, _placed(0, 2, b"other"))


def test_checker_rejects_diverging_committed_logs() -> None:
    checker = InvariantChecker()
    checker._merge(1, _placed(0, 1, b"x", count=2))
    with pytest.raises(InvariantViolation, match="log mismatch below the commit index"):
        checker._merge(2, _placed(0, 1, b"y", count=2))


def test_checker_reports_unacked_entries_missing_after_heal() -> None:
    checker = InvariantChecker()
    checker.record_ack(ReplicateResult(3, 3, 2), RecordBatch.create(b"z", timestamp_ms=0))
    with pytest.raises(
        InvariantViolation, match=r"offset 3 \(term 2\) is not in the committed log"
    ):
        checker.check_all_acked_committed()
