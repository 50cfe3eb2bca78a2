"""The wire's errors: each :class:`ErrorCode` and the one exception type that carries it.

As Kafka's ``Errors`` enum and ``org.apache.kafka.common.errors``: one type per
condition, raised by the server where it arises (rm_stm, the coordinator, the
node's handlers) and by the client when the code comes back over the wire
(:func:`error_for`). The node answers an error with its ``code``; the client
raises the class of that code, so a caller catches the same type whichever side
raised it. Whether a call is retried is the code's alone (``ErrorCode.retriable``).

This module imports nothing of the project, so every layer may use it.
"""

from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    """Why a request failed. ``retriable`` ones are retried by the client."""

    NONE = 0
    NOT_LEADER = 1  # retriable: leader_id/leader_address name the leader when known
    LEADER_NOT_AVAILABLE = 2  # retriable: an election is in progress
    TIMEOUT = 3  # retriable: the outcome is unknown
    UNKNOWN_TOPIC = 4
    UNKNOWN_PARTITION = 5
    TOPIC_EXISTS = 6
    INVALID_REQUEST = 7  # a malformed body or a bad field value
    RECORD_TOO_LARGE = 8
    OFFSET_OUT_OF_RANGE = 9
    NOT_SUPPORTED = 10
    UNAUTHORIZED = 11
    FENCED = 12  # an older producer epoch
    OUT_OF_ORDER_SEQUENCE = 13
    STALE_TERM = 14
    INTERNAL = 15
    DUPLICATE_SEQUENCE = 16  # an older duplicate: already written, offsets no longer known
    INVALID_TXN_STATE = 17
    INVALID_PRODUCER_EPOCH = 18  # an epoch never granted (newer than the current one)
    # Kafka's KAFKA_STORAGE_ERROR: the leader's disk is full (free space below its
    # --min-free-bytes reserve, or a write found no space); nothing was written. Not
    # retried by the client: it fails at once and says so (retrying only hides it).
    KAFKA_STORAGE_ERROR = 19
    # the transaction coordinator: a committed participant's transaction was aborted
    # (its partition's transaction timeout) before its commit marker; the batch is lost
    TRANSACTION_LOST = 20
    # Kafka's code and name: a replication factor above the nodes that can hold replicas
    INVALID_REPLICATION_FACTOR = 38

    @property
    def retriable(self) -> bool:
        return self in (ErrorCode.NOT_LEADER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.TIMEOUT)


class RaftlogError(Exception):
    """Base of every error the client raises; ``code`` is the wire error code."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, leader_id: int = -1, leader_address: str = "") -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.leader_address = leader_address

    @property
    def retriable(self) -> bool:
        """Whether the same request may be sent again (its code's, ``ErrorCode.retriable``)."""
        return self.code.retriable


class NotLeaderError(RaftlogError):
    code = ErrorCode.NOT_LEADER


class LeaderNotAvailableError(RaftlogError):
    code = ErrorCode.LEADER_NOT_AVAILABLE


class RequestTimeoutError(RaftlogError):
    code = ErrorCode.TIMEOUT


class UnknownTopicError(RaftlogError):
    code = ErrorCode.UNKNOWN_TOPIC


class UnknownPartitionError(RaftlogError):
    code = ErrorCode.UNKNOWN_PARTITION


class TopicExistsError(RaftlogError):
    code = ErrorCode.TOPIC_EXISTS


class InvalidRequestError(RaftlogError):
    code = ErrorCode.INVALID_REQUEST


class InvalidReplicationFactorError(InvalidRequestError):
    """An explicit replication factor above the cluster's node count (Kafka's
    INVALID_REPLICATION_FACTOR); an InvalidRequestError too."""

    code = ErrorCode.INVALID_REPLICATION_FACTOR


class RecordTooLargeError(RaftlogError):
    code = ErrorCode.RECORD_TOO_LARGE


class OffsetOutOfRangeError(RaftlogError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class NotSupportedError(RaftlogError):
    code = ErrorCode.NOT_SUPPORTED


class UnauthorizedError(RaftlogError):
    code = ErrorCode.UNAUTHORIZED


class FencedError(RaftlogError):
    code = ErrorCode.FENCED


class OutOfOrderSequenceError(RaftlogError):
    code = ErrorCode.OUT_OF_ORDER_SEQUENCE


class StaleTermError(RaftlogError):
    code = ErrorCode.STALE_TERM


class DuplicateSequenceError(RaftlogError):
    """An older duplicate of a written batch; treat it as success (Kafka does)."""

    code = ErrorCode.DUPLICATE_SEQUENCE


class InvalidTxnStateError(RaftlogError):
    code = ErrorCode.INVALID_TXN_STATE


class InvalidProducerEpochError(RaftlogError):
    code = ErrorCode.INVALID_PRODUCER_EPOCH


class TxnLostError(RaftlogError):
    """A committed participant's transaction was aborted before its commit marker
    (its partition's transaction timeout passed): the batch is not all readable."""

    code = ErrorCode.TRANSACTION_LOST


class KafkaStorageError(RaftlogError):
    """The partition leader's disk is full: the write was refused, nothing was written."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


_BY_CODE: dict[ErrorCode, type[RaftlogError]] = {
    cls.code: cls
    for cls in (
        NotLeaderError,
        LeaderNotAvailableError,
        RequestTimeoutError,
        UnknownTopicError,
        UnknownPartitionError,
        TopicExistsError,
        InvalidRequestError,
        RecordTooLargeError,
        OffsetOutOfRangeError,
        NotSupportedError,
        UnauthorizedError,
        FencedError,
        OutOfOrderSequenceError,
        StaleTermError,
        DuplicateSequenceError,
        InvalidTxnStateError,
        InvalidProducerEpochError,
        KafkaStorageError,
        InvalidReplicationFactorError,
        TxnLostError,
    )
}


def error_for(
    code: ErrorCode, message: str, leader_id: int = -1, address: str = ""
) -> RaftlogError:
    """The exception for a wire error code (RaftlogError itself for INTERNAL/unknown)."""
    cls = _BY_CODE.get(code, RaftlogError)
    return cls(message, leader_id=leader_id, leader_address=address)
