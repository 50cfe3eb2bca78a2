"""Mutation testing in CI: every planted fault in the core is caught by most seeds.

The full run (``python -m benchmarks sim --mutations``, 300 seeds) targets 90 %;
this small one runs 16 seeds per mutation (about 12 s on 2 cores). Seeds replay
exactly, so the scores are deterministic for a given code; the floors leave room for
small timing changes.
"""

from __future__ import annotations

import pytest

from raftlog.raft import mutations
from raftlog.sim.mutation import BASELINE, format_scores, run_mutations

SEEDS = range(16)
FLOOR = {  # measured on seeds 0-15 (since the isolate scenario cuts the leader off right
    # after an acknowledged write, and the calm spell holds appends eight times): 16 of 16
    # unless said; the floors leave a seed of room for small timing changes. The 300-seed
    # run of the same code (2026-12-02 03:55 UTC, after the backlog step moved before the
    # chaos, the lag scenario's write was made to be acknowledged, and node liveness came
    # to wait for a failed link): commit_on_leader_flush, dirty_as_flushed,
    # accept_stale_replies, ignore_inflight_bound, send_before_vote_saved,
    # read_before_commit_in_term 100 %; vote_twice_in_term 98.3, skip_truncation 97.7,
    # vote_ignores_log 94.0, recovery_pipelines_unmatched 93.0, paused_backlog_gap 92.7,
    # quiesced_keeps_dead_leader 92.0 % (the 90 % target met by each). 300 seeds of the
    # code that plays the late timeout-now step again (2026-12-02 10:50 UTC): baseline 0
    # failures; commit_on_leader_flush, dirty_as_flushed, accept_stale_replies,
    # ignore_inflight_bound, send_before_vote_saved, read_before_commit_in_term 100 %;
    # skip_truncation 99.7, lease_after_timeout_now 98.3 (87.7 with one attempt),
    # vote_twice_in_term 98.0, vote_ignores_log 95.0, paused_backlog_gap 94.3,
    # quiesced_keeps_dead_leader 93.7, recovery_pipelines_unmatched 93.0 %. After the
    # verdict came to order the campaign (RaftCore._order_campaign), `python -m
    # benchmarks sim --mutations` (2026-12-02 11:02 UTC, 300 seeds): baseline 0 failures;
    # the six above 100 %; skip_truncation 99.0, vote_twice_in_term 98.3, vote_ignores_log
    # 97.7, lease_after_timeout_now 97.3, paused_backlog_gap 94.3,
    # quiesced_keeps_dead_leader 93.7, recovery_pipelines_unmatched 92.7 %.
    "commit_on_leader_flush": 15,
    "dirty_as_flushed": 15,
    # 15 of 16 (seed 10, missed with one late timeout-now attempt too). The lag scenario
    # retries its write at the majority's leader and lags the followers that are behind
    # anyway (runner._behind_first): a stale winner shows only by losing an acknowledged
    # write.
    "vote_ignores_log": 15,
    "skip_truncation": 15,
    # The seeds draw small windows (runner.py) so that pausing happens at all.
    "accept_stale_replies": 15,
    "ignore_inflight_bound": 15,
    # Only a catch-up of several chunks shows it, which the seeds that draw 512 KiB
    # recovery chunks (7.5 %) rarely need. Measured 16 of 16 (2026-12-02 10:20 UTC).
    "recovery_pipelines_unmatched": 15,
    # Only a follower paused with a backlog of two batches or more shows it: the backlog
    # step between the prologue and the chaos (runner._backlog_before_chaos, eight rounds
    # of held appends) makes one in nearly every seed; the calm spell plays it again. It
    # used to be the calm spell's only, and 15 % of 300 seeds ended their chaos before
    # the calm spell started (83-87 %). Measured 16 of 16. The interaction script
    # inflight_window_full catches it every time (test_a_planted_fault_breaks_its_script).
    "paused_backlog_gap": 15,
    # Caught by the quiesce prologue (runner._quiesce_then_crash_leader): no leader within
    # QUIESCED_FAILOVER_S of the quiescent leader's crash. Measured 15 of 16 (seed 11).
    "quiesced_keeps_dead_leader": 14,
    # Every seed's split-vote scenario has candidates asking for votes in one term; a
    # voter that grants two of them trips one vote per term or election safety. The
    # interaction script split_vote catches it every time.
    "vote_twice_in_term": 15,
    # Every seed elects: the sim's check of every message against the sender's durable
    # vote (SimNode.check_durable_vote) sees the first vote request or grant that left
    # before its save.
    "send_before_vote_saved": 15,
    # The isolate scenario's new leader has not heard that the acknowledged write
    # committed: with the fault its read index is its lagging commit index, which the
    # check of linearizable reads (checks.py) sees at its election.
    # tests/raft/test_read_index.py catches it too.
    "read_before_commit_in_term": 15,
    # The late timeout-now step before the chaos (runner._late_timeout_now): the old
    # leader, on its lease, would serve reads while the target it sent timeout-now to
    # acknowledges a write in the next term. The step is played again (three times at
    # most) while the network's loss left its one campaign past the leases electing
    # nobody: measured 15 of 16 (seed 0: three attempts lost), 295 of 300 (it was 14 of
    # 16 and 263 of 300 with one attempt). The interaction script
    # read_after_transfer_timed_out catches it every time.
    "lease_after_timeout_now": 14,
}


@pytest.fixture(scope="module")
def scores() -> dict[str, int]:
    result = run_mutations(SEEDS, processes=2)
    print(format_scores(result))
    return {s.mutation: s.caught for s in result}


def test_the_unmutated_core_passes_every_seed(scores: dict[str, int]) -> None:
    assert scores[BASELINE] == 0


@pytest.mark.parametrize("name", mutations.MUTATIONS)
def test_each_mutation_is_caught(scores: dict[str, int], name: str) -> None:
    assert scores[name] >= FLOOR[name], f"{name}: caught by {scores[name]} of {len(SEEDS)} seeds"


def test_no_mutation_stays_planted_after_a_run() -> None:
    assert set() == mutations.ACTIVE
    with mutations.planted("skip_truncation"):
        assert mutations.active("skip_truncation")
    assert not mutations.active("skip_truncation")
    with pytest.raises(ValueError, match="unknown mutation"):
        run_mutations([0], ["no_such_fault"])
