"""Batches placed in a log, for feeding the producer table in tests."""

from __future__ import annotations

from raftlog.producers.markers import make_fence, make_marker
from raftlog.storage.batch import RecordBatch


class LogBuilder:
    """Places batches at consecutive offsets, as a leader would, with a test clock."""

    def __init__(self, start_offset: int = 0, now_ms: int = 1_000) -> None:
        self.next_offset = start_offset
        self.now_ms = now_ms
        self.batches: list[RecordBatch] = []

    def _place(self, batch: RecordBatch) -> RecordBatch:
        placed = batch.stamped(self.next_offset, term=1)
        self.next_offset = placed.last_offset + 1
        self.batches.append(placed)
        return placed

    def data(
        self,
        pid: int,
        epoch: int,
        seq: int,
        count: int = 1,
        *,
        tx: bool = False,
        payload: bytes = b"x",
    ) -> RecordBatch:
        return self._place(
            RecordBatch.create(
                payload,
                count,
                transactional=tx,
                producer_id=pid,
                producer_epoch=epoch,
                first_sequence=seq,
                timestamp_ms=self.now_ms,
            )
        )

    def plain(self, count: int = 1) -> RecordBatch:
        return self._place(RecordBatch.create(b"p", count, timestamp_ms=self.now_ms))

    def commit(self, pid: int, epoch: int, version: int = -1) -> RecordBatch:
        return self._place(
            make_marker(pid, epoch, commit=True, version=version, timestamp_ms=self.now_ms)
        )

    def abort(self, pid: int, epoch: int) -> RecordBatch:
        return self._place(make_marker(pid, epoch, commit=False, timestamp_ms=self.now_ms))

    def fence(self, pid: int, epoch: int) -> RecordBatch:
        return self._place(make_fence(pid, epoch, timestamp_ms=self.now_ms))
