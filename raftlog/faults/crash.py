"""Simulated crashes of a partition's on-disk log (the node must be stopped).

A real ``kill -9`` loses nothing the process wrote: the page cache survives
it. To test "a crash drops everything written after the last fsync" (a
power cut) and "a crash mid-write leaves a torn batch", these functions cut
the files of a :class:`~raftlog.storage.log.SegmentedLog` directory the way
such a crash would, for the next open to recover from.

- :func:`cut_to_flushed` drops every batch after the node's flushed offset.
  The caller supplies that offset: :class:`SegmentedLog` keeps it in memory
  only. In a node under test, register per log
  ``failpoints.add_crash_hook(lambda: cut_to_flushed(log.directory,
  log.flushed_offset))`` and enable a site with the ``crash`` action: the
  process cuts its own logs, then SIGKILLs itself. Sealed segments were
  fsynced when the log rolled past them, so a flushed offset before the last
  segment is rejected: no crash can lose it.
- :func:`tear_tail` cuts the last ``nbytes`` off the last segment, normally
  leaving half a batch.

Both only ever shorten the last segment file, and keep its index file to
entries inside its data (an index covers flushed data only). They work on
real files and trust the caller's flushed offset. ``tear_tail`` can cut into
data the commit context records as flushed, which no crash can do: the next
open reports that as corruption, and the node sets the log aside and fetches
the group again.

To test durability without trusting the log's idea of what it flushed, run
the log on :class:`raftlog.storage.fs.ModelFileSystem` and cut the power with
its ``crash(seed)`` (``tests/crash``, and :mod:`raftlog.sim.power` for a whole
cluster).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib

from raftlog.storage.batch import BatchError, RecordBatch
from raftlog.storage.offset_index import ENTRY, read_index_file
from raftlog.storage.segment import INDEX_SUFFIX, LOG_SUFFIX, parse_segment_name


@dataclasses.dataclass(frozen=True, slots=True)
class CutResult:
    """What a simulated crash removed. ``last_offset``: the last whole batch left (-1: none)."""

    last_offset: int
    bytes_dropped: int


def _segments(log_dir: pathlib.Path) -> list[tuple[int, int, pathlib.Path]]:
    """(base offset, term, path) of each segment file, in offset order."""
    if not log_dir.is_dir():
        raise ValueError(f"log_dir must be an existing log directory, got {str(log_dir)!r}")
    found = []
    for entry in log_dir.iterdir():
        parsed = parse_segment_name(entry.name)
        if parsed is not None:
            found.append((parsed[0], parsed[1], entry))
    return sorted(found)


def _index_path(segment: pathlib.Path) -> pathlib.Path:
    return segment.with_name(segment.name[: -len(LOG_SUFFIX)] + INDEX_SUFFIX)


def _batch_ends(path: pathlib.Path) -> list[tuple[int, int]]:
    """(end position, last offset) of each whole, valid batch from the start of ``path``."""
    data = path.read_bytes()
    out = []
    pos = 0
    while pos < len(data):
        try:
            batch, pos = RecordBatch.decode(data, pos)
        except BatchError:
            break  # a torn or corrupt tail: nothing after it is readable anyway
        out.append((pos, batch.last_offset))
    return out


def _truncate(path: pathlib.Path, size: int) -> None:
    os.truncate(path, size)
    index = _index_path(path)
    entries = read_index_file(index)
    if entries is not None:
        kept = [(o, p) for o, p in entries if p < size]
        index.write_bytes(b"".join(ENTRY.pack(o, p) for o, p in kept))


def cut_to_flushed(log_dir: str | pathlib.Path, flushed_offset: int) -> CutResult:
    """Drop every batch whose last offset is after ``flushed_offset`` (-1: nothing flushed).

    Only the last segment is ever cut (maybe to 0 bytes, as a crash right after a
    roll leaves it; open removes such a file). A flush covers whole batches, so
    a batch straddling ``flushed_offset`` goes too. Raises ValueError naming
    ``flushed_offset`` when it is below the last segment's base offset - 1:
    earlier segments are sealed, fsynced when the log rolled past them.
    """
    if isinstance(flushed_offset, bool) or not isinstance(flushed_offset, int):
        raise ValueError(f"flushed_offset must be an int >= -1, got {flushed_offset!r}")
    segments = _segments(pathlib.Path(log_dir))
    if not segments:
        return CutResult(flushed_offset, 0)
    base, _, path = segments[-1]
    if flushed_offset < base - 1:
        raise ValueError(
            f"flushed_offset must be >= {base - 1} (the last segment {path.name} starts at "
            f"offset {base}; earlier segments are sealed and fsynced, no crash loses them), "
            f"got {flushed_offset}"
        )
    size = path.stat().st_size
    kept = [(end, last) for end, last in _batch_ends(path) if last <= flushed_offset]
    cut_at, last = kept[-1] if kept else (0, base - 1)
    _truncate(path, cut_at)
    return CutResult(last, size - cut_at)


def has_segment(log_dir: str | pathlib.Path) -> bool:
    """Whether ``log_dir`` exists and holds a segment file. A replica makes its directory
    before its first segment, so the directory alone is not yet a log to cut."""
    path = pathlib.Path(log_dir)
    return path.is_dir() and bool(_segments(path))


def tear_tail(log_dir: str | pathlib.Path, nbytes: int) -> CutResult:
    """Cut the last ``nbytes`` (1 .. size) off the last segment file: a torn write.

    ``last_offset`` is the last whole batch left, as the next open should find it.
    """
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 1:
        raise ValueError(f"nbytes must be an int >= 1, got {nbytes!r}")
    segments = _segments(pathlib.Path(log_dir))
    if not segments:
        raise ValueError(f"log_dir {str(log_dir)!r} holds no segment to tear")
    base, _, path = segments[-1]
    size = path.stat().st_size
    if nbytes > size:
        raise ValueError(f"nbytes must be at most the last segment's size {size}, got {nbytes}")
    _truncate(path, size - nbytes)
    ends = _batch_ends(path)
    return CutResult(ends[-1][1] if ends else base - 1, nbytes)
