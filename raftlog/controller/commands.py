"""Controller commands: the payloads of CONTROLLER batches in group 0's log."""

from __future__ import annotations

import dataclasses
import re

from raftlog.rpc import codec
from raftlog.storage.batch import BatchKind, RecordBatch

CONTROLLER_GROUP = 0
"""The controller's raft group id; partition groups are numbered from 1."""

_TOPIC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,248}")


def validate_topic_name(name: str) -> str:
    """Return ``name`` or raise ValueError naming the expected form.

    Names become directory names, so they are restricted as Kafka's are.
    """
    if not isinstance(name, str) or not _TOPIC_NAME.fullmatch(name):
        raise ValueError(
            f"invalid topic name {name!r}: expected 1-249 characters of letters, digits, "
            "'.', '_' or '-', starting with a letter or digit"
        )
    return name


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


@codec.register(202)
@dataclasses.dataclass(frozen=True, slots=True)
class CreateTopicCmd:
    """Create a topic. Placement and group ids are computed at apply time from
    the state machine's own state, so every replica derives the same result."""

    name: str
    partitions: int
    replication_factor: int
    nodes: list[int]
    schema: bytes | None = None


@codec.register(203)
@dataclasses.dataclass(frozen=True, slots=True)
class DeleteTopicCmd:
    name: str


@codec.register(204)
@dataclasses.dataclass(frozen=True, slots=True)
class ControllerSnapshot:
    next_group_id: int
    topics: list[TopicAssignment]


Command = CreateTopicCmd | DeleteTopicCmd


def command_batch(cmd: Command) -> RecordBatch:
    """The CONTROLLER batch that carries ``cmd`` (framed with its type id)."""
    return RecordBatch.create(codec.encode(cmd), 1, kind=BatchKind.CONTROLLER)


def decode_command(batch: RecordBatch) -> Command:
    """Decode a CONTROLLER batch's command; raises CodecError when malformed."""
    msg = codec.decode(batch.payload)
    if not isinstance(msg, CreateTopicCmd | DeleteTopicCmd):
        raise codec.CodecError(f"not a controller command: {type(msg).__name__}")
    return msg
