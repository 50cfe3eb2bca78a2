"""The node's bound on open segment files (raftlog.storage.open_files) over real logs.

Counted against the process's own descriptors (/proc/self/fd), not only the bound's
bookkeeping: a log that leaked a descriptor, or closed one under a flush, shows there.
"""

from __future__ import annotations

import os
import resource

import pytest

from raftlog.storage.log import SegmentedLog
from raftlog.storage.open_files import (
    MIN_FD_LIMIT,
    FdLimitTooLow,
    OpenFiles,
    check_budget,
    raise_fd_limit,
)
from tests.storage.storage_helpers import make_batches


def _segment_fds(root) -> int:  # type: ignore[no-untyped-def]
    """Descriptors this process holds on ``*.log`` files under ``root``."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith(str(root)) and target.endswith(".log"):
            n += 1
    return n


def _logs(tmp_path, n: int, files: OpenFiles, segment_bytes: int = 10**6):  # type: ignore[no-untyped-def]
    logs = []
    for i in range(n):
        log = SegmentedLog.open(tmp_path / f"g{i}", segment_bytes=segment_bytes)
        log.attach_files(files)
        logs.append(log)
    return logs


def test_sealed_segments_close_their_descriptors(tmp_path):
    """A log that went through many terms holds one descriptor (its active segment),
    not one per term; a sealed segment reopens to be read."""
    files = OpenFiles(limit=1000)
    (log,) = _logs(tmp_path, 1, files)
    batches = []
    for term in range(1, 8):
        b = make_batches(log.dirty_offset + 1, term, [50])
        log.append(b)
        batches += b
    assert log.segment_count == 7
    assert _segment_fds(tmp_path) == 1 == files.open == log.files_open
    assert log.read(0, 10**6) == batches  # every sealed segment reopens to be read
    log.close()
    assert _segment_fds(tmp_path) == 0 == files.open
    # reopened: recovery reads the sealed segments and closes them again
    reopened = SegmentedLog.open(tmp_path / "g0")
    reopened.attach_files(files)
    assert _segment_fds(tmp_path) == 1 == files.open
    assert reopened.read(0, 10**6) == batches
    reopened.close()


def test_the_bound_closes_the_least_recently_used_flushed_logs(tmp_path):
    files = OpenFiles(limit=10)
    logs = _logs(tmp_path, 30, files)
    for log in logs:
        log.append(make_batches(0, 1, [20]))
        log.flush()
    # 30 logs wrote, but at most 10 descriptors are open at once
    assert files.open <= 10
    assert _segment_fds(tmp_path) == files.open
    assert files.closed_total >= 20
    assert files.over_limit == 0
    # the most recently used stay open; the oldest were closed and reopen on a read
    assert logs[-1].files_open == 1 and logs[0].files_open == 0
    assert [b.payload for b in logs[0].read(0, 10**6)] == [
        b.payload for b in make_batches(0, 1, [20])
    ]
    assert logs[0].files_open == 1 and files.open <= 10
    for log in logs:
        log.close()
    assert files.open == 0 == _segment_fds(tmp_path)


def test_unflushed_logs_and_flushes_under_way_are_never_closed(tmp_path):
    """Writes not yet flushed keep their descriptor (the bound is exceeded and counted);
    so does a log whose flush was prepared and not finished (its fsync may be running
    in a thread), until it finishes."""
    files = OpenFiles(limit=4)
    logs = _logs(tmp_path, 8, files)
    for log in logs:
        log.append(make_batches(0, 1, [20]))  # not flushed
    assert files.open == 8 == _segment_fds(tmp_path)
    assert files.over_limit >= 1
    plan = logs[0].prepare_flush()
    logs[0].sync_flush(plan)  # in production in a thread: its descriptor must stay
    assert logs[0].release_files() == 0 and logs[0].files_open == 1
    # another flush finished meanwhile (all flushed) does not end the first one's
    logs[0].flush()
    assert logs[0].flushed_offset == logs[0].dirty_offset
    assert logs[0].release_files() == 0 and logs[0].files_open == 1
    logs[0].finish_flush(plan)
    assert logs[0].release_files() == 1 and logs[0].files_open == 0
    # once flushed, the next open brings the count back under the bound
    for log in logs[1:]:
        log.flush()
    logs[0].read(0, 10**6)
    assert files.open <= 4 == files.limit
    for log in logs:
        log.close()
    assert files.open == 0 == _segment_fds(tmp_path)


def test_a_roll_during_a_flush_closes_the_sealed_segment_after_it(tmp_path):
    files = OpenFiles(limit=100)
    (log,) = _logs(tmp_path, 1, files)
    log.append(make_batches(0, 1, [20]))
    plan = log.prepare_flush()  # its fsync would run in a thread on segment 0
    log.append(make_batches(2, 2, [20]))  # a new term rolls: segment 0 is sealed
    assert log.files_open == 2  # still open: the flush's thread may be using it
    log.sync_flush(plan)
    log.finish_flush(plan)
    assert log.files_open == 1 == _segment_fds(tmp_path)
    log.close()


def test_idle_logs_are_closed_after_idle_s(tmp_path):
    now = [0.0]
    files = OpenFiles(limit=100, idle_s=60.0, clock=lambda: now[0])
    logs = _logs(tmp_path, 5, files)
    for log in logs:
        log.append(make_batches(0, 1, [20]))
        log.flush()
    now[0] = 30.0
    logs[4].read(0, 10**6)  # used at 30 s
    now[0] = 61.0
    assert files.close_idle() == 4
    assert [log.files_open for log in logs] == [0, 0, 0, 0, 1]
    assert _segment_fds(tmp_path) == 1
    now[0] = 91.0
    assert files.close_idle() == 1
    assert files.open == 0 == _segment_fds(tmp_path)
    for log in logs:
        log.close()


def test_fd_limit_is_raised_to_the_hard_limit_and_checked():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(soft, hard, 512), hard))
        assert raise_fd_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
        with pytest.raises(FdLimitTooLow, match=r"ulimit -n"):
            raise_fd_limit(minimum=hard + 1)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    check_budget(1000, 4096)
    with pytest.raises(FdLimitTooLow, match=r"--max-open-segment-files: 5000 .*1\.\.3968"):
        check_budget(5000, 4096)
    assert MIN_FD_LIMIT == 256
