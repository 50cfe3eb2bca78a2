"""Every error a caller of the client sees.

The wire's errors (one type per ErrorCode) are defined once, in :mod:`raftlog.errors`,
and are the same types the server raises; they are re-exported here beside the two
that only the client raises: :class:`ClusterUnavailableError` (no node answered) and
:class:`CorruptBatchError` (a fetched batch that does not decode). The server's
internal errors (``raftlog.raft.errors``) never cross the wire: the node answers each
with one ErrorCode (``raftlog.node.request_errors``).
"""

from __future__ import annotations

from raftlog.errors import (
    DuplicateSequenceError,
    ErrorCode,
    FencedError,
    InvalidProducerEpochError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTxnStateError,
    KafkaStorageError,
    LeaderNotAvailableError,
    NotLeaderError,
    NotSupportedError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RaftlogError,
    RecordTooLargeError,
    RequestTimeoutError,
    StaleTermError,
    TopicExistsError,
    TxnLostError,
    UnauthorizedError,
    UnknownPartitionError,
    UnknownTopicError,
    error_for,
)

__all__ = [
    "ClusterUnavailableError",
    "CorruptBatchError",
    "DuplicateSequenceError",
    "FencedError",
    "InvalidProducerEpochError",
    "InvalidReplicationFactorError",
    "InvalidRequestError",
    "InvalidTxnStateError",
    "KafkaStorageError",
    "LeaderNotAvailableError",
    "NotLeaderError",
    "NotSupportedError",
    "OffsetOutOfRangeError",
    "OutOfOrderSequenceError",
    "RaftlogError",
    "RecordTooLargeError",
    "RequestTimeoutError",
    "StaleTermError",
    "TopicExistsError",
    "TxnLostError",
    "UnauthorizedError",
    "UnknownPartitionError",
    "UnknownTopicError",
    "error_for",
]


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
