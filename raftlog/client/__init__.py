"""The raftlog client: admin, produce and fetch, async and blocking.

See :mod:`raftlog.client.async_client` for routing and retry behaviour and
:mod:`raftlog.client.framing` for the multi-record payload framing the CLI uses.
"""

from raftlog.client.async_client import (
    FetchResult,
    PartitionMetadata,
    ProduceResult,
    ProducerSession,
    RaftlogClient,
    TopicMetadata,
    parse_servers,
)
from raftlog.client.blocking import BlockingRaftlogClient
from raftlog.client.errors import (
    ClusterUnavailableError,
    DuplicateSequenceError,
    FencedError,
    InvalidProducerEpochError,
    InvalidRequestError,
    InvalidTxnStateError,
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
from raftlog.client.framing import frame_records, unframe_records
from raftlog.client.producer import IdempotentProducer, ProducerClosedError

__all__ = [
    "BlockingRaftlogClient",
    "ClusterUnavailableError",
    "DuplicateSequenceError",
    "FencedError",
    "FetchResult",
    "IdempotentProducer",
    "InvalidProducerEpochError",
    "InvalidRequestError",
    "InvalidTxnStateError",
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
