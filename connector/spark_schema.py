"""Spark schema <-> the topic's Arrow schema, and the source's metadata columns.

A topic keeps the canonical Arrow schema of its data: the one
``to_arrow_schema(spark_schema, timezone="UTC")`` gives, which is also the
schema Spark's reader checks each returned Arrow batch against. A read adds
three metadata columns, prefixed with ``__raftlog_`` so that they cannot
collide with user columns (a topic whose schema already uses one is refused).
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark_raftlog.errors import SchemaMismatchError

__all__ = [
    "KAFKA_READ_FIELDS",
    "OFFSET_COLUMN",
    "PARTITION_COLUMN",
    "TIMESTAMP_COLUMN",
    "TOPIC_COLUMN",
    "arrow_schema_of",
    "read_schema",
]

TOPIC_COLUMN = "__raftlog_topic"
PARTITION_COLUMN = "__raftlog_partition"
OFFSET_COLUMN = "__raftlog_offset"
# the record's own timestamp where it was written with one, else its batch's append time
TIMESTAMP_COLUMN = "__raftlog_timestamp"

METADATA_FIELDS = (
    StructField(TOPIC_COLUMN, StringType(), nullable=False),
    StructField(PARTITION_COLUMN, IntegerType(), nullable=False),
    StructField(OFFSET_COLUMN, LongType(), nullable=False),
    StructField(TIMESTAMP_COLUMN, TimestampType(), nullable=False),
)


# Kafka's source schema: what a topic of raw records reads as (before the metadata columns).
KAFKA_READ_FIELDS = (
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
    StructField(
        "headers",
        ArrayType(
            StructType([StructField("key", StringType()), StructField("value", BinaryType())])
        ),
    ),
)
KAFKA_READ_NAMES = tuple(f.name for f in KAFKA_READ_FIELDS)


def is_raw_read(schema: StructType) -> bool:
    """Whether a read's schema is the raw-records one (Kafka's columns + metadata)."""
    names = tuple(schema.fieldNames())
    return names == KAFKA_READ_NAMES + tuple(f.name for f in METADATA_FIELDS)


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The canonical Arrow schema of a Spark schema (regular types, UTC timestamps)."""
    return to_arrow_schema(schema, timezone="UTC")


def read_schema(topic: str, topic_schema: pa.Schema | None) -> StructType:
    """The DataFrame schema of a read: the topic's columns, then the metadata columns.

    ``topic_schema`` None (raw records): Kafka's source schema, then the metadata.
    """
    if topic_schema is None:
        return StructType([*KAFKA_READ_FIELDS, *METADATA_FIELDS])
    if tuple(topic_schema.names) == KAFKA_READ_NAMES:
        raise SchemaMismatchError(
            f"topic {topic!r} holds typed columns named exactly as Kafka's source schema "
            f"({', '.join(KAFKA_READ_NAMES)}), which a read could not tell from raw records"
        )
    names = set(topic_schema.names)
    clash = [f.name for f in METADATA_FIELDS if f.name in names]
    if clash:
        raise SchemaMismatchError(
            f"topic {topic!r} has column(s) {clash}, which collide with the metadata columns "
            f"the raftlog source adds ({', '.join(f.name for f in METADATA_FIELDS)})"
        )
    user = from_arrow_schema(topic_schema, prefer_timestamp_ntz=True)
    return StructType([*user.fields, *METADATA_FIELDS])


def check_kafka_columns(schema: pa.Schema, *, raw: bool) -> None:
    """Raise SchemaMismatchError unless Kafka's columns present have Kafka's types.

    ``topic``: string; ``partition``: an integer; ``key`` (and, for raw
    records, ``value``): binary or string; ``headers``: array of struct
    (key string, value binary); ``timestamp`` (raw records): a timestamp.
    """
    wanted = {
        "topic": ("string", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
        "partition": ("an integer type", pa.types.is_integer),
        "key": ("binary or string", _is_bytes),
        "headers": ("array<struct<key: string, value: binary>>", _is_headers),
    }
    if raw:
        wanted["value"] = ("binary or string", _is_bytes)
        wanted["timestamp"] = ("timestamp", pa.types.is_timestamp)
    for field in schema:
        if field.name in wanted and not wanted[field.name][1](field.type):
            raise SchemaMismatchError(
                f"column '{field.name}' must be {wanted[field.name][0]} (Kafka's column of that "
                f"name); got {field.type}"
            )


def raw_types(schema: pa.Schema) -> bool:
    """Whether Kafka's columns of ``schema`` have the types of raw records: ``value``
    binary or string, ``timestamp`` (if any) a timestamp."""
    names = schema.names
    if "value" not in names or not _is_bytes(schema.field("value").type):
        return False
    return "timestamp" not in names or pa.types.is_timestamp(schema.field("timestamp").type)


def _is_bytes(t: pa.DataType) -> bool:
    return any(
        f(t)
        for f in (
            pa.types.is_binary,
            pa.types.is_large_binary,
            pa.types.is_string,
            pa.types.is_large_string,
        )
    )


def _is_headers(t: pa.DataType) -> bool:
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    s = t.value_type
    return (
        pa.types.is_struct(s)
        and [f.name for f in s] == ["key", "value"]
        and (pa.types.is_string(s[0].type) or pa.types.is_large_string(s[0].type))
        and (pa.types.is_binary(s[1].type) or pa.types.is_large_binary(s[1].type))
    )
