"""Unit tests of SegmentedLog (and the MemoryLog twin where the contract is shared)."""

from __future__ import annotations

import pathlib

import pytest
from storage_helpers import flip_byte, make_batches, segment_files

from raftlog.storage.api import CommitContext, StorageCorruption, VoteState
from raftlog.storage.batch import HEADER_SIZE
from raftlog.storage.log import SegmentedLog
from raftlog.storage.memory import MemoryLog


def open_log(path: pathlib.Path, **kw) -> SegmentedLog:
    kw.setdefault("segment_bytes", 1024)
    kw.setdefault("index_interval_bytes", 128)
    return SegmentedLog.open(path, **kw)


@pytest.fixture(params=["segmented", "memory"])
def log(request, tmp_path):
    if request.param == "memory":
        yield MemoryLog()
        return
    log = open_log(tmp_path / "log")
    yield log
    log.close()


def test_empty_log_offsets(log):
    assert (log.start_offset, log.dirty_offset, log.flushed_offset) == (0, -1, -1)
    assert log.last_term == 0
    assert log.term_at(-1) == 0
    assert log.term_at(0) is None
    assert log.read(0, 100) == []


def test_append_advances_dirty_flush_advances_flushed(log):
    batches = make_batches(0, 1, [10, 20, 30])
    assert log.append(batches) == 5
    assert (log.dirty_offset, log.flushed_offset) == (5, -1)
    assert log.flush() == 5
    assert log.flushed_offset == 5
    assert log.read(0, 10**6) == batches


def test_append_rejects_gap_with_expected_and_got(log):
    log.append(make_batches(0, 1, [5]))
    with pytest.raises(ValueError, match="expected base offset 2, got 4"):
        log.append(make_batches(4, 1, [5]))
    with pytest.raises(ValueError, match="terms must not decrease"):
        log.append(make_batches(2, 2, [5]) + make_batches(4, 1, [5]))
    assert log.dirty_offset == 1  # all-or-nothing: the valid first batch was not written


def test_read_returns_whole_batches_within_budget_and_end(log):
    batches = make_batches(0, 1, [100] * 10)  # offsets 0..19, 152 bytes each
    log.append(batches)
    assert log.read(3, 1) == [batches[1]]  # at least one, starting with the one holding 3
    assert log.read(4, 2 * 152) == batches[2:4]
    assert log.read(4, 10**6, end=9) == batches[2:5]
    assert log.read(4, 10**6, end=3) == []
    assert log.read(20, 10**6) == []


def test_read_below_start_is_an_error(log):
    log.append(make_batches(0, 1, [10] * 3))
    log.prefix_truncate(6)  # everything: both implementations drop all
    with pytest.raises(ValueError, match="below the log start offset 6"):
        log.read(0, 100)


def test_truncate_drops_suffix_and_clamps_flushed(log):
    batches = make_batches(0, 1, [50] * 4) + make_batches(8, 2, [50] * 4)
    log.append(batches)
    log.flush()
    with pytest.raises(ValueError, match="offset 5 is not a batch boundary"):
        log.truncate(5)
    log.truncate(6)
    assert (log.dirty_offset, log.flushed_offset, log.last_term) == (5, 5, 1)
    assert log.read(0, 10**6) == batches[:3]
    assert log.term_at(6) is None
    log.append(make_batches(6, 3, [7]))
    assert log.term_at(7) == 3
    log.truncate(0)
    assert (log.dirty_offset, log.flushed_offset, log.last_term) == (-1, -1, 0)


def test_prefix_truncate_keeps_term_of_dropped_prefix(log):
    log.append(make_batches(0, 1, [200] * 6) + make_batches(12, 4, [200] * 6))
    log.prefix_truncate(12)
    assert log.start_offset == 12
    assert log.term_at(11) == 1
    assert log.term_at(10) is None
    assert log.read(12, 10**6)[0].base_offset == 12
    with pytest.raises(ValueError, match="at most dirty_offset \\+ 1 = 24"):
        log.prefix_truncate(25)
    log.prefix_truncate(24)
    assert (log.start_offset, log.dirty_offset, log.last_term, log.term_at(23)) == (24, 23, 4, 4)
    assert log.append(make_batches(24, 5, [1])) == 25


def test_restart_at_drops_everything_and_starts_after_the_snapshot(log):
    log.append(make_batches(0, 1, [200] * 6) + make_batches(12, 2, [200] * 4))
    with pytest.raises(ValueError, match="restart offset -1 is below the log start 0"):
        log.restart_at(-1, 1)
    log.restart_at(40, 5)  # past the end: a snapshot as of 39 replaces the whole log
    assert (log.start_offset, log.dirty_offset, log.flushed_offset) == (40, 39, 39)
    assert (log.term_at(39), log.term_at(9), log.last_term) == (5, None, 5)
    assert log.read(40, 10**6) == []
    with pytest.raises(ValueError):
        log.read(9, 10**6)
    with pytest.raises(ValueError, match="expected base offset 40, got 10"):
        log.append(make_batches(10, 5, [1]))
    assert log.append(make_batches(40, 5, [1, 1])) == 43
    assert [b.base_offset for b in log.read(40, 10**6)] == [40, 42]


def test_vote_and_commit_context_roundtrip(log):
    assert log.load_vote() == VoteState()
    assert log.load_commit_context() is None
    log.save_vote(VoteState(term=7, voted_for=2))
    ctx = CommitContext(committed_offset=41, term=7, snapshot=bytes(range(256)) * 4096)
    log.save_commit_context(ctx)
    assert log.load_vote() == VoteState(term=7, voted_for=2)
    assert log.load_commit_context() == ctx


def test_an_older_commit_context_never_replaces_a_newer_one(log):
    # A context taken before a snapshot install's but saved after it: the file must not
    # go back to the older context.
    newer = CommitContext(committed_offset=90, term=3, snapshot=b"installed")
    log.save_commit_context(newer)
    log.save_commit_context(CommitContext(committed_offset=40, term=2, snapshot=b"stale"))
    assert log.load_commit_context() == newer
    assert log.commit_context_offset == 90
    again = CommitContext(committed_offset=90, term=3, snapshot=b"same offset")
    log.save_commit_context(again)
    assert log.load_commit_context() == again


# -- SegmentedLog only --------------------------------------------------------------------


def test_segments_roll_on_size_and_term_and_names_carry_base_and_term(tmp_path):
    with open_log(tmp_path, segment_bytes=400) as log:
        log.append(make_batches(0, 1, [100] * 5))  # 152 bytes each: two per segment
        log.append(make_batches(10, 3, [10]))  # a new term rolls at once
        names = [p.name for p in segment_files(tmp_path)]
        assert names == [
            "00000000000000000000-00000000000000000001.log",
            "00000000000000000004-00000000000000000001.log",
            "00000000000000000008-00000000000000000001.log",
            "00000000000000000010-00000000000000000003.log",
        ]
        assert [log.term_at(o) for o in (0, 9, 10, 11)] == [1, 1, 3, 3]


def test_reopen_gives_same_content_and_flushed_equals_dirty(tmp_path):
    batches = make_batches(0, 1, [300] * 7) + make_batches(14, 2, [30] * 9)
    with open_log(tmp_path) as log:
        log.append(batches[:10])
        log.flush()
        log.append(batches[10:])  # not flushed, but a clean close keeps it in the page cache
        log.save_commit_context(CommitContext(committed_offset=13, term=1))
    with open_log(tmp_path) as log:
        assert (log.dirty_offset, log.flushed_offset, log.start_offset) == (31, 31, 0)
        assert log.read(0, 10**6) == batches
        assert log.recovery_report.lost_committed_suffix is False
        assert log.recovery_report.committed_offset == 13
        assert log.recovery_report.warnings == ()


def test_read_seeks_through_index_instead_of_scanning_from_segment_start(tmp_path):
    with open_log(tmp_path, segment_bytes=10**6, index_interval_bytes=64) as log:
        batches = make_batches(0, 1, [40] * 20)
        log.append(batches)
        log.append(make_batches(40, 2, [1]))  # seal the first segment
    first = segment_files(tmp_path)[0]
    batch_bytes = HEADER_SIZE + 40
    flip_byte(first, batch_bytes + HEADER_SIZE + 3)  # damage the second batch's payload only
    with open_log(tmp_path, segment_bytes=10**6, index_interval_bytes=64) as log:
        # a scan from the segment start would hit the damaged batch: the index skips it
        assert log.read(30, 10**6, end=39) == batches[15:]
        with pytest.raises(StorageCorruption, match=f"{first}.*position {batch_bytes}") as err:
            log.read(2, 1)
        assert (err.value.path, err.value.position) == (str(first), batch_bytes)


def test_commit_context_past_log_end_is_reported_not_fatal(tmp_path):
    with open_log(tmp_path) as log:
        log.append(make_batches(0, 1, [10] * 3))
        log.flush()
        log.save_commit_context(CommitContext(committed_offset=9, term=1, snapshot=b"state"))
        log.truncate(2)
    with open_log(tmp_path) as log:
        report = log.recovery_report
        assert report.lost_committed_suffix is True
        assert (report.committed_offset, report.dirty_offset) == (9, 1)
        assert "offset 9 was committed but the log ends at offset 1" in report.warnings[0]
        assert log.load_commit_context().snapshot == b"state"


def test_prefix_truncate_and_truncate_persist_across_reopen(tmp_path):
    batches = make_batches(0, 1, [200] * 12)
    with open_log(tmp_path) as log:
        log.append(batches)
        log.flush()
        log.prefix_truncate(9)
        start = log.start_offset
        log.truncate(20)
    with open_log(tmp_path) as log:
        assert log.start_offset == start > 0
        assert log.term_at(start - 1) == 1
        assert log.dirty_offset == 19
        assert log.read(start, 10**6) == [b for b in batches if start <= b.base_offset < 20]


def test_restart_at_persists_across_reopen(tmp_path):
    with open_log(tmp_path, segment_bytes=400) as log:
        log.append(make_batches(0, 1, [100] * 8))
        log.flush()
        log.restart_at(100, 3)
        log.append(make_batches(100, 4, [50]))
        log.flush()
    with open_log(tmp_path, segment_bytes=400) as log:
        assert (log.start_offset, log.dirty_offset, log.term_at(99)) == (100, 101, 3)
        assert [(b.base_offset, b.term) for b in log.read(100, 10**6)] == [(100, 4)]
        assert sorted(int(p.name.split("-")[0]) for p in tmp_path.glob("*.log")) == [100]


def test_open_rejects_bad_options(tmp_path):
    with pytest.raises(ValueError, match="segment_bytes must be a positive int"):
        SegmentedLog.open(tmp_path, segment_bytes=0)
    with pytest.raises(ValueError, match="index_interval_bytes must be a positive int"):
        SegmentedLog.open(tmp_path, index_interval_bytes="4k")


def test_memory_log_crash_and_tear_tail():
    log = MemoryLog()
    log.append(make_batches(0, 1, [5] * 2))
    log.flush()
    log.append(make_batches(4, 1, [5] * 3))
    log.save_commit_context(CommitContext(committed_offset=7, term=1))
    assert log.tear_tail(1) == 5
    assert (log.flushed_offset, log.recovery_report.lost_committed_suffix) == (5, True)
    log.append(make_batches(6, 2, [5]))
    assert log.crash() == 5
    assert [b.base_offset for b in log.read(0, 10**6)] == [0, 2, 4]


def test_batches_larger_than_a_read_chunk_read_back_whole(tmp_path):
    # Regression: the scanner read one 256 KiB chunk for a batch's header and then
    # decoded a larger batch from it, reporting a torn batch in a healthy log.
    log = SegmentedLog.open(tmp_path / "big", segment_bytes=8 * 1024 * 1024)
    small = make_batches(0, 1, [100])
    big = make_batches(2, 1, [600 * 1024, 300 * 1024])
    log.append(small + big)  # not flushed: the applier reads written, unflushed data
    assert log.read(0, 10**7) == small + big
    assert log.read(2, 1) == big[:1]  # at least one whole batch, even over budget
    log.flush()
    log.close()
    reopened = SegmentedLog.open(tmp_path / "big", segment_bytes=8 * 1024 * 1024)
    assert reopened.read(0, 10**7) == small + big
    reopened.close()


def test_seal_ahead_leaves_the_roll_nothing_to_fsync_unless_appended_since(
    tmp_path: pathlib.Path,
) -> None:
    """A new term rolls the segment; ``seal_ahead`` makes the old one durable first (in
    a thread, in the node), so the roll on the event loop only creates the new one. An
    append of the old term after the seal ahead makes the roll seal again."""
    with SegmentedLog.open(tmp_path / "a", index_interval_bytes=64) as log:
        term1 = make_batches(0, 1, [100, 100, 100])
        log.append(term1)
        assert log.seal_ahead(1) is None  # the same term: no roll due
        seal = log.seal_ahead(2)
        assert seal is not None
        seal()
        assert log.seal_ahead(2) is None  # sealed already
        fsyncs = log.fsyncs
        term2 = make_batches(6, 2, [100])
        log.append(term2)  # the roll
        assert log.fsyncs == fsyncs, "the roll fsynced a segment sealed ahead"
        # a seal ahead alone claims nothing flushed: the new term's data is not durable
        assert log.flushed_offset < log.dirty_offset

    with SegmentedLog.open(tmp_path / "b", index_interval_bytes=64) as log:
        log.append(make_batches(0, 1, [100, 100]))
        seal = log.seal_ahead(2)
        assert seal is not None
        seal()
        log.append(make_batches(4, 1, [100]))  # the old term again, after the seal
        fsyncs = log.fsyncs
        log.append(make_batches(6, 2, [100]))
        assert log.fsyncs == fsyncs + 1, "the roll did not seal what was appended since"

    with SegmentedLog.open(tmp_path / "a") as log:  # reopened: both terms read back
        assert log.read(0, 1 << 20) == term1 + term2
