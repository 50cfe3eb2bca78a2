"""Client-side errors: one RaftlogError subclass per ErrorCode."""

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


class ClusterUnavailableError(RaftlogError):
    """No server answered (connection refused, resets) within the request timeout."""

    code = ErrorCode.TIMEOUT


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
        InvalidReplicationFactorError,
    )
}


def error_for(
    code: ErrorCode, message: str, leader_id: int = -1, address: str = ""
) -> RaftlogError:
    """The exception for a wire error code (RaftlogError itself for INTERNAL/unknown)."""
    cls = _BY_CODE.get(code, RaftlogError)
    return cls(message, leader_id=leader_id, leader_address=address)
