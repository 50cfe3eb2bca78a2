"""An independent model of what readers may see of a partition's committed log.

The producer simulator (:mod:`raftlog.sim.producers`) feeds it the committed
log in order and compares, on every replica, rm_stm's visibility filter
(``RmStm.visible`` below ``RmStm.last_stable_offset``) with the model's
verdict. The model is written from the rules of docs/ARCHITECTURE.md ("Producers"), not
from ``ProducerTable``, so that a bug in the table shows as a disagreement:

- every producer of the simulation starts with ``init_producer``, whose fence
  commits before the producer writes; so a data batch of an unknown producer,
  or of an epoch whose fence is not in the log, is a violation;
- a batch of an epoch older than the producer's current one landed although
  it should have been fenced: a violation;
- per (producer, epoch) data sequences start at 0 and are consecutive
  (wrapping after ``2**31 - 1`` to 0): a duplicate or a gap is a violation;
- a newer epoch (fence or abort marker: rm_stm writes every abort at the
  next epoch) aborts the open transaction; ``TX_COMMIT`` makes its data
  visible, ``TX_ABORT`` hides it; a ``TX_COMMIT`` naming a record count or
  last sequence other than the open transaction's hides it too;
- the last stable offset is the first offset of the oldest open transaction,
  or the offset after the last batch fed.

Statuses of data batches: ``VISIBLE`` (plain, idempotent, or transactional
and committed), ``HIDDEN`` (aborted, or fenced), ``PENDING`` (in an open
transaction).
"""

from __future__ import annotations

import dataclasses
import enum

from raftlog.producers.markers import NO_VERSION, REASON_END_TXN, MarkerPayload, decode_marker
from raftlog.producers.serial import NO_SEQUENCE, add_sequence, epoch_compare, sequence_ahead
from raftlog.sim.checks import InvariantViolation
from raftlog.storage.batch import NO_PRODUCER, BatchKind, RecordBatch

_PRODUCER_KINDS = (
    BatchKind.DATA,
    BatchKind.TX_COMMIT,
    BatchKind.TX_ABORT,
    BatchKind.PRODUCER_FENCE,
)


class Status(enum.Enum):
    VISIBLE = "visible"
    HIDDEN = "hidden"
    PENDING = "pending"


@dataclasses.dataclass(slots=True)
class _Producer:
    epoch: int
    next_sequence: int = 0
    last_sequence: int = NO_SEQUENCE  # of the epoch's last data batch
    open_records: int = 0
    open_batches: list[int] = dataclasses.field(default_factory=list)
    open_first: int | None = None
    last_committed_version: int = NO_VERSION


class LogModel:
    """Fed with committed batches in offset order (see the module doc)."""

    def __init__(self) -> None:
        self.end = -1  # last offset fed
        self.data: dict[int, RecordBatch] = {}  # data batches by base offset
        self.status: dict[int, Status] = {}
        self.producers: dict[int, _Producer] = {}
        self.markers = {BatchKind.TX_COMMIT: 0, BatchKind.TX_ABORT: 0, BatchKind.PRODUCER_FENCE: 0}
        # transactions aborted by a newer epoch other than a client's abort (fence, timeout)
        self.bump_aborts = 0

    def feed(self, node_id: int, batches: list[RecordBatch]) -> None:
        """Apply the committed batches of ``batches`` that follow ``end``."""
        for b in batches:
            if b.last_offset <= self.end:
                continue
            if b.base_offset != self.end + 1:
                raise InvariantViolation(
                    f"node {node_id}: committed batch at {b.base_offset} leaves a gap after "
                    f"{self.end} in the producer model's log"
                )
            self._apply(b)
            self.end = b.last_offset

    def last_stable_offset(self) -> int:
        firsts = [p.open_first for p in self.producers.values() if p.open_first is not None]
        return min(firsts) if firsts else self.end + 1

    def visible(self) -> list[RecordBatch]:
        """Every data batch a reader may see, in offset order (below the model's LSO)."""
        lso = self.last_stable_offset()
        return [
            b
            for base, b in sorted(self.data.items())
            if b.last_offset < lso and self.status[base] is Status.VISIBLE
        ]

    def last_committed_version(self, producer_id: int) -> int:
        p = self.producers.get(producer_id)
        return NO_VERSION if p is None else p.last_committed_version

    # -- rules ---------------------------------------------------------------

    def _apply(self, b: RecordBatch) -> None:
        kind = b.kind
        if kind not in _PRODUCER_KINDS:
            return
        if b.producer_id == NO_PRODUCER:
            if kind is BatchKind.DATA:
                self._data(b, Status.VISIBLE)
            return
        if kind is not BatchKind.DATA:
            self.markers[kind] += 1
        pid, epoch = b.producer_id, b.producer_epoch
        p = self.producers.get(pid)
        if p is None:
            if kind is BatchKind.DATA:
                raise InvariantViolation(
                    f"data of producer {pid} (epoch {epoch}) landed at offset {b.base_offset} "
                    f"before any fence of it: its init_producer was lost"
                )
            self.producers[pid] = p = _Producer(epoch)
        order = epoch_compare(epoch, p.epoch)
        if order < 0:
            raise InvariantViolation(
                f"a {kind.name} batch of producer {pid} at fenced epoch {epoch} landed at "
                f"offset {b.base_offset} after epoch {p.epoch}"
            )
        marker = _marker(b) if kind in (BatchKind.TX_COMMIT, BatchKind.TX_ABORT) else None
        if order > 0:
            if kind is BatchKind.DATA:
                raise InvariantViolation(
                    f"data of producer {pid} at epoch {epoch} landed at offset {b.base_offset} "
                    f"before that epoch's fence (current epoch {p.epoch})"
                )
            requested = (
                kind is BatchKind.TX_ABORT
                and marker is not None
                and marker.reason == REASON_END_TXN
            )
            if p.open_first is not None and not requested:
                self.bump_aborts += 1
            self._close(p, Status.HIDDEN)
            p.epoch = epoch
            p.next_sequence = 0
            p.last_sequence = NO_SEQUENCE
        if kind is BatchKind.DATA:
            if b.first_sequence != p.next_sequence:
                behind = sequence_ahead(b.first_sequence, p.next_sequence) < 0
                what = "duplicate" if behind else "gap"
                raise InvariantViolation(
                    f"{what} in producer {pid} epoch {epoch}: sequence {b.first_sequence} at "
                    f"offset {b.base_offset}, expected {p.next_sequence}"
                )
            p.next_sequence = add_sequence(b.first_sequence, b.record_count)
            p.last_sequence = add_sequence(p.next_sequence, -1)
            if b.is_transactional:
                self._data(b, Status.PENDING)
                p.open_batches.append(b.base_offset)
                p.open_records += b.record_count
                if p.open_first is None:
                    p.open_first = b.base_offset
            else:
                self._data(b, Status.VISIBLE)
        elif kind is BatchKind.TX_COMMIT:
            assert marker is not None
            if (marker.record_count >= 0 and marker.record_count != p.open_records) or (
                marker.last_sequence >= 0 and marker.last_sequence != p.last_sequence
            ):
                self._close(p, Status.HIDDEN)  # not what the writer saw: aborted
                return
            self._close(p, Status.VISIBLE)
            if marker.version != NO_VERSION:
                p.last_committed_version = marker.version
        elif kind is BatchKind.TX_ABORT:
            self._close(p, Status.HIDDEN)

    def _data(self, b: RecordBatch, status: Status) -> None:
        self.data[b.base_offset] = b
        self.status[b.base_offset] = status

    def _close(self, p: _Producer, status: Status) -> None:
        for base in p.open_batches:
            self.status[base] = status
        p.open_batches.clear()
        p.open_first = None
        p.open_records = 0


def _marker(b: RecordBatch) -> MarkerPayload:
    try:
        return decode_marker(b.payload)
    except ValueError as exc:
        raise InvariantViolation(f"malformed marker at offset {b.base_offset}: {exc}") from exc
