"""Wrapping arithmetic for producer sequences and epochs.

Sequences are int32 values in ``[0, 2**31)`` that wrap to 0 after
``2**31 - 1``, exactly as Kafka's ``DefaultRecordBatch.incrementSequence``.

Epochs are int16 values in ``[0, 2**15)``. Kafka allocates a new producer id
when an epoch is exhausted; raftlog's producer ids are stable hashes (one per
Spark query and partition) and every micro-batch calls ``init_producer``, so
an int16 would run out within hours. Epochs therefore wrap too, and are
compared with serial-number arithmetic (RFC 1982): ``a`` is newer than ``b``
when it is at most ``2**14 - 1`` steps ahead. A zombie would have to be more
than 16383 sessions behind to be mistaken for a newer one.
"""

from __future__ import annotations

SEQUENCE_MODULUS = 2**31
EPOCH_MODULUS = 2**15
NO_SEQUENCE = -1
NO_EPOCH = -1

_SEQUENCE_HALF = SEQUENCE_MODULUS // 2
_EPOCH_HALF = EPOCH_MODULUS // 2


def check_sequence(name: str, value: int) -> int:
    """Return ``value`` if it is a valid sequence number, else raise ValueError naming ``name``."""
    if not isinstance(value, int) or not 0 <= value < SEQUENCE_MODULUS:
        raise ValueError(f"{name} must be an int in [0, {SEQUENCE_MODULUS - 1}], got {value!r}")
    return value


def check_epoch(name: str, value: int) -> int:
    """Return ``value`` when it is a valid producer epoch, else raise ValueError naming ``name``."""
    if not isinstance(value, int) or not 0 <= value < EPOCH_MODULUS:
        raise ValueError(f"{name} must be an int in [0, {EPOCH_MODULUS - 1}], got {value!r}")
    return value


def check_producer_id(name: str, value: int) -> int:
    """Return ``value`` when it is a valid producer id (a non-negative int64)."""
    if not isinstance(value, int) or not 0 <= value < 2**63:
        raise ValueError(f"{name} must be an int in [0, 2**63 - 1], got {value!r}")
    return value


def add_sequence(sequence: int, n: int) -> int:
    """``sequence + n`` with wrap-around."""
    return (sequence + n) % SEQUENCE_MODULUS


def last_sequence_of(first_sequence: int, record_count: int) -> int:
    """The sequence of the last record of a batch (each record takes one sequence)."""
    return add_sequence(first_sequence, record_count - 1)


def sequence_ahead(a: int, b: int) -> int:
    """How far ``a`` is ahead of ``b``: positive ahead, 0 equal, negative behind."""
    d = (a - b) % SEQUENCE_MODULUS
    return d - SEQUENCE_MODULUS if d >= _SEQUENCE_HALF else d


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch``; ``NO_EPOCH`` (an unknown producer) is followed by 0."""
    return 0 if epoch == NO_EPOCH else (epoch + 1) % EPOCH_MODULUS


def epoch_compare(a: int, b: int) -> int:
    """-1, 0 or 1 as epoch ``a`` is older than, equal to or newer than ``b``.

    ``NO_EPOCH`` is older than every epoch.
    """
    if a == b:
        return 0
    if b == NO_EPOCH:
        return 1
    if a == NO_EPOCH:
        return -1
    d = (a - b) % EPOCH_MODULUS
    return 1 if d < _EPOCH_HALF else -1
