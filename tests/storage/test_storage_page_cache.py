"""The page cache a log leaves behind: flushed data beyond the last CACHE_KEEP_BYTES of
the active segment, and all of a sealed segment, is dropped (posix_fadvise DONTNEED);
data not yet flushed never is; everything still reads back byte for byte."""

from __future__ import annotations

import pathlib

import pytest
from storage_helpers import make_batches

from raftlog.node.allocator import keep_large_buffers_in_heap
from raftlog.storage import segment as segment_mod
from raftlog.storage.fs import RealFileSystem, _RealFile
from raftlog.storage.log import SegmentedLog

KEEP = 1_000
"""CACHE_KEEP_BYTES in these tests: a few batches of 100-byte payloads."""


class _RecordingFile(_RealFile):
    def __init__(self, path: pathlib.Path, fd: int, drops: list) -> None:
        super().__init__(path, fd)
        self._drops = drops

    def drop_cache(self, position: int, length: int) -> None:
        self._drops.append((self.path.name, position, position + length))
        super().drop_cache(position, length)


class RecordingFS(RealFileSystem):
    """The real filesystem (the drops are real too), recording every drop_cache range."""

    def __init__(self) -> None:
        self.drops: list[tuple[str, int, int]] = []

    def open(self, path, *, create=False, exclusive=False):
        real = super().open(path, create=create, exclusive=exclusive)
        return _RecordingFile(real.path, real._fd, self.drops)


@pytest.fixture
def fs(monkeypatch) -> RecordingFS:
    monkeypatch.setattr(segment_mod, "CACHE_KEEP_BYTES", KEEP)
    return RecordingFS()


def open_log(path: pathlib.Path, fs: RecordingFS, segment_bytes: int = 10**6) -> SegmentedLog:
    return SegmentedLog.open(path, segment_bytes=segment_bytes, index_interval_bytes=128, fs=fs)


def covered(drops: list[tuple[str, int, int]], name: str) -> list[tuple[int, int]]:
    """The dropped ranges of file ``name``, merged where they touch."""
    merged: list[tuple[int, int]] = []
    for _, start, end in sorted(d for d in drops if d[0] == name):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def test_a_flush_drops_what_lies_beyond_the_window_and_the_rest_reads_back(tmp_path, fs):
    batches = make_batches(0, 1, [100] * 40)
    with open_log(tmp_path, fs) as log:
        log.append(batches[:20])
        log.flush()
        (seg,) = log._segments
        first = seg.size
        assert covered(fs.drops, seg.path.name) == [(0, first - KEEP)]
        log.append(batches[20:])
        log.flush()
        # contiguous: each flush drops from where the last one stopped, never twice
        assert covered(fs.drops, seg.path.name) == [(0, seg.size - KEEP)]
        starts = [start for _, start, _ in fs.drops]
        assert starts == sorted(set(starts))
        assert log.read(0, 10**7) == batches
    with open_log(tmp_path, fs) as log:
        assert log.read(0, 10**7) == batches


def test_nothing_written_after_the_flush_began_is_dropped(tmp_path, fs):
    batches = make_batches(0, 1, [100] * 40)
    with open_log(tmp_path, fs) as log:
        log.append(batches[:20])
        plan = log.prepare_flush()
        planned = log._segments[-1].size
        log.append(batches[20:])  # while the fsync of the plan would run
        log.sync_flush(plan)
        log.finish_flush(plan)
        (seg,) = log._segments
        assert covered(fs.drops, seg.path.name) == [(0, planned - KEEP)]
        assert seg.size > planned
        assert log.read(0, 10**7) == batches


def test_a_sealed_segment_is_dropped_whole(tmp_path, fs):
    batches = make_batches(0, 1, [100] * 30)
    with open_log(tmp_path, fs, segment_bytes=1_500) as log:
        log.append(batches)
        sealed, active = log._segments[:-1], log._segments[-1]
        assert len(sealed) >= 2
        for seg in sealed:
            assert covered(fs.drops, seg.path.name) == [(0, seg.size)]
        assert covered(fs.drops, active.path.name) == []  # not flushed yet
        assert log.read(0, 10**7) == batches


def test_after_a_truncation_the_rewritten_bytes_are_dropped_again(tmp_path, fs):
    batches = make_batches(0, 1, [100] * 40)
    with open_log(tmp_path, fs) as log:
        log.append(batches)
        log.flush()
        (seg,) = log._segments
        dropped_to = fs.drops[-1][2]
        log.truncate(20)  # offsets 20.. go: the file is cut below what was dropped
        cut = seg.size
        assert cut < dropped_to
        replacement = make_batches(20, 1, [90] * 30)  # same term: same segment
        log.append(replacement)
        log.flush()
        # the bytes written over the cut were cached anew: dropped from the cut on
        assert fs.drops[-1] == (seg.path.name, cut, seg.size - KEEP)
        assert log.read(0, 10**7) == batches[:10] + replacement


def test_the_node_keeps_large_buffers_in_its_heap():
    """glibc takes the node's thresholds (this machine's C library is glibc)."""
    assert keep_large_buffers_in_heap() is True
