"""Driver-side topic handling: create the sink's topic on first write, load a topic's schema."""

from __future__ import annotations

from typing import Any, NamedTuple

import pyarrow as pa
from pyspark_raftlog.arrow_payload import (
    check_schema,
    decode_payload,
    schema_from_bytes,
    schema_to_bytes,
)
from pyspark_raftlog.errors import SchemaMismatchError
from pyspark_raftlog.logsetup import get_logger
from pyspark_raftlog.options import SinkOptions
from pyspark_raftlog.raw_records import is_records_schema, records_marker_schema

__all__ = ["TopicPlan", "ensure_topic", "topic_schema"]


class TopicPlan(NamedTuple):
    """What a write is planned against: the topic's partition count, its Arrow schema
    (or the raw-records marker) and its id (``TopicMetadata.topic_id``, -1: unknown)."""

    partitions: int
    schema: pa.Schema
    topic_id: int


def ensure_topic(
    client: Any,
    opts: SinkOptions,
    schema: pa.Schema,
    topic: str | None = None,
    *,
    raw: bool = False,
) -> TopicPlan:
    """(partition count, Arrow schema, id) of ``topic`` (default: option ``topic``), creating it.

    ``raw``: the write is of raw records (Kafka's columns); a new topic is
    then marked as holding raw records, and a topic of typed Arrow data is
    refused (and the reverse), as the two cannot be read as one schema.

    A missing topic is created with ``schema``, ``partitions`` (else the
    cluster default) and ``replicationFactor`` (when not given, the cluster's
    default, capped at its node count, so an embedded single-host cluster works;
    one given above the node count is refused: InvalidReplicationFactorError).
    ``exist_ok`` makes concurrent first writes safe: whichever
    wins, the schema is then checked against the existing topic's.
    Raises SchemaMismatchError (showing both schemas) when the topic has another schema.
    """
    from raftlog.client import UnknownTopicError

    name = topic or opts.topic
    assert name is not None, "a topic comes from the option or the row's topic column"
    stored_as = records_marker_schema() if raw else schema
    try:
        # Partitions, schema and id only: no replica is asked for its offsets (the
        # streaming writer plans this twice per micro-batch).
        meta = client.describe_topic(name, offsets=False)
    except UnknownTopicError:
        meta = client.create_topic(
            name,
            partitions=opts.partitions,
            replication_factor=opts.replication_factor,
            schema=schema_to_bytes(stored_as),
            exist_ok=True,
        )
        get_logger().info(
            "raftlog sink: created topic %r with %d partitions", name, len(meta.partitions)
        )
    if meta.schema is not None and is_records_schema(schema_from_bytes(meta.schema)) != raw:
        held = "raw records (Kafka's columns)" if not raw else "typed Arrow data"
        raise SchemaMismatchError(
            f"topic {name!r} holds {held}, but this write is of "
            + ("raw records" if raw else "typed columns")
            + ": write a DataFrame of 'value' and only Kafka's columns (key, headers, "
            "topic, partition, timestamp) to a raw-records topic, anything else to a typed one"
        )
    if raw:
        return TopicPlan(len(meta.partitions), stored_as, meta.topic_id)
    if meta.schema is None:
        # Created outside Spark (e.g. `raftlog topic create`): payloads are self-describing
        # Arrow streams, so writing is safe; readers learn the schema from the first record.
        get_logger().warning(
            "raftlog sink: topic %r has no stored Arrow schema; writing with the DataFrame's",
            name,
        )
        return TopicPlan(len(meta.partitions), schema, meta.topic_id)
    stored = schema_from_bytes(meta.schema)
    check_schema(name, stored, schema)
    return TopicPlan(len(meta.partitions), stored, meta.topic_id)


def topic_schema(client: Any, topic: str) -> pa.Schema | None:
    """The topic's Arrow schema, or None when the topic holds raw records.

    Raw records: marked so by the sink, or a topic without a stored schema
    whose first record is not an Arrow IPC stream (e.g. written by ``raftlog
    produce``), or one without a schema and without records yet. Raises
    UnknownTopicError for a missing topic.
    """
    meta = client.describe_topic(topic)
    if meta.schema is not None:
        schema = schema_from_bytes(meta.schema)
        return None if is_records_schema(schema) else schema
    for part in meta.partitions:
        if part.last_stable_offset <= part.start_offset:
            continue
        fetched = client.fetch(topic, part.partition, part.start_offset, max_bytes=1)
        if fetched.batches:
            try:
                return decode_payload(fetched.batches[0].payload).schema
            except ValueError:
                return None  # not Arrow: raw records
    return None
