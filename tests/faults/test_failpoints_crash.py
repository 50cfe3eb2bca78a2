"""Simulated crashes on a real SegmentedLog: cut to the flushed offset, torn tails."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from raftlog.faults.crash import CutResult, cut_to_flushed, tear_tail
from raftlog.storage.batch import RecordBatch
from raftlog.storage.log import SegmentedLog


def batches(base: int, term: int, n: int, records: int = 2) -> list[RecordBatch]:
    out = []
    for i in range(n):
        payload = f"batch-{base + i * records}".encode() * 10
        out.append(
            RecordBatch.create(payload, records, timestamp_ms=1).stamped(base + i * records, term)
        )
    return out


def offsets(log: SegmentedLog) -> list[int]:
    return [b.base_offset for b in log.read(log.start_offset, 1 << 30)]


def test_cut_to_flushed_drops_unflushed_batches(tmp_path):
    with SegmentedLog.open(tmp_path) as log:
        log.append(batches(0, 1, 3))  # offsets 0..5
        assert log.flush() == 5
        log.append(batches(6, 1, 2))  # 6..9, written but never fsynced
    result = cut_to_flushed(tmp_path, 5)
    assert result.last_offset == 5 and result.bytes_dropped > 0
    with SegmentedLog.open(tmp_path) as log:
        assert log.dirty_offset == 5
        assert offsets(log) == [0, 2, 4]
        assert log.recovery_report.truncated_bytes == 0  # a clean cut, no torn batch


def test_cut_inside_a_batch_drops_that_batch(tmp_path):
    with SegmentedLog.open(tmp_path) as log:
        log.append(batches(0, 1, 3))
    assert cut_to_flushed(tmp_path, 2) == CutResult(last_offset=1, bytes_dropped=2 * 52 + 140)
    with SegmentedLog.open(tmp_path) as log:
        assert log.dirty_offset == 1


def test_cut_to_nothing_flushed_after_a_roll(tmp_path):
    with SegmentedLog.open(tmp_path) as log:
        log.append(batches(0, 1, 2))  # term 1: offsets 0..3
        log.flush()
        log.append(batches(4, 2, 2))  # the new term rolls to a new segment: 4..7
    with pytest.raises(ValueError, match="flushed_offset must be >= 3"):
        cut_to_flushed(tmp_path, 1)  # inside the sealed segment: impossible
    assert cut_to_flushed(tmp_path, 3).last_offset == 3
    with SegmentedLog.open(tmp_path) as log:
        assert log.dirty_offset == 3 and log.segment_count == 1 and log.last_term == 1


def test_cut_with_nothing_unflushed_changes_nothing(tmp_path):
    with SegmentedLog.open(tmp_path) as log:
        log.append(batches(0, 1, 3))
        log.flush()
    assert cut_to_flushed(tmp_path, 5) == CutResult(last_offset=5, bytes_dropped=0)
    with SegmentedLog.open(tmp_path) as log:
        assert offsets(log) == [0, 2, 4]


def test_index_entries_past_the_cut_are_dropped(tmp_path):
    # a tiny index interval puts an index entry at (almost) every batch
    with SegmentedLog.open(tmp_path, index_interval_bytes=1) as log:
        log.append(batches(0, 1, 10))
        log.flush()
    cut_to_flushed(tmp_path, 7)
    with SegmentedLog.open(tmp_path, index_interval_bytes=1) as log:
        assert log.dirty_offset == 7
        assert offsets(log) == [0, 2, 4, 6]
        assert [b.base_offset for b in log.read(6, 1)] == [6]  # the index still finds it
        log.append(batches(8, 1, 1))  # and the log goes on from the cut
        assert log.dirty_offset == 9


def test_tear_tail_cuts_mid_batch_and_open_truncates_to_last_whole_batch(tmp_path):
    with SegmentedLog.open(tmp_path) as log:
        log.append(batches(0, 1, 4))  # 0..7
        log.flush()
        last_batch_size = log.read(6, 1)[0].size_bytes
    result = tear_tail(tmp_path, 5)
    assert result == CutResult(last_offset=5, bytes_dropped=5)
    with SegmentedLog.open(tmp_path) as log:
        assert log.dirty_offset == 5
        assert offsets(log) == [0, 2, 4]
        report = log.recovery_report
        assert report.truncated_bytes == last_batch_size - 5
        assert report.warnings and "torn or corrupt tail" in report.warnings[0]


def test_tear_whole_file_leaves_an_empty_log(tmp_path):
    with SegmentedLog.open(tmp_path) as log:
        log.append(batches(0, 1, 1))
        size = log.read(0, 1)[0].size_bytes
    assert tear_tail(tmp_path, size).last_offset == -1
    with SegmentedLog.open(tmp_path) as log:
        assert log.dirty_offset == -1 and log.segment_count == 0


@pytest.mark.parametrize(
    ("call", "needle"),
    [
        (lambda d: tear_tail(d, 0), "nbytes must be an int >= 1"),
        (lambda d: tear_tail(d, 10**9), "nbytes must be at most the last segment's size"),
        (lambda d: cut_to_flushed(d, "5"), "flushed_offset must be an int >= -1"),
        (lambda d: cut_to_flushed(d / "missing", 0), "log_dir must be an existing log directory"),
    ],
)
def test_bad_arguments_are_named(tmp_path, call, needle):
    with SegmentedLog.open(tmp_path) as log:
        log.append(batches(0, 1, 1))
    with pytest.raises(ValueError) as exc:
        call(tmp_path)
    assert needle in str(exc.value)


def test_tear_empty_directory_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="holds no segment to tear"):
        tear_tail(tmp_path, 1)


POWER_CUT_CHILD = """
import pathlib, sys
from raftlog.faults import failpoints
from raftlog.faults.crash import cut_to_flushed
from raftlog.storage.batch import RecordBatch
from raftlog.storage.log import SegmentedLog

log = SegmentedLog.open(pathlib.Path(sys.argv[1]))
failpoints.add_crash_hook(lambda: cut_to_flushed(log.directory, log.flushed_offset))
for i in range(6):
    log.append([RecordBatch.create(b"x" * 100, 1, timestamp_ms=1).stamped(i, 1)])
    if i == 2:
        log.flush()
log.flush()  # the second flush hits log.before_flush: offsets 3..5 are never fsynced
print("survived", flush=True)
"""


def test_crash_failpoint_with_hook_drops_unflushed_data(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAFTLOG_FAILPOINTS"}
    env["RAFTLOG_FAILPOINTS"] = "log.before_flush=crash@2"
    child = subprocess.run(
        [sys.executable, "-c", POWER_CUT_CHILD, str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert child.stdout == ""
    with SegmentedLog.open(tmp_path) as log:
        assert log.dirty_offset == 2  # what was fsynced, and nothing more
        assert offsets(log) == [0, 1, 2]
