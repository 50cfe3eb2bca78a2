"""The page cache a log leaves behind: flushed data beyond the last CACHE_KEEP_BYTES of
the active segment, and all of a sealed segment, is dropped (posix_fadvise DONTNEED),
except what recovery reads on every open (a segment's first batch, and a sealed
segment's bytes from its last index entry on); data not yet flushed never is;
everything still reads back byte for byte."""

from __future__ import annotations

import pathlib

import pytest
from storage_helpers import make_batches

from raftlog.allocator import keep_large_buffers_in_heap
from raftlog.storage import segment as segment_mod
from raftlog.storage.batch import HEADER_SIZE
from raftlog.storage.fs import RealFileSystem, _RealFile
from raftlog.storage.log import SegmentedLog

READ_CHUNK = 256 * 1024
"""The segment's read chunk (a batch larger than it is read whole, in a read of its own)."""

KEEP = 1_000
"""CACHE_KEEP_BYTES in these tests: a few batches of 100-byte payloads."""


class _RecordingFile(_RealFile):
    def __init__(self, path: pathlib.Path, fd: int, fs: RecordingFS) -> None:
        super().__init__(path, fd)
        self._fs = fs

    def drop_cache(self, position: int, length: int) -> None:
        self._fs.drops.append((self.path.name, position, position + length))
        super().drop_cache(position, length)

    def pread(self, n: int, position: int) -> bytes:
        data = super().pread(n, position)
        self._fs.reads.append((self.path.name, position, position + len(data)))
        return data


class RecordingFS(RealFileSystem):
    """The real filesystem (the drops are real too), recording every drop_cache range
    and every range read."""

    def __init__(self) -> None:
        self.drops: list[tuple[str, int, int]] = []
        self.reads: list[tuple[str, int, int]] = []

    def open(self, path, *, create=False, exclusive=False):
        real = super().open(path, create=create, exclusive=exclusive)
        return _RecordingFile(real.path, real._fd, self)


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
        head = batches[0].size_bytes  # the first batch stays: every open reads it
        assert covered(fs.drops, seg.path.name) == [(head, first - KEEP)]
        log.append(batches[20:])
        log.flush()
        # contiguous: each flush drops from where the last one stopped, never twice
        assert covered(fs.drops, seg.path.name) == [(head, seg.size - KEEP)]
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
        assert covered(fs.drops, seg.path.name) == [(batches[0].size_bytes, planned - KEEP)]
        assert seg.size > planned
        assert log.read(0, 10**7) == batches


def test_a_sealed_segment_is_dropped_but_its_first_batch_and_its_tail(tmp_path, fs):
    batches = make_batches(0, 1, [100] * 30)
    size = batches[0].size_bytes
    with open_log(tmp_path, fs, segment_bytes=1_500) as log:
        log.append(batches)
        sealed, active = log._segments[:-1], log._segments[-1]
        assert len(sealed) >= 2
        for seg in sealed:
            tail = seg.index.lookup(seg.last_offset)[1]
            assert size < tail < seg.size
            assert covered(fs.drops, seg.path.name) == [(size, tail)]
        assert covered(fs.drops, active.path.name) == []  # not flushed yet
        assert log.read(0, 10**7) == batches


@pytest.mark.parametrize("payloads", [[100] * 60, [5_000] * 12], ids=["small", "large"])
def test_reopening_a_log_reads_no_byte_that_was_dropped(tmp_path, fs, payloads, monkeypatch):
    """Restart time: recovery reads a sealed segment's first batch and its bytes from
    the last index entry on, and they are still cached; with the whole segment
    dropped, every sealed segment cost two reads from the disk on every open.

    The window holds a few batches, as the real one (16 MiB) does: a flush before
    the seal must not have dropped the tail already."""
    monkeypatch.setattr(segment_mod, "CACHE_KEEP_BYTES", max(KEEP, 3 * max(payloads)))
    batches = make_batches(0, 1, payloads)
    with open_log(tmp_path, fs, segment_bytes=sum(payloads) // 5) as log:
        for i in range(0, len(batches), 3):
            log.append(batches[i : i + 3])
            log.flush()
        sealed = [seg.path.name for seg in log._segments[:-1]]
    assert len(sealed) >= 3
    fs.reads.clear()
    with open_log(tmp_path, fs) as log:
        assert log.dirty_offset == batches[-1].last_offset
    for name in sealed:
        reads = [(start, end) for n, start, end in fs.reads if n == name]
        assert reads, f"recovery read nothing of {name}"
        for start, end in reads:
            for dropped_start, dropped_end in covered(fs.drops, name):
                assert end <= dropped_start or start >= dropped_end, (
                    f"{name}: recovery read bytes {start}..{end}, dropped "
                    f"{dropped_start}..{dropped_end}"
                )
    with open_log(tmp_path, fs) as log:
        assert log.read(0, 10**8) == batches


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


@pytest.mark.parametrize("verify", [True, False])
def test_a_read_reads_each_large_batch_once_and_none_it_cannot_return(tmp_path, fs, verify):
    """A fetch of 4 MiB batches, shrunk: each batch larger than the read chunk is read
    whole once (with the next header, not its first chunk again), and a batch past
    ``max_bytes`` or past ``end`` is never read beyond its header. Reading those was a
    quarter of what a leader read per 16 MiB fetch."""
    payload = READ_CHUNK + 40_000
    batches = make_batches(0, 1, [payload] * 6)
    size = batches[0].size_bytes
    with open_log(tmp_path, fs, segment_bytes=10**8) as log:
        log.append(batches)
        log.flush()
        for max_bytes, end, want in [(2 * size + 1, None, 2), (10**9, batches[2].base_offset, 3)]:
            fs.reads.clear()
            got = log.read(0, max_bytes, end, verify=verify)
            assert got == batches[:want]
            last_end = want * size + HEADER_SIZE  # the next batch's header
            assert max(stop for _, _, stop in fs.reads) <= last_end, fs.reads
            read = sum(stop - start for _, start, stop in fs.reads)
            assert read <= READ_CHUNK + want * (size + HEADER_SIZE), fs.reads
