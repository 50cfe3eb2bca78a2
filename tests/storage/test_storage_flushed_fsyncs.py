"""SegmentedLog: a roll makes the sealed segment durable and says so; fsyncs are counted,
and the node's /metrics exports the count as raftlog_fsyncs_total."""

from __future__ import annotations

import pathlib

from storage_helpers import make_batches

from raftlog.faults.crash import cut_to_flushed
from raftlog.metrics import NodeMetrics
from raftlog.storage.api import CommitContext, VoteState
from raftlog.storage.log import SegmentedLog


def open_log(path: pathlib.Path) -> SegmentedLog:
    return SegmentedLog.open(path, segment_bytes=400, index_interval_bytes=128)


def test_roll_advances_flushed_offset_to_the_sealed_segment_end(tmp_path):
    with open_log(tmp_path) as log:
        log.append(make_batches(0, 1, [100] * 2))  # offsets 0..3, one segment, unflushed
        assert (log.dirty_offset, log.flushed_offset) == (3, -1)
        log.append(make_batches(4, 1, [100] * 3))  # 4..5 fill the first, 6..9 roll
        assert log.segment_count == 3
        # The first two segments are sealed (fsynced): offsets 0..7 are durable.
        assert (log.dirty_offset, log.flushed_offset) == (9, 7)
        log.append(make_batches(10, 2, [10]))  # a new term rolls: 8..9 sealed too
        assert (log.dirty_offset, log.flushed_offset) == (11, 9)
        assert log.flush() == 11
        # A truncation below the flushed offset clamps it.
        log.truncate(8)
        assert (log.dirty_offset, log.flushed_offset) == (7, 7)


def test_a_crash_cut_to_flushed_offset_after_a_roll_keeps_the_sealed_segments(tmp_path):
    batches = make_batches(0, 1, [100] * 5)
    with open_log(tmp_path) as log:
        log.append(batches)  # 0..7 sealed in two segments, 8..9 in the active one
        flushed = log.flushed_offset
    # What the node's crash hook does: no private state needed, no ValueError.
    cut_to_flushed(tmp_path, flushed)
    with open_log(tmp_path) as log:
        assert log.dirty_offset == flushed == 7
        assert log.read(0, 10**6) == batches[:4]


def test_fsyncs_count_every_durability_barrier(tmp_path):
    with open_log(tmp_path) as log:
        assert log.fsyncs == 0
        log.append(make_batches(0, 1, [100]))
        log.flush()
        assert log.fsyncs == 1
        log.flush()  # nothing to do: no fsync
        assert log.fsyncs == 1
        log.append(make_batches(2, 1, [100] * 2))  # seals the first segment
        assert log.fsyncs == 2
        log.flush()
        log.save_vote(VoteState(term=1, voted_for=1))
        log.save_commit_context(CommitContext(committed_offset=1, term=1))
        assert log.fsyncs == 5


class _View:
    def __init__(self, log: SegmentedLog) -> None:
        self.group_id, self.topic, self.partition = 7, "t", 0
        self._log = log

    def gauges(self) -> dict[str, float]:
        return {"fsyncs": self._log.fsyncs, "dirty_offset": self._log.dirty_offset}


def _samples(text: str, name: str) -> list[float]:
    return [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    ]


def test_metrics_export_the_fsync_counter_after_writes(tmp_path):
    with open_log(tmp_path) as log:
        metrics = NodeMetrics(1, lambda: [_View(log)])
        assert _samples(metrics.render().decode(), "raftlog_fsyncs_total") == [0.0]
        for i in range(3):
            log.append(make_batches(2 * i, 1, [10]))
            log.flush()
        text = metrics.render().decode()
        assert "# TYPE raftlog_fsyncs_total counter" in text
        assert 'raftlog_fsyncs_total{group="7",node="1",partition="0",topic="t"} 3.0' in text
