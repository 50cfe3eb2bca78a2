"""Driver-side topic handling: create the sink's topic on first write, load a topic's schema."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark_raftlog.arrow_payload import (
    check_schema,
    decode_payload,
    schema_from_bytes,
    schema_to_bytes,
)
from pyspark_raftlog.logsetup import get_logger
from pyspark_raftlog.options import SinkOptions

__all__ = ["ensure_topic", "topic_schema"]


def ensure_topic(client: Any, opts: SinkOptions, schema: pa.Schema) -> tuple[int, pa.Schema]:
    """(partition count, Arrow schema) of the sink's topic, creating it when missing.

    A missing topic is created with ``schema``, ``partitions`` (else the
    cluster default) and ``replicationFactor`` (capped by the cluster at its
    node count). ``exist_ok`` makes concurrent first writes safe: whichever
    wins, the schema is then checked against the existing topic's.
    Raises SchemaMismatchError (showing both schemas) when the topic has another schema.
    """
    from raftlog.client import UnknownTopicError

    try:
        meta = client.describe_topic(opts.topic)
    except UnknownTopicError:
        meta = client.create_topic(
            opts.topic,
            partitions=opts.partitions,
            replication_factor=opts.replication_factor,
            schema=schema_to_bytes(schema),
            exist_ok=True,
        )
        get_logger().info(
            "raftlog sink: created topic %r with %d partitions", opts.topic, len(meta.partitions)
        )
    if meta.schema is None:
        # Created outside Spark (e.g. `raftlog topic create`): payloads are self-describing
        # Arrow streams, so writing is safe; readers learn the schema from the first record.
        get_logger().warning(
            "raftlog sink: topic %r has no stored Arrow schema; writing with the DataFrame's",
            opts.topic,
        )
        return len(meta.partitions), schema
    stored = schema_from_bytes(meta.schema)
    check_schema(opts.topic, stored, schema)
    return len(meta.partitions), stored


def topic_schema(client: Any, topic: str) -> pa.Schema:
    """The topic's Arrow schema: the stored one, else that of its first readable record.

    Raises UnknownTopicError for a missing topic, and ValueError when the
    topic has neither a stored schema nor any Arrow record to learn it from.
    """
    meta = client.describe_topic(topic)
    if meta.schema is not None:
        return schema_from_bytes(meta.schema)
    for part in meta.partitions:
        if part.last_stable_offset <= part.start_offset:
            continue
        fetched = client.fetch(topic, part.partition, part.start_offset, max_bytes=1)
        if fetched.batches:
            try:
                return decode_payload(fetched.batches[0].payload).schema
            except ValueError as exc:
                raise ValueError(
                    f"topic {topic!r} has no stored Arrow schema and its records are not Arrow "
                    f"IPC streams, so Spark cannot read it: {exc}"
                ) from None
    raise ValueError(
        f"topic {topic!r} has no stored Arrow schema and no records yet, so its columns are "
        "unknown; write to it from Spark first (the sink stores the schema)"
    )
