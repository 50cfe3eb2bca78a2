"""Client-side errors: one RaftlogError subclass per ErrorCode.

The home of every error a caller of the client sees. The server's own errors
(``raftlog.raft.errors``, ``raftlog.producers.outcomes``, the coordinator's) never
cross the wire: the node answers each with one ErrorCode (``raftlog.node.groups``),
and the client raises the class of that code from here, so a condition that both
sides name alike (NotLeaderError, OutOfOrderSequenceError, ...) has one server type,
with the server's details, and one client type, with the wire's (the code, the
leader hint). Whether a call is retried is the code's alone (``ErrorCode.retriable``).
"""

from __future__ import annotations

from raftlog.rpc.messages import ErrorCode


class RaftlogError(Exception):
    """Base of every error the client raises; ``code`` is the wire error code."""

    code: ErrorCode = ErrorCode.INTERNAL

    def __init__(self, message: str, *, leader_id: int = -1, leader_address: str = "") -> None:
        super().__init__(message)
        self.leader_id = leader_id
        self.leader_address = leader_address


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


class ClusterUnavailableError(RaftlogError):
    """No server answered (connection refused, resets) within the request timeout."""

    code = ErrorCode.TIMEOUT


class CorruptBatchError(RaftlogError):
    """A fetched batch cannot be decoded (e.g. written by a node that did not check
    batches on produce). Raised for that batch only: the batches before it are returned
    by the fetch that reached it, and a reader skips it by continuing at
    ``last_offset + 1``, as a Kafka consumer seeks past a corrupt record."""

    code = ErrorCode.INVALID_REQUEST

    def __init__(self, topic: str, partition: int, offset: int, last_offset: int, reason: str):
        super().__init__(
            f"corrupt batch at offsets {offset}..{last_offset} of topic {topic!r} partition "
            f"{partition}: {reason}"
        )
        self.topic, self.partition = topic, partition
        self.offset, self.last_offset = offset, last_offset


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
