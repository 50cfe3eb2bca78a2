"""A full disk at the storage layer: a write that finds no space (ENOSPC) is undone and
refused with :class:`DiskFull`; the log keeps what it had (reads, flushes, recovery after
a crash), and the same append succeeds once space is freed. The page-cache model
(:class:`ModelFileSystem` with ``capacity_bytes``) writes what fits and then fails, as
Linux does on a full filesystem."""

from __future__ import annotations

import copy
import errno
import pathlib

import pytest
from storage_helpers import make_batches

from raftlog.storage.fs import DiskFull, ModelFileSystem, is_disk_full
from raftlog.storage.log import SegmentedLog
from raftlog.storage.memory import MemoryLog

D = pathlib.Path("/data/g")


def _full_log(segment_bytes: int = 1 << 20) -> tuple[ModelFileSystem, SegmentedLog, list]:
    """A log holding 4 batches (flushed) on a disk with room for about 1 more."""
    fs = ModelFileSystem(mutation="")
    log = SegmentedLog.open(D, fs=fs, segment_bytes=segment_bytes)
    kept = make_batches(0, 1, [1000] * 4)
    log.append(kept)
    log.flush()
    fs.capacity_bytes = fs.used_bytes() + 1500
    return fs, log, kept


def test_a_write_that_finds_the_disk_full_is_undone_and_refused():
    fs, log, kept = _full_log()
    size_before = fs.used_bytes()
    too_much = make_batches(8, 1, [1000, 1000])  # the first fits, the second does not
    with pytest.raises(DiskFull, match=r"no space left for a write to /data/g/0+-0+1\.log"):
        log.append(too_much)
    err = None
    try:
        log.append(too_much)
    except DiskFull as exc:
        err = exc
    assert err is not None and err.errno == errno.ENOSPC and is_disk_full(err)
    # Nothing of the refused write stays: offsets, the file's size, what reads return.
    assert log.dirty_offset == 7
    assert fs.used_bytes() == size_before
    assert log.read(0, 10**6) == kept
    assert log.flush() == 7
    # The log takes the next writes that fit, at the offsets the refused one would have had.
    fits = make_batches(8, 1, [1000])
    assert log.append(fits) == 9
    log.flush()
    assert log.read(0, 10**6) == kept + fits
    # Space freed: the same kind of append succeeds.
    fs.capacity_bytes = None
    more = make_batches(10, 1, [1000, 1000])
    assert log.append(more) == 13
    log.flush()
    assert log.read(0, 10**6) == kept + fits + more
    for seed in range(10):  # and a crash recovers exactly what was flushed
        probe = copy.deepcopy(fs)
        probe.crash(seed)
        with SegmentedLog.open(D, fs=probe) as again:
            assert again.read(0, 10**6) == kept + fits + more


def test_a_full_disk_during_a_roll_leaves_no_empty_segment_and_no_batch_of_the_call():
    # The segment holds the 4 batches and exactly one 900-byte batch more: the call
    # writes that one into the active segment, rolls (sealing it: durable), and the new
    # segment's write finds the disk full; the whole call is undone, the sealed batch too.
    one = make_batches(0, 1, [1000])[0].size_bytes
    small = make_batches(8, 1, [900])[0].size_bytes
    fs, log, kept = _full_log(segment_bytes=4 * one + small)
    segments = log.segment_count
    with pytest.raises(DiskFull):
        log.append(make_batches(8, 1, [900, 1000, 1000]))
    assert log.dirty_offset == 7
    assert log.flushed_offset <= 7
    assert log.segment_count == segments
    assert sorted(n for n in fs.listdir(D) if n.endswith(".log")) == sorted(
        f"{s.base_offset:020d}-{1:020d}.log" for s in log.segment_infos()
    )
    assert log.read(0, 10**6) == kept
    fs.capacity_bytes = None
    after = make_batches(8, 1, [900, 1000, 1000])
    assert log.append(after) == 13
    log.flush()
    log.close()
    with SegmentedLog.open(D, fs=fs) as again:
        assert again.read(0, 10**6) == kept + after


def test_a_refused_write_of_a_new_term_leaves_no_segment_of_that_term():
    """A new term rolls to a new segment before the write; refused, that segment goes:
    the log's last term (what elections compare) stays the one of its last entry."""
    fs, log, kept = _full_log()
    with pytest.raises(DiskFull):
        log.append(make_batches(8, 2, [4000]))
    assert (log.last_term, log.term_at(log.dirty_offset), log.dirty_offset) == (1, 1, 7)
    assert log.segment_count == 1
    fs.capacity_bytes = None
    later = make_batches(8, 3, [100])
    assert log.append(later) == 9
    log.flush()
    log.close()
    with SegmentedLog.open(D, fs=fs) as again:
        assert again.read(0, 10**6) == kept + later
        assert again.last_term == 3


def test_votes_still_save_on_a_disk_whose_data_writes_are_refused():
    """What the node's reserve is for: a vote is a few bytes and fits after a refusal."""
    _fs, log, _kept = _full_log()
    with pytest.raises(DiskFull):
        log.append(make_batches(8, 1, [4000]))
    from raftlog.storage.api import VoteState

    log.save_vote(VoteState(term=7, voted_for=2))
    assert log.load_vote() == VoteState(term=7, voted_for=2)


def test_the_memory_log_refuses_an_append_past_its_capacity_whole():
    log = MemoryLog(capacity_bytes=3000)
    first = make_batches(0, 1, [1000])
    log.append(first)
    with pytest.raises(DiskFull):
        log.append(make_batches(2, 1, [1000, 1000]))
    assert log.dirty_offset == 1
    log.capacity_bytes = None
    assert log.append(make_batches(2, 1, [1000, 1000])) == 5
