"""Client-side sequencing of one idempotent producer on one partition (pure, no IO).

The client's producer uses it to assign sequences, keep at most
``max_in_flight`` (5, Kafka's limit and the size of rm_stm's duplicate cache)
requests in flight, and retry in order after a leader change, so the log gets
every batch exactly once and without gaps.

Contract with the driver (the code that does the IO):

0. A session starts with rm_stm's ``init_producer`` (its epoch is this
   sequencer's), which commits a fence: from then on every leader knows the
   producer and demands sequence 0 first. Without it the partition would treat
   the producer as unknown, and (as Kafka does) accept any first sequence, so a
   lost first batch followed by a stale later one would leave a gap.
1. :meth:`add` queues a batch of ``record_count`` records and assigns its
   sequence range; sequences are consecutive and wrap like Kafka's.
2. :meth:`next_to_send` hands out the next batch to send (lowest sequence
   first), or None when nothing waits among the first ``max_in_flight``
   unacknowledged batches (the window starts at the oldest unacknowledged one).
   Each hand-out carries an ``attempt`` number.
3. Every response is reported with the ``(first_sequence, attempt)`` of the
   send it answers: :meth:`on_success` (also for an older duplicate, with no
   offset), :meth:`on_retriable` (not leader, unknown outcome, timeout) or
   :meth:`on_out_of_order`.
4. A retriable failure of batch *k* rewinds *k* and every later batch in
   flight: they are sent again, in order, after the earlier ones. Responses
   of the abandoned attempts are ignored, except successes (the batch is
   written; rm_stm answers the resend with the original offsets anyway).
5. An out-of-order answer for a batch that is not the oldest unacknowledged
   one means an earlier batch failed first: it is rewound like a retriable
   error. For the oldest one it is fatal (:class:`SequencerError`): the
   partition lost the producer's state or data.
"""

from __future__ import annotations

import dataclasses
import enum

from raftlog.producers.serial import add_sequence, check_epoch, check_producer_id, check_sequence

MAX_IN_FLIGHT = 5


class SequencerError(Exception):
    """A failure that sequence retries cannot repair (start a new producer session)."""


class _Status(enum.Enum):
    WAITING = "waiting"  # to be sent (first time or again)
    IN_FLIGHT = "in_flight"
    ACKED = "acked"


@dataclasses.dataclass(frozen=True, slots=True)
class Send:
    """One send of a batch: what to put in the batch header, and the attempt to report."""

    producer_id: int
    epoch: int
    first_sequence: int
    record_count: int
    attempt: int


@dataclasses.dataclass(slots=True)
class _Slot:
    first_sequence: int
    record_count: int
    status: _Status = _Status.WAITING
    attempt: int = 0
    base_offset: int | None = None


class Sequencer:
    """Sequences of one producer session on one partition (see the module doc)."""

    def __init__(
        self,
        producer_id: int,
        epoch: int,
        *,
        max_in_flight: int = MAX_IN_FLIGHT,
        first_sequence: int = 0,
    ) -> None:
        self.producer_id = check_producer_id("producer_id", producer_id)
        self.epoch = check_epoch("producer_epoch", epoch)
        if not isinstance(max_in_flight, int) or not 1 <= max_in_flight <= MAX_IN_FLIGHT:
            raise ValueError(
                f"max_in_flight must be an int in [1, {MAX_IN_FLIGHT}], got {max_in_flight!r}"
            )
        self.max_in_flight = max_in_flight
        self._next_sequence = check_sequence("first_sequence", first_sequence)
        self._slots: list[_Slot] = []  # unacknowledged prefix removed; in sequence order
        self._attempts = 0

    # -- queries -------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return sum(1 for s in self._slots if s.status is _Status.IN_FLIGHT)

    @property
    def unacknowledged(self) -> int:
        """Batches added and not yet acknowledged."""
        return len(self._slots)

    @property
    def idle(self) -> bool:
        """True when every batch added has been acknowledged."""
        return not self._slots

    @property
    def next_sequence(self) -> int:
        return self._next_sequence

    # -- driving -------------------------------------------------------------

    def add(self, record_count: int) -> int:
        """Queue a batch; return its first sequence."""
        if not isinstance(record_count, int) or record_count < 1:
            raise ValueError(f"record_count must be an int >= 1, got {record_count!r}")
        first = self._next_sequence
        self._slots.append(_Slot(first, record_count))
        self._next_sequence = add_sequence(first, record_count)
        return first

    def next_to_send(self) -> Send | None:
        """The next batch to send, in sequence order, or None (window full or nothing waits).

        A batch waiting to be resent blocks every later batch: sends leave in
        sequence order, so rm_stm never sees a gap it did not cause.

        Only the first ``max_in_flight`` unacknowledged slots may be sent (as
        Kafka: at most 5 in flight counted from the oldest unacknowledged
        batch). Batches acknowledged out of order behind an unacknowledged one
        still occupy the window: rm_stm keeps the offsets of a producer's last
        5 batches only, so writing more past the oldest unacknowledged batch
        would turn its resend into an older duplicate with no offset.
        """
        for slot in self._slots[: self.max_in_flight]:
            if slot.status is _Status.WAITING:
                self._attempts += 1
                slot.status = _Status.IN_FLIGHT
                slot.attempt = self._attempts
                return Send(
                    self.producer_id,
                    self.epoch,
                    slot.first_sequence,
                    slot.record_count,
                    slot.attempt,
                )
        return None

    def on_success(self, first_sequence: int, attempt: int, base_offset: int | None) -> None:
        """The batch is in the log (``base_offset`` None: an older duplicate)."""
        slot = self._slot(first_sequence)
        if slot is None or slot.status is _Status.ACKED:
            return
        slot.status = _Status.ACKED
        slot.base_offset = base_offset
        while self._slots and self._slots[0].status is _Status.ACKED:
            self._slots.pop(0)

    def on_retriable(self, first_sequence: int, attempt: int) -> bool:
        """The send failed or its outcome is unknown: resend it and everything after it.

        Returns False when the answer is for an abandoned attempt (nothing changes).
        """
        slot = self._slot(first_sequence)
        if slot is None or slot.status is not _Status.IN_FLIGHT or slot.attempt != attempt:
            return False  # answers an abandoned attempt
        self._rewind_from(first_sequence)
        return True

    def on_out_of_order(self, first_sequence: int, attempt: int) -> bool:
        """rm_stm saw a gap: an earlier batch failed first (rewind) or state was lost (fatal).

        Returns False when the answer is for an abandoned attempt (nothing changes).
        """
        slot = self._slot(first_sequence)
        if slot is None or slot.status is not _Status.IN_FLIGHT or slot.attempt != attempt:
            return False
        if slot is self._slots[0]:
            raise SequencerError(
                f"producer {self.producer_id} epoch {self.epoch}: out of order sequence for the "
                f"oldest unacknowledged batch (first_sequence {first_sequence}); the partition "
                f"lost earlier data or the producer's state: start a new session"
            )
        self._rewind_from(first_sequence)
        return True

    def reset(self, epoch: int) -> None:
        """A new session (after init_producer): the sequence restarts at 0.

        Raises SequencerError while batches are unacknowledged: they belong to
        the old epoch and would be fenced.
        """
        if self._slots:
            raise SequencerError(
                f"cannot reset producer {self.producer_id} to epoch {epoch}: "
                f"{len(self._slots)} batches are unacknowledged"
            )
        self.epoch = check_epoch("producer_epoch", epoch)
        self._next_sequence = 0

    def _rewind_from(self, first_sequence: int) -> None:
        rewinding = False
        for slot in self._slots:
            rewinding = rewinding or slot.first_sequence == first_sequence
            if rewinding and slot.status is _Status.IN_FLIGHT:
                slot.status = _Status.WAITING

    def _slot(self, first_sequence: int) -> _Slot | None:
        for slot in self._slots:
            if slot.first_sequence == first_sequence:
                return slot
        return None
