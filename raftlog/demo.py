"""``python -m raftlog.demo``: write a small on-disk log, reopen it, read it back.

A stand-in for the main job until the Spark pipeline lands: it exercises the
segmented log end to end (append, flush, recovery on open, indexed reads)
and exits non-zero when what is read back differs from what was written.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile

from raftlog.storage.api import CommitContext
from raftlog.storage.batch import RecordBatch
from raftlog.storage.log import SegmentedLog

BATCHES = 50
RECORDS_PER_BATCH = 4


def run(directory: pathlib.Path) -> bool:
    """Write, flush, reopen and verify; print what happened; True when the check passes."""
    written: list[RecordBatch] = []
    with SegmentedLog.open(directory, segment_bytes=16 * 1024, index_interval_bytes=1024) as log:
        for i in range(BATCHES):
            term = 1 + i // 20  # a leader change every 20 batches rolls a segment
            payload = f"batch {i}: ".encode() + bytes(range(256)) * (1 + i % 3)
            batch = RecordBatch.create(payload, RECORDS_PER_BATCH).stamped(
                log.dirty_offset + 1, term
            )
            log.append([batch])
            written.append(batch)
        log.flush()
        log.save_commit_context(CommitContext(committed_offset=log.flushed_offset, term=term))
        print(
            f"wrote {len(written)} batches, offsets 0..{log.dirty_offset}, "
            f"{sum(b.size_bytes for b in written)} bytes, {log.segment_count} segments"
        )
    with SegmentedLog.open(directory, segment_bytes=16 * 1024, index_interval_bytes=1024) as log:
        report = log.recovery_report
        print(
            f"reopened: start {log.start_offset}, dirty {log.dirty_offset}, "
            f"flushed {log.flushed_offset}, committed {report.committed_offset}, "
            f"lost committed suffix: {report.lost_committed_suffix}"
        )
        read_back: list[RecordBatch] = []
        offset = log.start_offset
        while offset <= log.dirty_offset:
            chunk = log.read(offset, 8 * 1024)
            read_back += chunk
            offset = chunk[-1].last_offset + 1
        middle = log.read(101, 1)[0]
        print(
            f"read back {len(read_back)} batches, {sum(b.size_bytes for b in read_back)} bytes; "
            f"offset 101 is in batch {middle.base_offset}..{middle.last_offset} "
            f"of term {log.term_at(101)}"
        )
    ok = read_back == written and not report.lost_committed_suffix
    print(f"check: {'OK' if ok else 'FAILED'} (read back == written)")
    return ok


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="raftlog-demo-") as tmp:
        return 0 if run(pathlib.Path(tmp)) else 1


if __name__ == "__main__":
    sys.exit(main())
