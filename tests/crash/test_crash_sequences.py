"""Every storage operation sequence, crashed after every IO call, restarts cleanly.

Each scenario runs on the page-cache model (:class:`ModelFileSystem`). For every
IO call and several seeds the power is cut right after the call, a seeded
prefix of the unsynced state survives (with torn sectors), the log is reopened
and checked: every entry acknowledged as flushed is there byte for byte,
nothing appears that was never written, term and vote never go back, commit
context never goes back, and open never fails. The recovery itself is then
crashed after each of its IO calls and checked again.

Under ``RAFTLOG_TEST_FS_MUTATION=skip-fsync`` or ``skip-dir-fsync`` these tests
fail, and under ``skip-syncfs`` the one whose flushes go through syncfs does (see
test_crash_mutations.py).
"""

from __future__ import annotations

import pytest
from crash_harness import Driver, batches, crash_everywhere

from raftlog.storage.api import VoteState


def append_flush(d: Driver) -> None:
    """Appends and flushes across several size rolls (sealed segments, index entries)."""
    off = 0
    for round_ in range(4):
        new = batches(off, 1, [90, 130, 60], tag=round_)
        d.append(new)
        off = new[-1].last_offset + 1
        d.flush()
    d.append(batches(off, 1, [70, 70]))  # unflushed: may go, must not corrupt


def term_roll(d: Driver) -> None:
    """Each new term rolls a segment; votes are recorded before writing in the term."""
    off = 0
    for term in (1, 2, 3):
        d.save_vote(VoteState(term, term % 3))
        new = batches(off, term, [80, 50])
        d.append(new)
        off = new[-1].last_offset + 1
        if term != 2:  # term 2 is sealed by the roll to term 3, never flushed itself
            d.flush()


def truncate_after_conflict(d: Driver) -> None:
    """A follower's uncommitted suffix is replaced by the new leader's entries."""
    d.save_vote(VoteState(1, 1))
    d.append(batches(0, 1, [100, 100, 100]))  # 0..5
    d.flush()
    d.save_commit_context(1)
    d.append(batches(6, 1, [100, 100]))  # 6..9, unflushed
    d.save_vote(VoteState(2, 2))
    d.truncate(4)  # flushed but uncommitted 4..5, and unflushed 6..9, go
    d.append(batches(4, 2, [60, 60, 60], tag=1))
    d.flush()
    d.save_commit_context(7)


def truncate_across_segments(d: Driver) -> None:
    """Truncations that delete whole segments and cut a sealed one in the middle."""
    off = 0
    for term in (1, 1, 2, 2, 3):
        new = batches(off, term, [150, 150, 150], tag=off)
        d.append(new)
        off = new[-1].last_offset + 1
    d.flush()
    d.save_commit_context(3)
    seg_base = d.log._bases[-1]  # a whole-segment boundary: the segment file is deleted
    d.truncate(seg_base)
    d.truncate(8)  # inside an earlier sealed segment: cut it
    d.append(batches(8, 4, [90, 90], tag=5))
    d.flush()


def commit_context_writes(d: Driver) -> None:
    """Commit contexts (with a snapshot blob) advance as data is flushed."""
    off = 0
    for i in range(4):
        new = batches(off, 1, [120, 40])
        d.append(new)
        off = new[-1].last_offset + 1
        d.flush()
        d.save_commit_context(off - 1, snapshot=bytes([i]) * (50 + 300 * i))


def term_and_vote_record(d: Driver) -> None:
    """The vote record moves through terms, with and without a vote."""
    for term, voted in ((1, -1), (1, 2), (2, -1), (3, 3), (7, 1)):
        d.save_vote(VoteState(term, voted))


def retention(d: Driver) -> None:
    """Prefix truncation (retention) drops whole sealed segments; the start record first."""
    off = 0
    for round_ in range(3):
        new = batches(off, 1, [200, 200, 200], tag=round_)
        d.append(new)
        off = new[-1].last_offset + 1
    d.flush()
    d.save_commit_context(off - 1)
    d.prefix_truncate(10)
    d.append(batches(off, 2, [50]))
    d.flush()


def snapshot_install(d: Driver) -> None:
    """A follower behind its leader's log start gets a snapshot installed: its log
    (two segments, a commit context) is replaced by an empty one starting after the
    snapshot's offset, which then takes appends."""
    new = batches(0, 1, [300, 300, 300, 300])
    d.append(new)
    d.flush()
    d.save_commit_context(new[-1].last_offset)
    d.install(50, 3, b"snapshot as of 50")
    d.append(batches(51, 4, [60, 60]))
    d.flush()


def append_during_flush(d: Driver) -> None:
    """Appends land while a flush runs (before and after its fsync), one rolling a new
    segment (a new term) under it: each flush acknowledges only what it recorded."""
    d.append(batches(0, 1, [90, 90]))  # 0..3
    d.flush_around(before_sync=batches(4, 1, [80]), after_sync=batches(6, 1, [80]))  # 0..3
    d.flush_around(after_sync=batches(8, 2, [70]))  # 4..7; 8..9 roll a segment meanwhile
    d.flush()
    d.flush_around(after_sync=batches(10, 2, [60]))  # nothing recorded: 10..11 stay dirty
    d.append(batches(12, 2, [60]))  # unflushed tail


def flush_by_syncfs(d: Driver) -> None:
    """Flushes made durable by one syncfs (the node's, for all its groups) across size
    and term rolls, with appends landing around them: each acknowledges what it recorded."""
    off = 0
    for round_ in range(3):
        new = batches(off, 1 + round_ // 2, [90, 130, 60], tag=round_)
        d.append(new)
        off = new[-1].last_offset + 1
        late = batches(off, 1 + round_ // 2, [50], tag=round_)
        d.flush_by_barrier(after_sync=late)
        off = late[-1].last_offset + 1
    d.flush_by_barrier()
    d.append(batches(off, 2, [70]))  # unflushed: may go, must not corrupt


SCENARIOS = [
    flush_by_syncfs,
    snapshot_install,
    append_flush,
    append_during_flush,
    term_roll,
    truncate_after_conflict,
    truncate_across_segments,
    commit_context_writes,
    term_and_vote_record,
    retention,
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.__name__)
def test_crash_after_every_io_call(scenario, record_property):
    stats = crash_everywhere(scenario, seeds=3)
    record_property("crash_points", stats.crash_points)
    record_property("recovery_crash_points", stats.recovery_crash_points)
    print(
        f"{scenario.__name__}: {stats.io_calls} IO calls, {stats.crash_points} crash points, "
        f"{stats.recovery_crash_points} crash points inside recovery"
    )
    assert stats.io_calls > 5
