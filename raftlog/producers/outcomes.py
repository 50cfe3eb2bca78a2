"""What the producer table decides about a produce request, and the errors it maps to.

The table's :meth:`~raftlog.producers.producer_table.ProducerTable.check` is
pure and returns one of the outcome values below; :class:`~raftlog.producers.rm_stm.RmStm`
turns the rejecting ones into the matching :class:`ProducerError` subclass,
whose ``code`` is the Kafka error name a client maps to its retry policy.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class Accept:
    """Write the batch: it is the next in sequence (or the producer is unknown)."""


@dataclasses.dataclass(frozen=True, slots=True)
class AlreadyWritten:
    """The exact sequence range was written before, at these offsets (one of the last 5)."""

    base_offset: int
    last_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class OlderDuplicate:
    """The sequence range lies wholly before the last 5 batches: a duplicate, offsets unknown."""

    last_sequence: int


@dataclasses.dataclass(frozen=True, slots=True)
class OutOfOrder:
    """The sequence does not follow the producer's last one (a gap, or a partial overlap)."""

    expected_sequence: int
    first_sequence: int


@dataclasses.dataclass(frozen=True, slots=True)
class Fenced:
    """The request's epoch is older than the producer's current one."""

    current_epoch: int
    request_epoch: int


Outcome = Accept | AlreadyWritten | OlderDuplicate | OutOfOrder | Fenced


@dataclasses.dataclass(frozen=True, slots=True)
class ProduceResult:
    """Where a produced batch is in the log: what rm_stm returns and the client hands
    back (``raftlog.client.ProduceResult`` is this type, the one definition)."""

    base_offset: int
    last_offset: int


class ProducerError(Exception):
    """A produce or transaction request rejected by rm_stm; ``code`` is the Kafka error name."""

    code = "UNKNOWN_SERVER_ERROR"
    retriable = False


class DuplicateSequenceError(ProducerError):
    """An older duplicate; clients treat it as success (Kafka's DUPLICATE_SEQUENCE_NUMBER)."""

    code = "DUPLICATE_SEQUENCE_NUMBER"

    def __init__(self, producer_id: int, first_sequence: int, last_sequence: int) -> None:
        super().__init__(
            f"duplicate sequence {first_sequence} for producer {producer_id}: already written "
            f"(the producer's last sequence is {last_sequence}; only the last 5 batches keep "
            f"their offsets)"
        )
        self.producer_id = producer_id
        self.last_sequence = last_sequence


class OutOfOrderSequenceError(ProducerError):
    """A gap in a producer's sequence (Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER)."""

    code = "OUT_OF_ORDER_SEQUENCE_NUMBER"

    def __init__(self, producer_id: int, expected: int, got: int) -> None:
        super().__init__(
            f"out of order sequence for producer {producer_id}: expected first_sequence "
            f"{expected}, got {got}"
        )
        self.producer_id = producer_id
        self.expected_sequence = expected
        self.first_sequence = got


class ProducerFencedError(ProducerError):
    """An older epoch of the producer (Kafka's INVALID_PRODUCER_EPOCH / PRODUCER_FENCED)."""

    code = "PRODUCER_FENCED"

    def __init__(self, producer_id: int, current_epoch: int, request_epoch: int) -> None:
        super().__init__(
            f"producer {producer_id} is fenced: request epoch {request_epoch} is older than "
            f"the current epoch {current_epoch}"
        )
        self.producer_id = producer_id
        self.current_epoch = current_epoch
        self.request_epoch = request_epoch


class InvalidProducerEpochError(ProducerError):
    """A transaction request with an epoch this partition never granted."""

    code = "INVALID_PRODUCER_EPOCH"


class InvalidTxnStateError(ProducerError):
    """A transaction request for a producer with no session here (call init_producer)."""

    code = "INVALID_TXN_STATE"


class UnknownOutcomeError(ProducerError):
    """The request may or may not have been written; this leader stepped down.

    Retrying with the same (producer id, epoch, sequence) is safe: the next
    leader resolves the retry from the log.
    """

    code = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


def raise_for(outcome: Outcome, producer_id: int, first_sequence: int) -> None:
    """Raise the error a rejecting outcome maps to; return for Accept and AlreadyWritten."""
    match outcome:
        case OlderDuplicate(last_sequence=last):
            raise DuplicateSequenceError(producer_id, first_sequence, last)
        case OutOfOrder(expected_sequence=expected, first_sequence=got):
            raise OutOfOrderSequenceError(producer_id, expected, got)
        case Fenced(current_epoch=current, request_epoch=req):
            raise ProducerFencedError(producer_id, current, req)
        case _:
            return
