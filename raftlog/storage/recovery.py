"""Open-time checks of segments, in time proportional to the number of segments.

Only two kinds of segment exist on open:

- *sealed* segments (every one but the last) were fsynced, index included,
  when the log rolled past them, so damage in them is corruption: it raises
  :class:`StorageCorruption` naming the file and position. Open checks their
  structure from batch headers alone: the first batch's, then, from the last
  index entry on, each header to the file's end, which must be where the next
  segment's offsets begin. No payload is read, so no CRC is checked at open: a
  payload's damaged bytes are found where they are read, as Kafka and Redpanda
  find them (neither checks a sealed segment's data at open). A crash cannot
  tear a sealed segment; what the structure check finds is a file cut short,
  a batch missing or moved, a header overwritten.
- the *last* segment may end in a torn or corrupt tail (a crash mid-write, or
  data written after the last flush). Its index (a hint covering durable data
  only) is reused when valid, then only the bytes after the last good index
  entry are scanned; the tail from the first invalid batch on is cut off,
  with a warning naming the file, the position and the offset.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging

from raftlog.storage.api import StorageCorruption
from raftlog.storage.offset_index import OffsetIndex, read_index_file, read_last_index_entry
from raftlog.storage.segment import Segment, SegmentDecodeError

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, slots=True)
class TailRecovery:
    """What recovering the last segment did; ``warning`` is None when nothing was cut."""

    truncated_position: int | None = None
    truncated_bytes: int = 0
    warning: str | None = None


def verify_sealed_segment(seg: Segment, next_base: int) -> None:
    """Check a sealed segment's structure; set its size, last offset and timestamps.

    The segment must hold exactly offsets ``seg.base_offset .. next_base - 1``, its
    batches ending at the file's end. Reads the first batch's header, the index's
    last entry and the headers from that entry to the end (:meth:`Segment.scan_headers`),
    never a payload: the time an open spends per sealed segment does not grow
    with the segment's batches (in the ``restart`` benchmark's 64 KiB batches, reading
    the first and last whole was three quarters of it).
    """
    size = seg.fd.size()
    seg.size = size
    seg.last_offset = next_base - 1
    if size == 0 or next_base <= seg.base_offset:
        raise StorageCorruption(
            f"{seg.path}: sealed segment is empty ({size} bytes; next segment starts at "
            f"offset {next_base})",
            str(seg.path),
            0,
        )
    entry = None
    try:
        first = seg.first_header(size)  # offset, term, its bytes within the file
        seg.note_timestamp(first.timestamp_ms)
        entry = read_last_index_entry(seg.index_path, seg.fs)
        offset, position = entry if entry is not None else (seg.base_offset, 0)
        if entry is not None and not (seg.base_offset < offset < next_base and 0 < position < size):
            raise StorageCorruption(
                f"{seg.index_path}: last entry (offset {offset} -> position {position}) lies "
                f"outside {seg.path.name} (offsets {seg.base_offset}..{next_base - 1}, "
                f"{size} bytes)",
                str(seg.index_path),
                0,
            )
        if entry is not None and (first.last_offset >= offset or first.size_bytes > position):
            # the walk below starts past the first batch: its header must leave room
            raise StorageCorruption(
                f"{seg.path}: first batch (offsets {seg.base_offset}..{first.last_offset}, "
                f"{first.size_bytes} bytes) overlaps the last index entry (offset {offset} "
                f"-> position {position})",
                str(seg.path),
                0,
            )
        last = None
        for _, header in seg.scan_headers(position, offset, size):
            last = header
            seg.note_timestamp(header.timestamp_ms)
    except SegmentDecodeError as exc:
        if entry is not None and exc.position == position:
            raise StorageCorruption(
                f"{seg.index_path}: last index entry (offset {offset} -> position {position}) "
                f"points at garbage in {seg.path}: {exc}",
                str(seg.path),
                position,
            ) from exc
        raise exc.as_corruption() from exc
    if last is None or last.last_offset != next_base - 1:
        got = "nothing" if last is None else f"offset {last.last_offset}"
        raise StorageCorruption(
            f"{seg.path}: sealed segment ends at position {size} with {got}, but the next "
            f"segment starts at offset {next_base}",
            str(seg.path),
            size,
        )


def recover_last_segment(
    seg: Segment, index_interval_bytes: int, committed_offset: int = -1
) -> TailRecovery:
    """Find the last valid batch of the last segment; cut anything after it durably.

    Afterwards the segment's size, last offset and index match its valid batches,
    and the file and index are fsynced (what survived is durable).

    ``committed_offset`` is the offset the commit context says this replica had
    flushed (and acknowledged). Damage at or below it is not a torn tail, since a
    crash cannot tear fsynced data: it raises :class:`StorageCorruption` naming the
    file, position and offsets, and nothing is cut.
    """
    file_size = seg.fd.size()
    # Keep the index's well-formed prefix inside the file; it only ever covered
    # flushed data, but a cut file or a stale index may leave entries behind.
    entries: list[tuple[int, int]] = []
    prev_offset, prev_pos = seg.base_offset, 0
    for offset, pos in read_index_file(seg.index_path, seg.fs) or ():
        if not (offset > prev_offset and prev_pos < pos < file_size):
            break
        entries.append((offset, pos))
        prev_offset, prev_pos = offset, pos
    # The last entry that points at a valid batch is where the scan starts.
    while entries:
        offset, pos = entries[-1]
        try:
            next(seg.scan(pos, offset, file_size))
            break
        except (SegmentDecodeError, StopIteration):
            entries.pop()
    start_offset, start_pos = entries[-1] if entries else (seg.base_offset, 0)
    index = OffsetIndex(seg.index_path, seg.base_offset, index_interval_bytes, entries, fs=seg.fs)
    end, last_offset, error = start_pos, start_offset - 1, None
    if start_pos > 0:
        # the first batch's timestamp (segment.ms rolls count from it); a damaged first
        # batch is found by the scan below or was flushed data checked before
        with contextlib.suppress(SegmentDecodeError, StopIteration):
            seg.note_timestamp(seg.first_batch(file_size).timestamp_ms)
    try:
        for pos, batch in seg.scan(start_pos, start_offset, file_size):
            index.add(batch.base_offset, pos)
            end, last_offset = pos + batch.size_bytes, batch.last_offset
            seg.note_timestamp(batch.timestamp_ms)
    except SegmentDecodeError as exc:
        error = exc
    result = TailRecovery()
    if end < file_size and last_offset < committed_offset:
        reason = str(error) if error is not None else "trailing bytes"
        raise StorageCorruption(
            f"{seg.path}: invalid data at position {end} (offset {last_offset + 1}) lies at "
            f"or below offset {committed_offset}, which the commit context records as "
            f"flushed: this is corruption, not a torn tail, and is not truncated; the "
            f"replica must fetch the group again; cause: {reason}",
            str(seg.path),
            end,
        )
    if end < file_size:
        reason = str(error) if error is not None else "trailing bytes"
        warning = (
            f"{seg.path}: truncating torn or corrupt tail at position {end} "
            f"(offset {last_offset + 1}), dropping {file_size - end} bytes; cause: {reason}"
        )
        logger.warning("%s", warning)
        seg.fd.truncate(end)
        result = TailRecovery(end, file_size - end, warning)
    seg.fd.fsync()
    seg.size = end
    seg.last_offset = last_offset
    seg.set_index(index)
    index.persist(fsync=True)
    return result
