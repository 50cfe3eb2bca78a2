"""The state rm_stm keeps per producer id (plain data; the rules live in the table)."""

from __future__ import annotations

import collections
import dataclasses

from raftlog.producers.markers import NO_VERSION
from raftlog.producers.serial import NO_SEQUENCE

SEQUENCE_CACHE = 5
"""Batches per producer whose offsets are kept for duplicates (Kafka's max in flight)."""


@dataclasses.dataclass(frozen=True, slots=True)
class SequenceRecord:
    """One written batch of a producer: its sequence range and offsets."""

    first_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class OpenTransaction:
    """A producer's open transaction: its first offset and its start (batch timestamp)."""

    first_offset: int
    start_ms: int


@dataclasses.dataclass(frozen=True, slots=True)
class SequenceTail:
    """The (epoch, last sequence) a request must follow; -1 sequence: expect 0 next."""

    epoch: int
    last_sequence: int


@dataclasses.dataclass(slots=True)
class ProducerState:
    """The state of one producer id; ``last_sequence`` is -1 when its epoch wrote nothing."""

    producer_id: int
    epoch: int
    last_sequence: int = NO_SEQUENCE
    recent: collections.deque[SequenceRecord] = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=SEQUENCE_CACHE)
    )
    last_committed_version: int = NO_VERSION
    open_tx: OpenTransaction | None = None
    last_activity_ms: int = 0

    def tail(self) -> SequenceTail:
        return SequenceTail(self.epoch, self.last_sequence)
