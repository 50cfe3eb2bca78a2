"""The seeded simulation: 500 seeds of faults against the real core and stages."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from raftlog.raft.read_index import ReadIndex
from raftlog.raft.replicate_batcher import ReplicateResult
from raftlog.sim import SimConfig, run_seed, run_seeds
from raftlog.sim.checks import InvariantChecker, InvariantViolation
from raftlog.storage.api import VoteState
from raftlog.storage.batch import RecordBatch


# A bound against a hang, not a speed goal: about 100-200 s of 2 processes on a
# 2-core machine, longer when it shares the machine (the default bound is 300 s).
@pytest.mark.timeout(600)
def test_five_hundred_seeds_keep_every_invariant() -> None:
    """Each seed now plays directed scenarios and checks more invariants (about twice the
    cost of the first simulator), so CI runs 500; ``python -m benchmarks sim`` runs 10,000."""
    summary = run_seeds(range(500), processes=2)
    assert summary.seeds == 500
    assert [r.seed for r in summary.failed] == [], summary.failed[0].error
    # The histories did real work: thousands of quorum_ack writes were checked.
    assert summary.acked > 10_000
    assert summary.checks > 500 * 200
    # Quiescence was exercised: nearly every seed's group quiesced in the prologue (then
    # its leader crashed and another led within 2 s), and many again during the chaos,
    # before a random fault struck it (measured 83 times in the first 60 seeds).
    assert summary.quiesced > 500 * 1.2, summary.quiesced
    # Elections were contested: every seed's split-vote scenario has candidates asking for
    # votes in one term, most of them electing nobody in it; and the network lost and
    # duplicated vote requests and replies (measured on seeds 100-199: 162 contested
    # terms, 77 split votes).
    assert summary.contested > 500, summary.contested
    assert summary.split_votes > 250, summary.split_votes
    assert summary.votes_lost > 500 and summary.votes_duplicated > 500, (
        summary.votes_lost,
        summary.votes_duplicated,
    )


def test_quiescence_is_what_the_seeds_count() -> None:
    """The count above can fail: with quiescence off, no seed's group ever quiesces."""
    from raftlog.sim import runner

    options = runner.sim_options

    def no_quiesce():  # type: ignore[no-untyped-def]
        o = options()
        o.quiesce = False
        return o

    runner.sim_options = no_quiesce
    try:
        results = [run_seed(s, SimConfig(chaos_s=1.0)) for s in range(5)]
    finally:
        runner.sim_options = options
    assert all(r.ok for r in results), [r.error for r in results if not r.ok][:1]
    assert [r.quiesced for r in results] == [0] * 5


def test_a_seed_replays_exactly() -> None:
    first = run_seed(4242)
    second = run_seed(4242)
    assert first == second
    assert first.ok, first.error
    assert first.acked > 0


def test_both_group_sizes_are_simulated() -> None:
    sizes = {run_seed(s, SimConfig(chaos_s=0.5)).nodes for s in range(20)}
    assert sizes == {3, 5}


def _node(node_id: int, term: int, leader: bool = True) -> SimpleNamespace:
    """What the checker's election hooks read of a node (a leader that has not committed
    an entry of its term yet: it serves no reads)."""
    waiting = ReadIndex(-1, leader, "has not committed an entry of its term yet")
    core = SimpleNamespace(term=term, read_index=lambda: waiting)
    return SimpleNamespace(
        node_id=node_id, consensus=SimpleNamespace(term=term, is_leader=leader, core=core)
    )


def test_checker_rejects_a_new_leader_whose_read_index_misses_an_earlier_commit() -> None:
    checker = InvariantChecker()
    checker.record_ack(ReplicateResult(0, 4, 1), _placed(0, 1, b"acked", 5))
    node = _node(2, 2)
    checker.record_leader(node)  # type: ignore[arg-type]
    assert checker.pending is None  # it serves no read yet
    node.consensus.core.read_index = lambda: ReadIndex(3, True)  # below offset 4
    checker.record_leader(node)  # type: ignore[arg-type]
    assert checker.pending is not None
    assert "read index 3, below offset 4, committed before its term" in str(checker.pending)


def test_checker_rejects_two_leaders_in_a_term_even_one_already_gone() -> None:
    checker = InvariantChecker()
    checker.record_leader(_node(1, 3))  # type: ignore[arg-type]
    checker.record_leader(_node(2, 4))  # type: ignore[arg-type]
    assert checker.pending is None
    # Node 1 stepped down or crashed long ago: no step saw both, the hook sees it.
    checker.record_leader(_node(3, 3))  # type: ignore[arg-type]
    with pytest.raises(InvariantViolation, match="two leaders in term 3: nodes 1 and 3"):
        checker.check([])


def test_checker_rejects_a_second_vote_in_a_term() -> None:
    checker = InvariantChecker()
    checker.record_vote(_node(1, 2), VoteState(2, -1))  # type: ignore[arg-type]
    checker.record_vote(_node(1, 2), VoteState(2, 1))  # type: ignore[arg-type]
    checker.record_vote(_node(1, 2), VoteState(2, 1))  # type: ignore[arg-type]  # again: fine
    checker.record_vote(_node(2, 2), VoteState(2, 2))  # type: ignore[arg-type]
    checker.record_vote(_node(1, 3), VoteState(3, 2))  # type: ignore[arg-type]  # a new term
    assert checker.pending is None
    assert checker.contested_terms == 1 and checker.split_votes == 1
    checker.record_vote(_node(1, 3), VoteState(3, 3))  # type: ignore[arg-type]
    with pytest.raises(InvariantViolation, match="node 1 voted for node 2 and then for node 3"):
        checker.check([])


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
