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
    IntegerType,
    LongType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark_raftlog.errors import SchemaMismatchError

__all__ = [
    "OFFSET_COLUMN",
    "PARTITION_COLUMN",
    "TIMESTAMP_COLUMN",
    "arrow_schema_of",
    "read_schema",
]

PARTITION_COLUMN = "__raftlog_partition"
OFFSET_COLUMN = "__raftlog_offset"
TIMESTAMP_COLUMN = "__raftlog_timestamp"  # the leader's append time of the record's batch

METADATA_FIELDS = (
    StructField(PARTITION_COLUMN, IntegerType(), nullable=False),
    StructField(OFFSET_COLUMN, LongType(), nullable=False),
    StructField(TIMESTAMP_COLUMN, TimestampType(), nullable=False),
)


def arrow_schema_of(schema: StructType) -> pa.Schema:
    """The canonical Arrow schema of a Spark schema (regular types, UTC timestamps)."""
    return to_arrow_schema(schema, timezone="UTC")


def read_schema(topic: str, topic_schema: pa.Schema) -> StructType:
    """The DataFrame schema of a read: the topic's columns, then the metadata columns."""
    names = set(topic_schema.names)
    clash = [f.name for f in METADATA_FIELDS if f.name in names]
    if clash:
        raise SchemaMismatchError(
            f"topic {topic!r} has column(s) {clash}, which collide with the metadata columns "
            f"the raftlog source adds ({', '.join(f.name for f in METADATA_FIELDS)})"
        )
    user = from_arrow_schema(topic_schema, prefer_timestamp_ntz=True)
    return StructType([*user.fields, *METADATA_FIELDS])
