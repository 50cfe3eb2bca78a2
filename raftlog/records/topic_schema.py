"""A topic's stored Arrow schema, and what it asks of the payloads produced to the topic.

A topic may hold an Arrow schema in its metadata (the Spark sink stores the DataFrame's
when it creates a topic; ``CreateTopicRequest.schema``), as Arrow IPC schema bytes:

- a schema whose metadata marks raw records (``RECORDS_FORMAT_KEY``: ``records``) says
  the topic holds Kafka-style records (keyed or plain payloads), not columns;
- any other schema makes the topic *typed*: every payload is an Arrow IPC stream of
  exactly one record batch with the topic's columns, which is what the Spark source
  reads back. The node refuses any other payload on produce
  (:func:`raftlog.records.payload_check.check_payload`'s ``schema``), so no reader of a
  typed topic meets a batch it cannot decode.

Columns match by :func:`schema_shape`: names, order and types, where large and regular
string and binary, and a timestamp's time zone label, are one type (Spark's Arrow
batches use either; the topic keeps one), and nullability and metadata are not compared.
"""

from __future__ import annotations

import functools

import pyarrow as pa

__all__ = [
    "RECORDS_FORMAT_KEY",
    "is_records_schema",
    "schema_from_bytes",
    "schema_shape",
    "typed_schema",
]

RECORDS_FORMAT_KEY = b"raftlog.format"
"""The schema metadata key whose value ``records`` marks a raw-records topic."""


def schema_from_bytes(data: bytes) -> pa.Schema:
    """The Arrow schema serialized in ``data``; a ValueError naming the topic's schema and
    the expected form on bytes that are not one."""
    try:
        return pa.ipc.read_schema(pa.py_buffer(data))
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(
            f"topic metadata holds {len(data)} bytes that are not an Arrow schema (expected "
            f"an Arrow IPC schema message, as pyarrow's Schema.serialize() writes): {exc}"
        ) from None


def is_records_schema(schema: pa.Schema | None) -> bool:
    """Whether a topic's stored schema marks it as holding raw records."""
    return schema is not None and (schema.metadata or {}).get(RECORDS_FORMAT_KEY) == b"records"


def schema_shape(schema: pa.Schema) -> list[tuple[str, object]]:
    """What two schemas must share for one's data to be read as the other's (module doc)."""
    return [(f.name, _representation_free(f.type)) for f in schema]


def _representation_free(t: pa.DataType) -> object:
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return ("timestamp", t.unit, t.tz is not None)
    return t


@functools.lru_cache(maxsize=1024)
def typed_schema(data: bytes | None) -> pa.Schema | None:
    """The schema every payload of a topic storing ``data`` must have: None for a topic
    without a schema or with a raw-records one (its payloads are checked as records).
    Cached: a node asks on every produce. ValueError when ``data`` is not a schema."""
    if data is None:
        return None
    schema = schema_from_bytes(data)
    return None if is_records_schema(schema) else schema
