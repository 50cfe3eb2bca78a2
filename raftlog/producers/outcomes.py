"""What the producer table decides about a produce request, and the errors it maps to.

The table's :meth:`~raftlog.producers.producer_table.ProducerTable.check` is
pure and returns one of the outcome values below; :class:`~raftlog.producers.rm_stm.RmStm`
turns the rejecting ones into the matching wire error (:mod:`raftlog.errors`: one
type per ErrorCode, the same the client raises), whose ``code`` the node answers.
"""

from __future__ import annotations

import dataclasses

from raftlog.errors import (
    DuplicateSequenceError,
    FencedError,
    NotLeaderError,
    OutOfOrderSequenceError,
)


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


class UnknownOutcomeError(NotLeaderError):
    """The request may or may not have been written; this leader stepped down.

    Retrying with the same (producer id, epoch, sequence) is safe: the next
    leader resolves the retry from the log.
    """


def fenced(producer_id: int, current_epoch: int, request_epoch: int) -> FencedError:
    """The error for a request of an older epoch than the producer's current one."""
    return FencedError(
        f"producer {producer_id} is fenced: request epoch {request_epoch} is older than "
        f"the current epoch {current_epoch}"
    )


def raise_for(outcome: Outcome, producer_id: int, first_sequence: int) -> None:
    """Raise the error a rejecting outcome maps to; return for Accept and AlreadyWritten."""
    match outcome:
        case OlderDuplicate(last_sequence=last):
            raise DuplicateSequenceError(
                f"duplicate sequence {first_sequence} for producer {producer_id}: already "
                f"written (the producer's last sequence is {last}; only the last 5 batches "
                f"keep their offsets)"
            )
        case OutOfOrder(expected_sequence=expected, first_sequence=got):
            raise OutOfOrderSequenceError(
                f"out of order sequence for producer {producer_id}: expected first_sequence "
                f"{expected}, got {got}"
            )
        case Fenced(current_epoch=current, request_epoch=req):
            raise fenced(producer_id, current, req)
        case _:
            return
