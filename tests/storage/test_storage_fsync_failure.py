"""A failed fsync is never retried; damage below the committed offset is corruption."""

from __future__ import annotations

import copy
import errno
import os
import pathlib

import pytest
from storage_helpers import flip_byte, make_batches, segment_files

from raftlog.storage import fs as storage_fs
from raftlog.storage.api import CommitContext, StorageCorruption
from raftlog.storage.fs import FsyncFailed, ModelFileSystem, StorageFailed
from raftlog.storage.log import SegmentedLog

D = pathlib.Path("/data/g")


def test_a_failed_fsync_stops_the_log_and_is_never_retried():
    fs = ModelFileSystem(mutation="")
    log = SegmentedLog.open(D, fs=fs)
    first = make_batches(0, 1, [100, 100])
    log.append(first)
    assert log.flush() == 3
    log.append(make_batches(4, 1, [100]))
    fs.fail_fsync_at = fs.fsync_calls + 1
    with pytest.raises(FsyncFailed, match=r"fsync of /data/g/0+-0+1\.log failed .*never retried"):
        log.flush()
    assert log.flushed_offset == 3
    fsyncs = fs.fsync_calls
    for call in (log.flush, lambda: log.append(make_batches(6, 1, [10])), lambda: log.read(0, 99)):
        with pytest.raises(StorageFailed, match=r"stopped after a failed fsync.*restart"):
            call()
    assert fs.fsync_calls == fsyncs  # not retried
    # A restart recovers from what is on disk: the flushed entries, not the lost write.
    for seed in range(10):
        probe = copy.deepcopy(fs)
        probe.crash(seed)
        with SegmentedLog.open(D, fs=probe) as again:
            assert again.read(0, 10**6) == first


def test_real_fsync_failure_raises_and_calls_the_fatal_handler(tmp_path, monkeypatch):
    log = SegmentedLog.open(tmp_path)
    log.append(make_batches(0, 1, [10]))

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    calls: list[str] = []
    monkeypatch.setattr(os, "fsync", eio)
    storage_fs.set_fatal_handler(calls.append)
    try:
        with pytest.raises(FsyncFailed, match="Input/output error"):
            log.flush()
    finally:
        storage_fs.set_fatal_handler(None)
    assert len(calls) == 1 and str(tmp_path) in calls[0]
    with pytest.raises(StorageFailed):
        log.flush()
    log.close()


def _log_with_context(path: pathlib.Path, committed: int) -> list:
    batches = make_batches(0, 1, [100] * 4)  # offsets 0..7 in one segment
    with SegmentedLog.open(path) as log:
        log.append(batches)
        log.flush()
        log.save_commit_context(CommitContext(committed, 1))
    return batches


def test_damage_at_or_below_the_committed_offset_is_corruption_not_a_torn_tail(tmp_path):
    _log_with_context(tmp_path, committed=5)
    (seg,) = segment_files(tmp_path)
    size = seg.stat().st_size
    flip_byte(seg, 2 * 152 + 60)  # inside the batch holding offsets 4..5
    with pytest.raises(StorageCorruption) as err:
        SegmentedLog.open(tmp_path)
    msg = str(err.value)
    assert str(seg) in msg and "position 304 (offset 4)" in msg
    assert "at or below offset 5, which the commit context records as flushed" in msg
    assert seg.stat().st_size == size  # nothing was cut


def test_a_torn_tail_above_the_committed_offset_is_still_truncated(tmp_path):
    batches = _log_with_context(tmp_path, committed=3)
    (seg,) = segment_files(tmp_path)
    flip_byte(seg, 2 * 152 + 60)
    with SegmentedLog.open(tmp_path) as log:
        assert log.read(0, 10**6) == batches[:2]
        assert (
            "truncating torn or corrupt tail at position 304 (offset 4)"
            in (log.recovery_report.warnings[0])
        )
