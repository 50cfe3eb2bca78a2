"""What the client's calls return: topic and partition metadata, produce and fetch
results, producer sessions, topic configs (plain dataclasses)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from raftlog.producers.outcomes import ProduceResult
from raftlog.rpc.messages import (
    TopicConfigs,
    TopicInfo,
)
from raftlog.storage.batch import RecordBatch

if TYPE_CHECKING:
    pass

__all__ = [
    "FetchResult",
    "PartitionMetadata",
    "ProduceResult",  # the server's type (raftlog.producers.outcomes): one definition
    "ProducerSession",
    "TopicConfigDescription",
    "TopicMetadata",
]


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionMetadata:
    partition: int
    leader: int  # node id, -1 when unknown
    replicas: list[int]
    start_offset: int
    high_watermark: int
    last_stable_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class TopicMetadata:
    name: str
    partitions: list[PartitionMetadata]
    replication_factor: int
    schema: bytes | None
    # a topic deleted and created again under its name gets a new id (-1: unknown)
    topic_id: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class TopicConfigDescription:
    """A topic's configs: every key's effective value, and which ones the topic sets."""

    name: str
    configs: dict[str, str]  # every key (Kafka's names) -> its effective value
    overrides: dict[str, str]  # the keys set on the topic (the others are defaults)


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerSession:
    """A producer session on one partition (from ``init_producer``).

    ``transaction_timeout_ms`` is the timeout of the session's transactions as
    the server resolved it (its default when the session asked for none).
    """

    producer_id: int
    epoch: int
    last_committed_version: int
    transaction_timeout_ms: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class FetchResult:
    """Committed data batches from the requested offset.

    Payloads are decompressed (``raftlog.client.compression``), whatever codec
    the writer chose. Control batches (markers, raft configuration, no-ops) and
    aborted data are not returned, so offsets may have gaps; continue from ``next_offset``
    (which is past every batch returned and every batch skipped).
    """

    batches: list[RecordBatch]
    high_watermark: int
    last_stable_offset: int
    start_offset: int
    next_offset: int = -1
    # each batch's size as stored (header and compressed payload), in ``batches`` order:
    # a reader's payloads are decompressed, but fetch limits count stored bytes
    stored_bytes: tuple[int, ...] = ()


def topic_metadata(t: TopicInfo) -> TopicMetadata:
    return TopicMetadata(
        name=t.name,
        partitions=[
            PartitionMetadata(
                p.partition,
                p.leader,
                list(p.replicas),
                p.start_offset,
                p.high_watermark,
                p.last_stable_offset,
            )
            for p in t.partitions
        ],
        replication_factor=t.replication_factor,
        schema=t.schema,
        topic_id=t.topic_id,
    )


def config_description(t: TopicConfigs) -> TopicConfigDescription:
    return TopicConfigDescription(
        t.name,
        {e.key: e.value for e in t.configs},
        {e.key: e.value for e in t.configs if not e.is_default},
    )
