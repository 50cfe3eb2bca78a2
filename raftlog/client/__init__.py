"""The raftlog client: admin, produce and fetch, async and blocking.

See :mod:`raftlog.client.calls` for routing and retry behaviour and
:mod:`raftlog.records.framing` for the multi-record payload framing the CLI uses.
"""

from raftlog.client.async_client import RaftlogClient
from raftlog.client.blocking import BlockingRaftlogClient
from raftlog.client.calls import parse_servers
from raftlog.client.errors import (
    ClusterUnavailableError,
    CorruptBatchError,
    DuplicateSequenceError,
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
    UnauthorizedError,
    UnknownPartitionError,
    UnknownTopicError,
)
from raftlog.client.producer import IdempotentProducer, ProducerClosedError
from raftlog.client.results import (
    FetchResult,
    PartitionMetadata,
    ProduceResult,
    ProducerSession,
    TopicMetadata,
)
from raftlog.records.framing import frame_records, unframe_records

__all__ = [
    "BlockingRaftlogClient",
    "ClusterUnavailableError",
    "CorruptBatchError",
    "DuplicateSequenceError",
    "FencedError",
    "FetchResult",
    "IdempotentProducer",
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
    "PartitionMetadata",
    "ProduceResult",
    "ProducerClosedError",
    "ProducerSession",
    "RaftlogClient",
    "RaftlogError",
    "RecordTooLargeError",
    "RequestTimeoutError",
    "StaleTermError",
    "TopicExistsError",
    "TopicMetadata",
    "UnauthorizedError",
    "UnknownPartitionError",
    "UnknownTopicError",
    "frame_records",
    "parse_servers",
    "unframe_records",
]
