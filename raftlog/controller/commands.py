"""Controller commands: the payloads of CONTROLLER batches in group 0's log."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from raftlog.rpc import codec
from raftlog.storage.batch import BatchKind, RecordBatch

CONTROLLER_GROUP = 0
"""The controller's raft group id; partition groups are numbered from 1."""

_TOPIC_NAME = re.compile(r"[A-Za-z0-9._-]{1,249}")
INTERNAL_PREFIX = "__"
"""Topic names starting with it are the system's own (``__transactions``)."""


def validate_topic_name(name: str) -> str:
    """Return ``name`` or raise ValueError naming the field and the expected form.

    Kafka's rule: 1-249 characters of letters, digits, '.', '_' and '-', neither
    ``.`` nor ``..``. Names become one directory name under the node's partitions
    directory (``raftlog.storage.identity.partition_dir``), so none can escape it
    or collide with a node's own files. Names starting with ``__`` are reserved
    for internal topics.
    """
    form = (
        "expected 1-249 characters of letters, digits, '.', '_' or '-', "
        "not '.' or '..', not starting with '__' (reserved for internal topics)"
    )
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name) or name in (".", ".."):
        raise ValueError(f"invalid topic name {name!r}: {form}")
    if name.startswith(INTERNAL_PREFIX):
        raise ValueError(f"invalid topic name {name!r}: it is reserved: {form}")
    return name


def colliding_topic(name: str, existing: Iterable[str]) -> str | None:
    """An existing topic whose name differs from ``name`` only by '.' vs '_' (Kafka
    refuses such a name: their metric names would collide); None when there is none."""
    key = name.replace(".", "_")
    for other in existing:
        if other != name and other.replace(".", "_") == key:
            return other
    return None


@codec.register(200)
@dataclasses.dataclass(frozen=True, slots=True)
class PartitionAssignment:
    partition: int
    group_id: int
    replicas: list[int]  # replicas[0] is the preferred leader


@codec.register(201)
@dataclasses.dataclass(frozen=True, slots=True)
class TopicAssignment:
    name: str
    replication_factor: int
    partitions: list[PartitionAssignment]
    schema: bytes | None = None

    @property
    def topic_id(self) -> int:
        """The topic's id (``TopicInfo.topic_id``): its first partition's group id, never
        reused, so a topic deleted and created again under its name has another."""
        return self.partitions[0].group_id if self.partitions else -1


@codec.register(202)
@dataclasses.dataclass(frozen=True, slots=True)
class CreateTopicCmdV1:
    """The create command before topic configs: still decoded from older logs."""

    name: str
    partitions: int
    replication_factor: int
    nodes: list[int]
    schema: bytes | None = None


@codec.register(208)
@dataclasses.dataclass(frozen=True, slots=True)
class ConfigValue:
    """One topic config override (see :mod:`raftlog.controller.topic_config`)."""

    key: str
    value: str


@codec.register(205)
@dataclasses.dataclass(frozen=True, slots=True)
class CreateTopicCmd:
    """Create a topic. Placement and group ids are computed at apply time from
    the state machine's own state, so every replica derives the same result.
    ``configs`` are the topic's config overrides (validated again at apply)."""

    name: str
    partitions: int
    replication_factor: int
    nodes: list[int]
    schema: bytes | None = None
    configs: list[ConfigValue] = dataclasses.field(default_factory=list)


@codec.register(206)
@dataclasses.dataclass(frozen=True, slots=True)
class AlterTopicConfigCmd:
    """Set and delete (back to the default) config overrides of a topic, atomically."""

    name: str
    set: list[ConfigValue]
    delete: list[str]


@codec.register(203)
@dataclasses.dataclass(frozen=True, slots=True)
class DeleteTopicCmd:
    name: str


@codec.register(204)
@dataclasses.dataclass(frozen=True, slots=True)
class ControllerSnapshot:
    """The snapshot before topic configs (an unframed body): still restored."""

    next_group_id: int
    topics: list[TopicAssignment]


@codec.register(209)
@dataclasses.dataclass(frozen=True, slots=True)
class TopicOverrides:
    name: str
    configs: list[ConfigValue]


@codec.register(207)
@dataclasses.dataclass(frozen=True, slots=True)
class ControllerSnapshotV2:
    """The controller state as saved with its commit context (framed, after
    :data:`SNAPSHOT_V2_MAGIC`)."""

    next_group_id: int
    topics: list[TopicAssignment]
    configs: list[TopicOverrides]


@codec.register(210)
@dataclasses.dataclass(frozen=True, slots=True)
class PreferReplicaCmd:
    """Make ``node``, already a replica of the partition, its preferred leader (first
    in the replica list); the other replicas keep their order. The node leading the
    partition hands the leadership to it (the nodes balance towards the preferred
    replica), and the choice is kept: the balancer never moves it back."""

    topic: str
    partition: int = dataclasses.field(metadata={"range": (0, codec.I32_MAX)})
    node: int = dataclasses.field(metadata={"range": (0, codec.I32_MAX)})


@codec.register(211)
@dataclasses.dataclass(frozen=True, slots=True)
class CreatePartitionsCmd:
    """Grow topic ``name`` to ``partitions`` partitions in all (Kafka's
    CreatePartitions: a new total, never fewer). The new partitions are placed over
    ``nodes`` and get new group ids at apply time, as a create's do."""

    name: str
    partitions: int = dataclasses.field(metadata={"range": (1, codec.I32_MAX)})
    nodes: list[int] = dataclasses.field(default_factory=list)


@codec.register(212)
@dataclasses.dataclass(frozen=True, slots=True)
class RegisterNodeCmd:
    """A node joins the cluster (``raftlog local add-node``): every node learns its
    advertised address from the controller state, and new placements include it."""

    node_id: int = dataclasses.field(metadata={"range": (0, codec.I32_MAX)})
    address: str = ""


@codec.register(213)
@dataclasses.dataclass(frozen=True, slots=True)
class RegisteredNode:
    node_id: int
    address: str


@codec.register(214)
@dataclasses.dataclass(frozen=True, slots=True)
class ControllerSnapshotV3:
    """The controller state as saved with its commit context (framed, after
    :data:`SNAPSHOT_V3_MAGIC`): V2 and the nodes registered after the start."""

    next_group_id: int
    topics: list[TopicAssignment]
    configs: list[TopicOverrides]
    nodes: list[RegisteredNode]


@codec.register(215)
@dataclasses.dataclass(frozen=True, slots=True)
class MovePartitionCmd:
    """Start moving a partition's replicas to ``replicas`` (the first is the new
    preferred leader). While the move runs the assignment lists the target first,
    then the replicas that are to go, so the new ones open the group and the
    balancer leads towards the target. The partition's leader carries it out, one
    configuration change at a time, and ends it with :class:`CompleteMoveCmd`."""

    topic: str
    partition: int = dataclasses.field(metadata={"range": (0, codec.I32_MAX)})
    replicas: list[int] = dataclasses.field(default_factory=list)


@codec.register(216)
@dataclasses.dataclass(frozen=True, slots=True)
class CompleteMoveCmd:
    """The partition's group runs with exactly ``replicas`` as voters: its assignment
    becomes ``replicas``, and the nodes dropped close (set aside) their replica."""

    topic: str
    partition: int = dataclasses.field(metadata={"range": (0, codec.I32_MAX)})
    replicas: list[int] = dataclasses.field(default_factory=list)


@codec.register(217)
@dataclasses.dataclass(frozen=True, slots=True)
class PendingMove:
    group_id: int
    replicas: list[int]


@codec.register(218)
@dataclasses.dataclass(frozen=True, slots=True)
class ControllerSnapshotV4:
    """V3 and the moves in progress (after :data:`SNAPSHOT_V4_MAGIC`)."""

    next_group_id: int
    topics: list[TopicAssignment]
    configs: list[TopicOverrides]
    nodes: list[RegisteredNode]
    moves: list[PendingMove]


@codec.register(219)
@dataclasses.dataclass(frozen=True, slots=True)
class DecommissionNodeCmd:
    """Start draining ``node_id``: no new replica is placed on it, and its partitions
    are moved away (a :class:`MovePartitionCmd` each). It stays a node of the cluster
    (listed, reachable) until :class:`RemoveNodeCmd`."""

    node_id: int = dataclasses.field(metadata={"range": (0, codec.I32_MAX)})


@codec.register(220)
@dataclasses.dataclass(frozen=True, slots=True)
class RemoveNodeCmd:
    """``node_id`` holds no replica and left the controller group: it is no longer a
    node of the cluster (not listed, never placed on)."""

    node_id: int = dataclasses.field(metadata={"range": (0, codec.I32_MAX)})


@codec.register(221)
@dataclasses.dataclass(frozen=True, slots=True)
class ControllerSnapshotV5:
    """V4 and the nodes being decommissioned or removed (after
    :data:`SNAPSHOT_V5_MAGIC`)."""

    next_group_id: int
    topics: list[TopicAssignment]
    configs: list[TopicOverrides]
    nodes: list[RegisteredNode]
    moves: list[PendingMove]
    decommissioning: list[int]
    removed: list[int]


@codec.register(222)
@dataclasses.dataclass(frozen=True, slots=True)
class BalanceLeaderCmd:
    """The leader balancer's :class:`PreferReplicaCmd`: make ``node``, already a replica
    of the partition, its preferred leader, the same way, but as no user's choice (it
    pins nothing; see ``ControllerStm.pinned``)."""

    topic: str
    partition: int = dataclasses.field(metadata={"range": (0, codec.I32_MAX)})
    node: int = dataclasses.field(metadata={"range": (0, codec.I32_MAX)})


@codec.register(223)
@dataclasses.dataclass(frozen=True, slots=True)
class PinnedPartition:
    """A user chose the partition's preferred replica (``transfer-leadership``) at
    ``at_ms`` (the command batch's timestamp, ms since the epoch)."""

    group_id: int
    at_ms: int


@codec.register(224)
@dataclasses.dataclass(frozen=True, slots=True)
class ControllerSnapshotV6:
    """V5 and the user's preferred-replica pins (after :data:`SNAPSHOT_V6_MAGIC`)."""

    next_group_id: int
    topics: list[TopicAssignment]
    configs: list[TopicOverrides]
    nodes: list[RegisteredNode]
    moves: list[PendingMove]
    decommissioning: list[int]
    removed: list[int]
    pins: list[PinnedPartition]


SNAPSHOT_V6_MAGIC = b"RLCTLv6\xff"
"""Starts a V6 snapshot (negative as a V1 snapshot's first int64, as V2's magic)."""

SNAPSHOT_V5_MAGIC = b"RLCTLv5\xff"
"""Starts a V5 snapshot (negative as a V1 snapshot's first int64, as V2's magic)."""

SNAPSHOT_V4_MAGIC = b"RLCTLv4\xff"
"""Starts a V4 snapshot (negative as a V1 snapshot's first int64, as V2's magic)."""

SNAPSHOT_V3_MAGIC = b"RLCTLv3\xff"
"""Starts a V3 snapshot (negative as a V1 snapshot's first int64, as V2's magic)."""

SNAPSHOT_V2_MAGIC = b"RLCTLv2\xff"
"""Starts a V2 snapshot. Read as the little-endian int64 that starts a V1 snapshot
(its ``next_group_id``), it is negative, so the two forms are never confused."""

Command = (
    CreateTopicCmd
    | DeleteTopicCmd
    | AlterTopicConfigCmd
    | PreferReplicaCmd
    | CreatePartitionsCmd
    | RegisterNodeCmd
    | MovePartitionCmd
    | CompleteMoveCmd
    | DecommissionNodeCmd
    | RemoveNodeCmd
    | BalanceLeaderCmd
)


def command_batch(cmd: Command) -> RecordBatch:
    """The CONTROLLER batch that carries ``cmd`` (framed with its type id)."""
    return RecordBatch.create(codec.encode(cmd), 1, kind=BatchKind.CONTROLLER)


def decode_command(batch: RecordBatch) -> Command:
    """Decode a CONTROLLER batch's command; raises CodecError when malformed.

    A create command of the older form (no configs) decodes as a
    :class:`CreateTopicCmd` without overrides.
    """
    msg = codec.decode(batch.payload)
    if isinstance(msg, CreateTopicCmdV1):
        return CreateTopicCmd(
            msg.name, msg.partitions, msg.replication_factor, list(msg.nodes), msg.schema
        )
    if not isinstance(
        msg,
        CreateTopicCmd
        | DeleteTopicCmd
        | AlterTopicConfigCmd
        | PreferReplicaCmd
        | CreatePartitionsCmd
        | RegisterNodeCmd
        | MovePartitionCmd
        | CompleteMoveCmd
        | DecommissionNodeCmd
        | RemoveNodeCmd
        | BalanceLeaderCmd,
    ):
        raise codec.CodecError(f"not a controller command: {type(msg).__name__}")
    return msg


def config_values(configs: dict[str, str]) -> list[ConfigValue]:
    """Overrides as the commands carry them (sorted by key, so encodings are stable)."""
    return [ConfigValue(k, v) for k, v in sorted(configs.items())]
