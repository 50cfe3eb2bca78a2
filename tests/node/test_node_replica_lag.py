"""Kafka's ISR rule over a leader's follower progress: a follower lags once it has not
caught up to the leader's last offset for longer than the limit; one that keeps pace a
sample behind never does; a new term starts every follower as caught up."""

from __future__ import annotations

from raftlog.node.replica_lag import FollowerLag, FollowerLagTracker

LIMIT_MS = 30_000


def test_a_stuck_follower_lags_after_the_limit_and_not_before() -> None:
    t = FollowerLagTracker()
    t.observe(0.0, 1, 100, {2: 100, 3: 100})
    for i in range(1, 61):  # 30 s of writes; node 3 stops at 100
        t.observe(i * 0.5, 1, 100 + 10 * i, {2: 100 + 10 * i, 3: 100})
    assert t.lagging(30.0, LIMIT_MS) == []  # exactly 30 s: not beyond the limit
    t.observe(30.5, 1, 700, {2: 700, 3: 100})
    assert t.lagging(30.5, LIMIT_MS) == [FollowerLag(3, 600, 30_500)]
    # it catches up: no longer lagging at once
    t.observe(31.0, 1, 700, {2: 700, 3: 700})
    assert t.lagging(31.0, LIMIT_MS) == []


def test_a_follower_one_sample_behind_under_steady_writes_never_lags() -> None:
    t = FollowerLagTracker()
    end = 0
    for i in range(200):  # 100 s; the follower always matches the previous sample's end
        prev, end = end, end + 50
        t.observe(i * 0.5, 7, end, {2: prev, 3: end - 1 if i % 2 else prev})
    assert t.lagging(99.5, LIMIT_MS) == []


def test_a_slow_follower_that_never_reaches_an_old_end_lags() -> None:
    t = FollowerLagTracker()
    end = 0
    for i in range(70):  # the follower falls behind by more each sample
        end += 100
        t.observe(i * 0.5, 1, end, {2: end - 100 - 10 * i})
    lag = t.lagging(34.5, LIMIT_MS)
    assert [f.node for f in lag] == [2] and lag[0].behind_records == 100 + 690


def test_a_new_term_or_reset_starts_everyone_caught_up_and_gone_followers_are_dropped() -> None:
    t = FollowerLagTracker()
    t.observe(0.0, 1, 10, {2: 0, 3: 0})
    t.observe(40.0, 1, 10, {2: 0, 3: 0})
    assert [f.node for f in t.lagging(40.0, LIMIT_MS)] == [2, 3]
    t.observe(41.0, 2, 10, {2: 0})  # a new leadership: node 3 is no longer a follower
    assert t.lagging(41.0, LIMIT_MS) == []
    assert [f.node for f in t.lagging(71.5, LIMIT_MS)] == [2]
    t.reset()
    assert t.lagging(1000.0, LIMIT_MS) == []
