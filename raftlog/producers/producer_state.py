"""The state rm_stm keeps per producer id (plain data; the rules live in the table)."""

from __future__ import annotations

import collections
import dataclasses

from raftlog.producers.markers import DEFAULT_TIMEOUT, NO_COUNT, NO_VERSION
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
    """A producer's open transaction: its first offset, its start (batch timestamp), and
    how many records its data batches hold so far (what a checked commit must name)."""

    first_offset: int
    start_ms: int
    record_count: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class LastMarker:
    """The last commit or abort marker applied for a producer, kept to answer its retry.

    ``requested_epoch`` is the epoch the request named (-1 when no client request
    can match: an abort written by an init_producer, or a commit the table turned
    into an abort because its counts did not match). ``offset`` is the marker's.
    """

    commit: bool
    requested_epoch: int
    offset: int
    version: int = NO_VERSION
    record_count: int = NO_COUNT
    last_sequence: int = NO_SEQUENCE


@dataclasses.dataclass(frozen=True, slots=True)
class SequenceTail:
    """The (epoch, last sequence) a request must follow; -1 sequence: expect 0 next."""

    epoch: int
    last_sequence: int


@dataclasses.dataclass(slots=True)
class ProducerState:
    """The state of one producer id; ``last_sequence`` is -1 when its epoch wrote nothing.

    ``transaction_timeout_ms`` is the session's (from its fence; -1: the
    server default). ``last_marker`` is the last commit/abort applied (None: none).
    """

    producer_id: int
    epoch: int
    last_sequence: int = NO_SEQUENCE
    recent: collections.deque[SequenceRecord] = dataclasses.field(
        default_factory=lambda: collections.deque(maxlen=SEQUENCE_CACHE)
    )
    last_committed_version: int = NO_VERSION
    open_tx: OpenTransaction | None = None
    last_activity_ms: int = 0
    transaction_timeout_ms: int = DEFAULT_TIMEOUT
    last_marker: LastMarker | None = None

    def tail(self) -> SequenceTail:
        return SequenceTail(self.epoch, self.last_sequence)
