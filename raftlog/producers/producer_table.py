"""The producer table: rm_stm's pure state, rebuilt from the log on every replica.

No IO and no clock: every change comes from :meth:`ProducerTable.apply`, called
with each committed batch in log order. Time is the *log clock*: the largest
batch timestamp applied so far (timestamps are stamped by the leader at
append). Taking the maximum keeps it monotonic when a new leader's clock is
behind the old one's. Two replicas that apply the
same log therefore hold equal tables, and :meth:`ProducerTable.snapshot`
makes equal bytes.

Per producer id it keeps the epoch, the last sequence, the sequence ranges
and offsets of the last 5 batches (``SEQUENCE_CACHE``, Kafka's limit on
requests in flight), the last committed application version, the open
transaction (first offset, start time, record count), the session's
transaction timeout (from its PRODUCER_FENCE; -1: the server default), the
last commit/abort marker applied (kind, requested epoch, offset, version,
record count, last sequence: what answers an exact retry) and the last
activity. Sequences wrap after ``2**31 - 1`` to 0, as Kafka's do (see
:mod:`~raftlog.producers.serial`), so a producer may write any number of
records.

Rules of :meth:`apply` (total: it never raises on a batch, so a replica can
never get stuck on the log; a malformed marker or fence payload reads as
its defaults):

- A batch whose offsets are at or below ``applied_offset`` is ignored, which
  makes replay after :meth:`restore` idempotent.
- A batch with an epoch older than the producer's is ignored (the leader
  fences those before they reach the log).
- A batch with a newer epoch first *bumps* the producer: its open
  transaction (of the older epoch) is aborted up to the offset before the
  batch (through the marker itself for an abort marker), and its sequence
  restarts (the next data batch must start at 0). This is how
  PRODUCER_FENCE batches and abort markers fence zombies: every abort marker
  rm_stm writes carries the next epoch (an abort bumps the epoch), so a late
  produce or commit of the aborted transaction is fenced.
- PRODUCER_FENCE also sets the session's transaction timeout.
- Transactional data opens a transaction when none is open and adds its
  record count to it.
- TX_COMMIT closes the transaction and records the marker's application
  version, unless the marker names a ``record_count`` (>= 0) other than the
  open transaction's or a ``last_sequence`` (>= 0) other than the producer's:
  such a commit marker **aborts** the transaction instead (its data is never
  shown) and is remembered as an abort that no retry matches. The leader
  refuses such a commit before it is written; this rule only makes the
  outcome deterministic should one reach the log anyway (committing a set of
  records other than the one the writer saw acknowledged could expose rows
  twice or rows nobody decided to commit; aborting cannot).
- TX_ABORT closes the transaction and records ``[first offset, marker
  offset]`` in the aborted index.

Expiry and the LRU bound follow Kafka: producers idle for longer than
``producer_expiry_ms`` (by the log clock) are dropped, and beyond
``max_producers`` the least recently active one is dropped. A producer with an
open transaction is never dropped (its first offset holds the LSO; the
transaction timeout ends it). A dropped producer is *unknown*, and as in Kafka
since KIP-360 an unknown producer's next batch is accepted at any epoch and
sequence and starts its state afresh. A retry of a batch written before the
expiry would then be written again; the expiry (7 days by default) is what
makes that practically impossible.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable

from raftlog.producers import table_snapshot
from raftlog.producers.aborted_index import AbortedIndex
from raftlog.producers.markers import (
    DEFAULT_TIMEOUT,
    NO_VERSION,
    MarkerPayload,
    decode_fence_payload,
    decode_marker,
)
from raftlog.producers.outcomes import (
    Accept,
    AlreadyWritten,
    Fenced,
    OlderDuplicate,
    Outcome,
    OutOfOrder,
)
from raftlog.producers.producer_state import (
    LastMarker,
    OpenTransaction,
    ProducerState,
    SequenceRecord,
    SequenceTail,
)
from raftlog.producers.serial import (
    NO_EPOCH,
    NO_SEQUENCE,
    add_sequence,
    check_epoch,
    check_producer_id,
    check_sequence,
    epoch_compare,
    last_sequence_of,
    sequence_ahead,
)
from raftlog.storage.batch import NO_PRODUCER, BatchKind, RecordBatch

DEFAULT_PRODUCER_EXPIRY_MS = 7 * 24 * 3600 * 1000
DEFAULT_MAX_PRODUCERS = 100_000


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerTableConfig:
    """Bounds of the table; every replica of a partition must use the same values."""

    max_producers: int = DEFAULT_MAX_PRODUCERS
    producer_expiry_ms: int = DEFAULT_PRODUCER_EXPIRY_MS

    def __post_init__(self) -> None:
        if not isinstance(self.max_producers, int) or self.max_producers < 1:
            raise ValueError(f"max_producers must be an int >= 1, got {self.max_producers!r}")
        if not isinstance(self.producer_expiry_ms, int) or self.producer_expiry_ms < 1:
            raise ValueError(
                f"producer_expiry_ms must be an int >= 1 (milliseconds), "
                f"got {self.producer_expiry_ms!r}"
            )


class ProducerTable:
    """Idempotent-producer and transaction state of one partition (see the module doc)."""

    def __init__(self, config: ProducerTableConfig | None = None) -> None:
        self.config = config or ProducerTableConfig()
        # insertion order is recency order: the first entry is the least recently active
        self._producers: collections.OrderedDict[int, ProducerState] = collections.OrderedDict()
        self._open: dict[int, OpenTransaction] = {}
        # Called with True when the first transaction opens, False when the last one
        # ends (the node keeps the partitions with any open: its timeout loop looks at
        # those only, not at every partition each second).
        self.open_listener: Callable[[bool], None] | None = None
        self.aborted = AbortedIndex()
        self._applied_offset = -1
        self._log_clock_ms = 0

    # -- queries -------------------------------------------------------------

    @property
    def applied_offset(self) -> int:
        """The last offset applied (-1 before anything)."""
        return self._applied_offset

    @property
    def log_clock_ms(self) -> int:
        """The largest batch timestamp applied (0 before anything)."""
        return self._log_clock_ms

    def get(self, producer_id: int) -> ProducerState | None:
        return self._producers.get(producer_id)

    def producers(self) -> list[ProducerState]:
        """Every producer, least recently active first."""
        return list(self._producers.values())

    def __len__(self) -> int:
        return len(self._producers)

    @property
    def has_open_transactions(self) -> bool:
        """Whether any transaction is open (without copying them)."""
        return bool(self._open)

    def open_transactions(self) -> dict[int, OpenTransaction]:
        """Open transactions by producer id (a copy)."""
        return dict(self._open)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction, or None when none is open."""
        if not self._open:  # the common case, asked per partition by status snapshots
            return None
        return min((tx.first_offset for tx in self._open.values()), default=None)

    def last_stable_offset(self) -> int:
        """The first offset a reader may not see: the oldest open transaction's first offset,
        else the offset after the last one applied. Never above what was applied, so a reader
        cannot see a batch whose transaction state is not yet known."""
        first = self.first_unstable_offset()
        return self._applied_offset + 1 if first is None else first

    def transaction_timeout_ms(self, producer_id: int, default_ms: int) -> int:
        """The transaction timeout of ``producer_id``'s session (``default_ms`` when its
        fence asked for the server default, or the producer is unknown)."""
        state = self._producers.get(producer_id)
        if state is None or state.transaction_timeout_ms == DEFAULT_TIMEOUT:
            return default_ms
        return state.transaction_timeout_ms

    def expired_transactions(self, now_ms: int, default_timeout_ms: int) -> list[int]:
        """Producer ids whose transaction has been open for at least its session's
        timeout (``default_timeout_ms`` for sessions on the server default)."""
        return [
            pid
            for pid, tx in self._open.items()
            if now_ms - tx.start_ms >= self.transaction_timeout_ms(pid, default_timeout_ms)
        ]

    def min_open_timeout_ms(self, default_timeout_ms: int) -> int | None:
        """The shortest timeout among the open transactions (None when none is open)."""
        if not self._open:  # the common case, asked per partition every second
            return None
        return min(
            (self.transaction_timeout_ms(pid, default_timeout_ms) for pid in self._open),
            default=None,
        )

    def check(
        self,
        producer_id: int,
        epoch: int,
        first_sequence: int,
        record_count: int,
        tail: SequenceTail | None = None,
    ) -> Outcome:
        """Decide a produce request against the applied state.

        ``tail`` overrides the (epoch, last sequence) the request must follow;
        the leader passes the tail of its in-flight requests. Duplicates are
        still looked up among the applied batches. Raises ValueError naming
        the field when an argument is out of range.
        """
        check_producer_id("producer_id", producer_id)
        check_epoch("producer_epoch", epoch)
        check_sequence("first_sequence", first_sequence)
        if not isinstance(record_count, int) or record_count < 1:
            raise ValueError(f"record_count must be an int >= 1, got {record_count!r}")
        state = self._producers.get(producer_id)
        if tail is None:
            if state is None:
                return Accept()  # unknown producer: any epoch and sequence (Kafka, KIP-360)
            tail = state.tail()
        order = epoch_compare(epoch, tail.epoch)
        if order < 0:
            return Fenced(tail.epoch, epoch)
        if order > 0:
            return Accept() if first_sequence == 0 else OutOfOrder(0, first_sequence)
        last = last_sequence_of(first_sequence, record_count)
        if state is not None and state.epoch == epoch:
            for rec in state.recent:
                if rec.first_sequence == first_sequence and rec.last_sequence == last:
                    return AlreadyWritten(rec.base_offset, rec.last_offset)
        if tail.last_sequence == NO_SEQUENCE:
            return Accept() if first_sequence == 0 else OutOfOrder(0, first_sequence)
        expected = add_sequence(tail.last_sequence, 1)
        ahead = sequence_ahead(first_sequence, expected)
        if ahead == 0:
            return Accept()
        if ahead < 0 and sequence_ahead(last, tail.last_sequence) <= 0:
            return OlderDuplicate(tail.last_sequence)
        return OutOfOrder(expected, first_sequence)

    # -- applying the log ----------------------------------------------------

    def apply(self, batch: RecordBatch) -> None:
        """Apply one committed batch (see the module doc for the rules)."""
        if batch.last_offset <= self._applied_offset:
            return
        self._applied_offset = batch.last_offset
        self._log_clock_ms = max(self._log_clock_ms, batch.timestamp_ms)
        self._expire(self._log_clock_ms)
        pid = batch.producer_id
        kind = batch.kind
        if pid == NO_PRODUCER or kind not in _PRODUCER_KINDS:
            return
        epoch = batch.producer_epoch
        state = self._producers.get(pid)
        if state is None:
            state = ProducerState(pid, epoch)
            self._producers[pid] = state
        else:
            order = epoch_compare(epoch, state.epoch)
            if order < 0:
                return
            if order > 0:
                # an abort marker's own offset belongs to the range it aborts
                end = batch.last_offset if kind is BatchKind.TX_ABORT else batch.base_offset - 1
                self._bump(state, epoch, end)
            self._producers.move_to_end(pid)
        state.last_activity_ms = self._log_clock_ms
        if kind is BatchKind.DATA:
            self._apply_data(state, batch)
        elif kind is BatchKind.TX_COMMIT:
            self._apply_commit(state, batch)
        elif kind is BatchKind.TX_ABORT:
            self._apply_abort(state, batch, _marker(batch))
        else:  # PRODUCER_FENCE: the bump above, and the session's timeout
            state.transaction_timeout_ms = _fence_timeout(batch)
        self._enforce_bound()

    def prefix_truncate(self, start_offset: int) -> None:
        """Forget aborted ranges below the log start (after retention)."""
        self.aborted.prefix_truncate(start_offset)

    def _apply_data(self, state: ProducerState, batch: RecordBatch) -> None:
        if batch.first_sequence != NO_SEQUENCE:
            last = last_sequence_of(batch.first_sequence, batch.record_count)
            state.last_sequence = last
            state.recent.append(
                SequenceRecord(batch.first_sequence, last, batch.base_offset, batch.last_offset)
            )
        if batch.is_transactional:
            tx = state.open_tx
            if tx is None:
                tx = OpenTransaction(batch.base_offset, self._log_clock_ms, batch.record_count)
            else:
                tx = dataclasses.replace(tx, record_count=tx.record_count + batch.record_count)
            state.open_tx = tx
            first = not self._open
            self._open[state.producer_id] = tx
            if first:
                self._tell_open(True)

    def _apply_commit(self, state: ProducerState, batch: RecordBatch) -> None:
        p = _marker(batch)
        tx = state.open_tx
        held = 0 if tx is None else tx.record_count
        if (p.record_count >= 0 and p.record_count != held) or (
            p.last_sequence >= 0 and p.last_sequence != state.last_sequence
        ):
            # not the transaction the writer saw acknowledged: abort it (see the module doc);
            # remembered with no requested epoch, so no retry of this commit "succeeds"
            self._apply_abort(state, batch, dataclasses.replace(p, requested_epoch=NO_EPOCH))
            return
        self._close_tx(state)
        if p.version != NO_VERSION:
            state.last_committed_version = p.version
        state.last_marker = LastMarker(
            True,
            batch.producer_epoch,
            batch.last_offset,
            p.version,
            p.record_count,
            p.last_sequence,
        )

    def _apply_abort(self, state: ProducerState, batch: RecordBatch, p: MarkerPayload) -> None:
        if state.open_tx is not None:
            self.aborted.add(state.producer_id, state.open_tx.first_offset, batch.last_offset)
        self._close_tx(state)
        state.last_marker = LastMarker(
            False, p.requested_epoch, batch.last_offset, p.version, p.record_count, p.last_sequence
        )

    def _bump(self, state: ProducerState, epoch: int, end_offset: int) -> None:
        # the older epoch's transaction can never be committed now: abort it up to end_offset
        if state.open_tx is not None:
            self.aborted.add(state.producer_id, state.open_tx.first_offset, end_offset)
            self._close_tx(state)
        state.epoch = epoch
        state.last_sequence = NO_SEQUENCE
        state.recent.clear()

    def _close_tx(self, state: ProducerState) -> None:
        state.open_tx = None
        if self._open.pop(state.producer_id, None) is not None and not self._open:
            self._tell_open(False)

    def _expire(self, now_ms: int) -> None:
        horizon = now_ms - self.config.producer_expiry_ms
        expired = []
        # called for every applied batch: walk only the expired head, not a copy of all
        for pid, state in self._producers.items():
            if state.open_tx is not None:
                continue
            if state.last_activity_ms > horizon:
                break  # recency order: later entries are (almost always) more recent
            expired.append(pid)
        for pid in expired:
            del self._producers[pid]

    def _enforce_bound(self) -> None:
        excess = len(self._producers) - self.config.max_producers
        if excess <= 0:
            return
        victims = [pid for pid, s in self._producers.items() if s.open_tx is None][:excess]
        for pid in victims:
            del self._producers[pid]

    # -- snapshot ------------------------------------------------------------

    def snapshot(self) -> bytes:
        """The table as bytes (see :mod:`raftlog.producers.table_snapshot`)."""
        return table_snapshot.encode(
            self._applied_offset, self._log_clock_ms, self.producers(), self.aborted
        )

    def restore(self, data: bytes) -> None:
        """Replace the whole table with a snapshot's; raises ValueError on a bad snapshot."""
        applied, log_clock, producers, aborted = table_snapshot.decode(data)
        self._applied_offset = applied
        self._log_clock_ms = log_clock
        self._producers = collections.OrderedDict((p.producer_id, p) for p in producers)
        had = bool(self._open)
        self._open = {p.producer_id: p.open_tx for p in producers if p.open_tx is not None}
        self.aborted = aborted
        if had != bool(self._open):
            self._tell_open(not had)

    def _tell_open(self, any_open: bool) -> None:
        if self.open_listener is not None:
            self.open_listener(any_open)


_PRODUCER_KINDS = frozenset(
    {BatchKind.DATA, BatchKind.TX_COMMIT, BatchKind.TX_ABORT, BatchKind.PRODUCER_FENCE}
)


def _marker(batch: RecordBatch) -> MarkerPayload:
    # apply must be total: a malformed payload (never written by rm_stm) reads as the
    # defaults (no version, unchecked counts, no requested epoch)
    try:
        return decode_marker(batch.payload)
    except ValueError:
        return MarkerPayload()


def _fence_timeout(batch: RecordBatch) -> int:
    try:
        return decode_fence_payload(batch.payload)
    except ValueError:
        return DEFAULT_TIMEOUT
