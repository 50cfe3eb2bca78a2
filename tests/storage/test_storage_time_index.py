"""The per-segment sparse time index: ``SegmentedLog.offset_for_timestamp`` finds the first
batch at or after a timestamp across segments, through a reopen, a truncation and a lost
index file, and decodes only about one index interval of batches to do it."""

from __future__ import annotations

import pathlib

import pytest

from raftlog.storage.batch import BatchKind, RecordBatch
from raftlog.storage.log import SegmentedLog
from raftlog.storage.segment import Segment
from raftlog.storage.time_index import TimeIndex, read_time_index_file


def _batches(base: int, term: int, stamps: list[int]) -> list[RecordBatch]:
    """One 100-byte, 2-record batch per timestamp, contiguous from ``base``."""
    return [
        RecordBatch.create(bytes(100), 2, timestamp_ms=ts).stamped(base + 2 * i, term)
        for i, ts in enumerate(stamps)
    ]


def _brute(batches: list[RecordBatch], ts: int, end: int) -> tuple[int, int] | None:
    for b in batches:
        if b.base_offset > end:
            return None
        if b.timestamp_ms >= ts:
            return b.base_offset, b.timestamp_ms
    return None


def _open(path: pathlib.Path) -> SegmentedLog:
    return SegmentedLog.open(path, segment_bytes=4_000, index_interval_bytes=500)


# increasing with a step back (a leader's clock), repeats and a gap
STAMPS = [1_000 + 10 * i for i in range(60)] + [1_300] * 5 + [2_000 + i for i in range(40)]


@pytest.mark.parametrize("reopen", [False, True])
def test_offset_for_timestamp_matches_a_full_scan(tmp_path: pathlib.Path, reopen: bool) -> None:
    batches = _batches(0, 1, STAMPS)
    log = _open(tmp_path)
    log.append(batches)
    log.flush()
    assert log.segment_count > 3  # the lookup crosses segments
    if reopen:
        log.close()
        log = _open(tmp_path)
    end = batches[-1].last_offset
    for ts in [0, 999, 1_000, 1_005, 1_290, 1_300, 1_301, 1_590, 1_600, 2_000, 2_039, 2_040]:
        assert log.offset_for_timestamp(ts, end) == _brute(batches, ts, end), ts
    # ``end`` bounds the answer (the source passes the last stable offset)
    assert log.offset_for_timestamp(2_030, 20) is None
    log.close()


def test_index_file_is_sparse_and_written_on_flush(tmp_path: pathlib.Path) -> None:
    log = _open(tmp_path)
    log.append(_batches(0, 1, [1_000 + i for i in range(30)]))
    log.flush()
    files = sorted(tmp_path.glob("*.timeindex"))
    assert len(files) == log.segment_count
    for f in files:
        entries = read_time_index_file(f)
        assert entries is not None
        stamps = [t for t, _ in entries]
        assert stamps == sorted(set(stamps))
        # 152-byte batches, an entry at most every 500 bytes: far fewer entries than batches
        assert len(entries) <= 1 + 4_000 // 500
    log.close()


def test_lookup_decodes_about_one_interval(tmp_path: pathlib.Path, monkeypatch) -> None:
    log = SegmentedLog.open(tmp_path, segment_bytes=1_000_000, index_interval_bytes=1_000)
    batches = _batches(0, 1, [1_000 + i for i in range(500)])
    log.append(batches)
    log.flush()
    decoded = 0
    real = Segment.scan

    def counting(self, *a, **k):
        nonlocal decoded
        for item in real(self, *a, **k):
            decoded += 1
            yield item

    monkeypatch.setattr(Segment, "scan", counting)
    assert log.offset_for_timestamp(1_400, 10_000) == (800, 1_400)
    assert decoded <= 2 * 1_000 // 152 + 2  # about one interval, not 400 batches
    log.close()


def test_truncation_and_a_lost_file(tmp_path: pathlib.Path) -> None:
    batches = _batches(0, 1, [1_000 + i for i in range(20)])
    log = SegmentedLog.open(tmp_path, segment_bytes=1_000_000, index_interval_bytes=300)
    log.append(batches)
    log.flush()
    log.truncate(20)  # keeps batches 0..9 (timestamps 1000..1009)
    assert log.offset_for_timestamp(1_010, 10_000) is None
    log.append(_batches(20, 2, [5_000, 5_001]))
    log.flush()
    assert log.offset_for_timestamp(1_010, 10_000) == (20, 5_000)
    log.close()
    for f in tmp_path.glob("*.timeindex"):
        f.unlink()  # a hint: rebuilt by a scan
    log = SegmentedLog.open(tmp_path, segment_bytes=1_000_000, index_interval_bytes=300)
    assert log.offset_for_timestamp(1_005, 10_000) == (10, 1_005)
    assert log.offset_for_timestamp(5_001, 10_000) == (22, 5_001)
    log.close()


def test_time_index_entries_keep_the_running_maximum(tmp_path: pathlib.Path) -> None:
    index = TimeIndex(tmp_path / "x.timeindex", interval_bytes=1)
    for i, ts in enumerate([10, 30, 20, 25, 40]):
        index.add(ts, i, i * 10)
    assert index.entries == [(10, 0), (30, 1), (40, 4)]
    assert index.lookup(25) == 0  # offset 1 holds 30: the scan starts after offset 0
    assert index.lookup(10) is None
    index.truncate(1)
    assert index.entries == [(10, 0)]


def test_a_control_batch_stamped_after_the_data_behind_it_is_not_found(
    tmp_path: pathlib.Path,
) -> None:
    """The layout of a fresh partition's first write, as a stress run left it on disk: the
    leader's no-op (stamp 0), rm_stm's sync barrier (stamped in sync, after the data
    batch was stamped on receipt), the data batch, later data. A lookup for one past the
    data's stamp must find the later data, not the barrier before the older data."""
    t = 1_795_840_359_514
    log = _open(tmp_path)
    log.append(
        [
            RecordBatch.create(b"", kind=BatchKind.NOOP, timestamp_ms=0).stamped(0, 1),
            RecordBatch.create(b"", kind=BatchKind.NOOP, timestamp_ms=t + 1).stamped(1, 1),
            RecordBatch.create(bytes(50), 5, timestamp_ms=t).stamped(2, 1),
            RecordBatch.create(bytes(30), 3, timestamp_ms=t + 2_843).stamped(7, 1),
        ]
    )
    log.flush()
    assert log.offset_for_timestamp(t + 1, 9) == (7, t + 2_843)
    assert log.offset_for_timestamp(t, 9) == (2, t)
    assert log.offset_for_timestamp(t + 1, 6) is None  # below the LSO: nothing yet
    log.close()
