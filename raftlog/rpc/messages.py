"""Client-call messages (``/v1/...``) and the error reply shared by every route.

Every message is a frozen dataclass registered with :mod:`raftlog.rpc.codec`
under a fixed type id (ids are wire format: never reuse or renumber one).
Ids 1-99 are client calls, 100-199 raft peer messages (see
:mod:`raftlog.rpc.peer`), 200-299 controller commands.

Conventions: offsets count records; ``-1`` means "none/unknown" for ids,
offsets, epochs and sequences, as in Kafka.
"""

from __future__ import annotations

import dataclasses

from raftlog.errors import ErrorCode
from raftlog.rpc.codec import I16_MAX, I32_MAX, I64_MAX, register
from raftlog.storage.batch import RecordBatch

ACKS = {"all": -1, "-1": -1, "1": 1, "0": 0}
"""Kafka's acks names -> the wire value (-1 quorum_ack, 1 leader_ack, 0 no_ack)."""

ISOLATION = {"read_uncommitted": 0, "read_committed": 1}


@register(1)
@dataclasses.dataclass(frozen=True, slots=True)
class ErrorResponse:
    code: ErrorCode
    message: str
    leader_id: int = -1
    leader_address: str = ""


@register(2)
@dataclasses.dataclass(frozen=True, slots=True)
class NodeInfo:
    node_id: int
    address: str  # "host:port"


@register(3)
@dataclasses.dataclass(frozen=True, slots=True)
class PartitionInfo:
    partition: int
    group_id: int
    leader: int  # -1 when unknown
    replicas: list[int]
    start_offset: int = -1
    high_watermark: int = -1
    last_stable_offset: int = -1
    # when the answering replica (or the leader asked) learned that leader: wall-clock ms
    leader_since_ms: int = -1


@register(4)
@dataclasses.dataclass(frozen=True, slots=True)
class TopicInfo:
    name: str
    replication_factor: int
    partitions: list[PartitionInfo]
    schema: bytes | None = None
    # Unique for the life of the cluster: a topic deleted and created again under the
    # same name gets a new id (its first partition's raft group id; -1: unknown).
    topic_id: int = -1


@register(50)
@dataclasses.dataclass(frozen=True, slots=True)
class ConfigEntry:
    """A topic config (Kafka's names: retention.bytes, retention.ms, segment.bytes,
    segment.ms). ``is_default``: not set on the topic (describe only)."""

    key: str
    value: str
    is_default: bool = False


@register(10)
@dataclasses.dataclass(frozen=True, slots=True)
class MetadataRequest:
    topics: list[str]  # empty: every topic
    with_offsets: bool = False  # ask replicas for leaders and watermarks (slower)
    # with_offsets: hold the answer up to this long while a partition asked for has no
    # known leader (a topic just created, an election), answering once every one has
    # one; the node caps it at MAX_LEADER_WAIT_MS. 0: answer at once.
    wait_for_leaders_ms: int = dataclasses.field(default=0, metadata={"range": (0, I32_MAX)})


@register(11)
@dataclasses.dataclass(frozen=True, slots=True)
class MetadataResponse:
    node_id: int  # the node that answered
    controller_leader: int
    nodes: list[NodeInfo]
    topics: list[TopicInfo]


@register(12)
@dataclasses.dataclass(frozen=True, slots=True)
class CreateTopicRequest:
    name: str
    partitions: int  # -1: the cluster default
    replication_factor: int
    schema: bytes | None = None
    exist_ok: bool = False
    configs: list[ConfigEntry] = dataclasses.field(default_factory=list)  # overrides


@register(13)
@dataclasses.dataclass(frozen=True, slots=True)
class CreateTopicResponse:
    topic: TopicInfo


@register(14)
@dataclasses.dataclass(frozen=True, slots=True)
class DeleteTopicRequest:
    name: str


@register(15)
@dataclasses.dataclass(frozen=True, slots=True)
class DeleteTopicResponse:
    name: str


@register(16)
@dataclasses.dataclass(frozen=True, slots=True)
class ListTopicsRequest:
    pass


@register(17)
@dataclasses.dataclass(frozen=True, slots=True)
class ListTopicsResponse:
    names: list[str]


@register(20)
@dataclasses.dataclass(frozen=True, slots=True)
class ProduceBatch:
    payload: bytes | memoryview  # a view of the request's frame on the node: no copy
    record_count: int
    # the codec ``payload`` is compressed with (raftlog.storage.batch.Compression, Kafka's
    # ids); stored in the batch's attributes, so readers decompress. The engine never does.
    compression: int = dataclasses.field(default=0, metadata={"range": (0, 4)})


@register(21)
@dataclasses.dataclass(frozen=True, slots=True)
class ProduceRequest:
    topic: str
    partition: int
    acks: int  # -1 all (quorum_ack), 1 (leader_ack), 0 (no_ack)
    batches: list[ProduceBatch]
    producer_id: int = -1
    producer_epoch: int = -1
    first_sequence: int = -1
    transactional: bool = False


@register(22)
@dataclasses.dataclass(frozen=True, slots=True)
class ProduceResponse:
    base_offset: int
    last_offset: int


@register(23)
@dataclasses.dataclass(frozen=True, slots=True)
class FetchRequest:
    topic: str
    partition: int
    offset: int
    max_bytes: int
    isolation: int = 1  # 1 read_committed (below the LSO), 0 read_uncommitted (below the HWM)


@register(24)
@dataclasses.dataclass(frozen=True, slots=True)
class FetchResponse:
    # the reader checks each batch's CRC (nobody on the way does: see ARCHITECTURE.md)
    batches: list[RecordBatch] = dataclasses.field(metadata={"crc": "reader"})
    high_watermark: int
    last_stable_offset: int
    start_offset: int
    next_offset: int  # where the next fetch starts (skips control batches and aborted data)


@register(25)
@dataclasses.dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    topic: str
    partition: int


@register(26)
@dataclasses.dataclass(frozen=True, slots=True)
class ListOffsetsResponse:
    start_offset: int
    high_watermark: int
    last_stable_offset: int


@register(56)
@dataclasses.dataclass(frozen=True, slots=True)
class OffsetForTimestampRequest:
    """The first offset of a partition whose batch timestamp is at least ``timestamp_ms``
    (Kafka's ListOffsets by timestamp), among committed data below the last stable offset."""

    topic: str
    partition: int
    timestamp_ms: int


@register(57)
@dataclasses.dataclass(frozen=True, slots=True)
class OffsetForTimestampResponse:
    offset: int  # -1: no batch at or after the timestamp below the LSO
    timestamp_ms: int  # that batch's timestamp (-1 with offset -1)
    last_stable_offset: int


@register(27)
@dataclasses.dataclass(frozen=True, slots=True)
class InitProducerRequest:
    topic: str
    partition: int
    producer_id: int
    # the session's transaction timeout; -1: the server's --transaction-timeout-ms
    transaction_timeout_ms: int = -1
    # the id of the topic the caller planned its write against (TopicInfo.topic_id; -1:
    # any): a topic deleted and created again under the name is refused (UNKNOWN_TOPIC)
    topic_id: int = -1


@register(28)
@dataclasses.dataclass(frozen=True, slots=True)
class InitProducerResponse:
    producer_id: int
    epoch: int
    last_committed_version: int
    transaction_timeout_ms: int = -1  # the session's, as the server resolved it


@register(29)
@dataclasses.dataclass(frozen=True, slots=True)
class EndTxnRequest:
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    commit: bool
    version: int = -1
    acks: int = -1  # must be -1 (all): a marker acknowledged by the leader alone may vanish
    # what the writer saw acknowledged in the transaction; -1: unchecked (commit only)
    record_count: int = dataclasses.field(default=-1, metadata={"range": (-1, 2**31 - 1)})
    last_sequence: int = dataclasses.field(default=-1, metadata={"range": (-1, 2**31 - 1)})


@register(30)
@dataclasses.dataclass(frozen=True, slots=True)
class EndTxnResponse:
    offset: int
    producer_epoch: int = -1  # the producer's epoch after the marker (an abort bumps it)


# -- the transaction coordinator (tm_stm on ``__transactions``) ------------------------------
# Ids 31 and 32 (the JSON ``CoordinatorRequest``/``CoordinatorResponse``) are retired.

MAX_TXN_ID_CHARS = 256
"""The longest writer, run, attempt or topic name a coordinator call may carry."""

MAX_TXN_PARTICIPANTS = 100_000
"""The most participants one coordinator call (and one version) may carry."""

TXN_STATUSES = ("registered", "committed", "aborted", "refused")
"""What the coordinator answers a registration or an EndTxn with (see each response)."""


@register(33)
@dataclasses.dataclass(frozen=True, slots=True)
class Participant:
    """One task attempt's open transaction on one topic partition: the one type that
    goes from the task (``prepare``) to the coordinator, into its log and back out in
    its decisions.

    ``producer_id`` is unique to the (run, attempt, topic partition); ``epoch`` is the
    session's epoch, which the partition fences once an abort bumps it. ``records``,
    ``last_sequence``, ``first_offset`` and ``last_offset`` are what the attempt saw
    acknowledged (-1 until the commit names it). ``topic_id`` is the id of the topic
    the data went to (-1: not known): a topic deleted and created again under its name
    is another topic, whose offsets this participant's say nothing about.
    """

    attempt: str
    run: str
    topic: str
    partition: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    producer_id: int = dataclasses.field(metadata={"range": (0, I64_MAX)})
    epoch: int = dataclasses.field(metadata={"range": (0, I16_MAX)})
    records: int = dataclasses.field(default=-1, metadata={"range": (-1, I64_MAX)})
    last_sequence: int = dataclasses.field(default=-1, metadata={"range": (-1, I32_MAX)})
    first_offset: int = -1
    last_offset: int = -1
    topic_id: int = -1

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@register(34)
@dataclasses.dataclass(frozen=True, slots=True)
class RegisterParticipantRequest:
    """A task attempt registers ``participant`` for ``version`` of ``writer`` before it
    writes (the coordinator's partition is ``partition``: 0)."""

    partition: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    writer: str
    version: int = dataclasses.field(metadata={"range": (0, I64_MAX)})
    participant: Participant


@register(35)
@dataclasses.dataclass(frozen=True, slots=True)
class RegisterParticipantResponse:
    """``registered`` (write), ``committed`` (the version is committed: write nothing) or
    ``refused`` (this run already decided the version: ``error`` says so)."""

    status: str
    last_committed: int = -1
    error: str = ""


@register(36)
@dataclasses.dataclass(frozen=True, slots=True)
class TxnDecision:
    """A run's recorded decision on a version: the participants it commits (``named``)
    and those it aborts; ``complete`` once every marker is durable."""

    run: str
    commit: bool
    named: list[Participant]
    aborts: list[Participant]
    complete: bool


@register(37)
@dataclasses.dataclass(frozen=True, slots=True)
class CoordinatorEndTxnRequest:
    """The driver's one call per micro-batch (Kafka's ``EndTxn``): decide ``version`` of
    ``writer`` as ``run``, committing exactly ``participants`` (the successful
    attempts') or aborting what the run registered. The coordinator records the
    decision, writes every marker and records the decision complete before it answers
    (see :class:`raftlog.coordinator.txn_coordinator.TxnCoordinator`)."""

    partition: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    writer: str
    version: int = dataclasses.field(metadata={"range": (0, I64_MAX)})
    run: str
    commit: bool
    participants: list[Participant] = dataclasses.field(default_factory=list)


@register(38)
@dataclasses.dataclass(frozen=True, slots=True)
class CoordinatorEndTxnResponse:
    """``committed`` or ``aborted``: the version's recorded decision (a replay is
    answered with the earlier run's commit), every marker of it durable."""

    status: str
    decision: TxnDecision | None = None


@register(39)
@dataclasses.dataclass(frozen=True, slots=True)
class AbortRunRequest:
    """Abort what ``run`` registered for ``version`` of any writer and has not decided (a
    driver's ``abort()`` without commit messages knows its run and version only)."""

    partition: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    run: str
    version: int = dataclasses.field(metadata={"range": (0, I64_MAX)})


@register(43)
@dataclasses.dataclass(frozen=True, slots=True)
class AbortRunResponse:
    aborted: int  # transactions aborted, their markers durable


@register(44)
@dataclasses.dataclass(frozen=True, slots=True)
class ConsistentCutRequest:
    """The committed transactions that touch ``topic`` (of id ``topic_id``; -1: any), for
    a reader's consistent cut (``raftlog.client.transactions.consistent_cut``)."""

    partition: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    topic: str
    topic_id: int = -1


@register(45)
@dataclasses.dataclass(frozen=True, slots=True)
class CutParticipant:
    partition: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    first_offset: int
    marker: int  # the commit marker's offset; -1: not known to be written


@register(46)
@dataclasses.dataclass(frozen=True, slots=True)
class CutTransaction:
    writer: str
    version: int = dataclasses.field(metadata={"range": (0, I64_MAX)})
    complete: bool
    participants: list[CutParticipant]


@register(47)
@dataclasses.dataclass(frozen=True, slots=True)
class ConsistentCutResponse:
    transactions: list[CutTransaction]


@register(48)
@dataclasses.dataclass(frozen=True, slots=True)
class DescribeWriterRequest:
    """A writer's last committed version and its decisions whose markers are not all
    durable yet (operations and tests)."""

    partition: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    writer: str


@register(49)
@dataclasses.dataclass(frozen=True, slots=True)
class PendingDecision:
    version: int = dataclasses.field(metadata={"range": (0, I64_MAX)})
    decision: TxnDecision


@register(58)
@dataclasses.dataclass(frozen=True, slots=True)
class DescribeWriterResponse:
    last_committed: int
    pending: list[PendingDecision]


COORDINATOR_CALLS = (
    RegisterParticipantRequest,
    CoordinatorEndTxnRequest,
    AbortRunRequest,
    ConsistentCutRequest,
    DescribeWriterRequest,
)
"""The client calls a ``__transactions`` partition's leader answers (each has a
``partition``: the coordinator's partition)."""


@register(51)
@dataclasses.dataclass(frozen=True, slots=True)
class AlterConfigRequest:
    """Set and delete (back to the default) config overrides of a topic, atomically."""

    name: str
    set: list[ConfigEntry]
    delete: list[str]


@register(52)
@dataclasses.dataclass(frozen=True, slots=True)
class TopicConfigs:
    """Every config key of a topic with its effective value."""

    name: str
    configs: list[ConfigEntry]


@register(53)
@dataclasses.dataclass(frozen=True, slots=True)
class AlterConfigResponse:
    topic: TopicConfigs  # the configs after the change


@register(54)
@dataclasses.dataclass(frozen=True, slots=True)
class DescribeConfigsRequest:
    names: list[str]  # empty: every topic


@register(55)
@dataclasses.dataclass(frozen=True, slots=True)
class DescribeConfigsResponse:
    topics: list[TopicConfigs]


@register(40)
@dataclasses.dataclass(frozen=True, slots=True)
class PartitionStatusRequest:
    """Peer query: a replica's view of local groups (leader and offsets)."""

    group_ids: list[int]


@register(41)
@dataclasses.dataclass(frozen=True, slots=True)
class PartitionStatus:
    group_id: int
    leader: int
    start_offset: int
    high_watermark: int
    last_stable_offset: int
    # when the replica learned that leader (wall-clock ms; -1: unknown)
    leader_since_ms: int = -1


@register(42)
@dataclasses.dataclass(frozen=True, slots=True)
class PartitionStatusResponse:
    statuses: list[PartitionStatus]


@register(64)
@dataclasses.dataclass(frozen=True, slots=True)
class TransferLeadershipRequest:
    """Make ``target_node`` the leader of a partition, and its preferred replica (kept by
    the controller, so the balancer never moves the leadership back)."""

    topic: str
    partition: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    target_node: int = dataclasses.field(metadata={"range": (0, I32_MAX)})


@register(65)
@dataclasses.dataclass(frozen=True, slots=True)
class TransferLeadershipResponse:
    leader: int  # the partition's leader when the call returned: the target


@register(66)
@dataclasses.dataclass(frozen=True, slots=True)
class CreatePartitionsRequest:
    """Grow a topic to ``partitions`` partitions in all (Kafka's CreatePartitions)."""

    name: str
    partitions: int = dataclasses.field(metadata={"range": (1, I32_MAX)})


@register(67)
@dataclasses.dataclass(frozen=True, slots=True)
class CreatePartitionsResponse:
    topic: TopicInfo  # after the change


@register(68)
@dataclasses.dataclass(frozen=True, slots=True)
class RegisterNodeRequest:
    """A new node joins: the controller records its advertised address (every node
    learns it) and adds it to the controller group, first as a learner."""

    node_id: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    address: str = ""  # HOST:PORT, as the node advertises it


@register(69)
@dataclasses.dataclass(frozen=True, slots=True)
class RegisterNodeResponse:
    nodes: list[NodeInfo]  # every node of the cluster after the change


@register(70)
@dataclasses.dataclass(frozen=True, slots=True)
class MovePartitionRequest:
    """Move a partition's replicas to ``replicas`` (the first: the preferred leader).
    Sent again with the same target, it answers whether the move is done."""

    topic: str
    partition: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    replicas: list[int] = dataclasses.field(default_factory=list)


@register(71)
@dataclasses.dataclass(frozen=True, slots=True)
class MovePartitionResponse:
    replicas: list[int]  # the target
    done: bool  # the partition runs with exactly the target


@register(72)
@dataclasses.dataclass(frozen=True, slots=True)
class CompleteMoveRequest:
    """From a partition's leader: its group runs with exactly ``replicas`` (a move's
    target) as voters; the controller ends the move. Answered with a
    :class:`MovePartitionResponse`."""

    topic: str
    partition: int = dataclasses.field(metadata={"range": (0, I32_MAX)})
    replicas: list[int] = dataclasses.field(default_factory=list)


@register(73)
@dataclasses.dataclass(frozen=True, slots=True)
class DecommissionNodeRequest:
    """Drain a node (its partitions moved away), then remove it from the cluster. Sent
    again, it answers how far that has got."""

    node_id: int = dataclasses.field(metadata={"range": (0, I32_MAX)})


@register(74)
@dataclasses.dataclass(frozen=True, slots=True)
class DecommissionNodeResponse:
    remaining: int  # partitions that still have a replica on the node
    removed: bool  # the node is no longer a node of the cluster


CLIENT_ROUTES: dict[type, str] = {
    MetadataRequest: "metadata",
    CreateTopicRequest: "create_topic",
    DeleteTopicRequest: "delete_topic",
    ListTopicsRequest: "list_topics",
    ProduceRequest: "produce",
    FetchRequest: "fetch",
    ListOffsetsRequest: "list_offsets",
    OffsetForTimestampRequest: "offset_for_timestamp",
    InitProducerRequest: "init_producer",
    EndTxnRequest: "end_txn",
    RegisterParticipantRequest: "txn_register",
    CoordinatorEndTxnRequest: "coordinator",
    AbortRunRequest: "txn_abort_run",
    ConsistentCutRequest: "txn_cut",
    DescribeWriterRequest: "txn_describe_writer",
    PartitionStatusRequest: "partition_status",
    AlterConfigRequest: "alter_config",
    DescribeConfigsRequest: "describe_configs",
    TransferLeadershipRequest: "transfer_leadership",
    CreatePartitionsRequest: "create_partitions",
    RegisterNodeRequest: "register_node",
    MovePartitionRequest: "move_partition",
    CompleteMoveRequest: "complete_move",
    DecommissionNodeRequest: "decommission_node",
}
"""Client request type -> route name under ``/v1/`` (client and server share it)."""

CLIENT_STREAM_PATH = "/v1/stream"
"""The client stream's WebSocket route (under ``/v1/``: the client token only); its
frames are the replication stream's (:mod:`raftlog.rpc.peer`), its messages the
requests of :data:`CLIENT_ROUTES` and their answers."""

# Calls whose encoded request is at most this many bytes go on the node's client
# stream as one buffer (a frame on one WebSocket, no HTTP request per call: a
# 100-byte produce cost the client a third less CPU). Larger ones (the connector's
# IPC chunks) go on it too, as their parts (no copy), unless the connection is TLS:
# the node then reads its streams with aiohttp's reader, which ends a stream at a
# frame past its bound, so they go as a POST, refused past the bound with a 413.
# On a plain connection the node reads a large frame straight into a buffer of its
# own (a POST's body was copied twice), and answers one past its bound with the
# POST's RECORD_TOO_LARGE under the request's id (``raftlog.rpc.frame_receiver``).
STREAM_MAX_REQUEST_BYTES = 64 * 1024
