"""Arrow IPC payloads: how Spark data is laid out inside raftlog record batches.

Every record batch the connector writes carries one Arrow IPC *stream*: the
schema, then exactly one Arrow record batch. That keeps each log entry
self-describing (a reader can decode any single entry without context) and
lets ``read()`` hand stored columns to Spark without a row-by-row path.

* :func:`chunk_record_batch` cuts a (possibly large) Arrow batch from Spark into
  payloads of at most ``chunk_bytes`` each. Rows are never split; a single row
  larger than ``chunk_bytes`` travels alone in an oversized payload, and one
  larger than the engine's hard limit (64 MiB) is an error.
* :class:`RowChunker` does the same for a stream of batches, whose rows it joins
  across batch boundaries: Spark hands the writer 10,000-row Arrow batches
  (``spark.sql.execution.arrow.maxRecordsPerBatch``), about 1.2 MB of 100-byte
  rows, and cut one by one each became a full payload and a small one.
* :func:`decode_payload` turns a payload back into its Arrow record batch.
* :func:`schema_to_bytes` / :func:`schema_from_bytes` (de)serialize the topic's
  Arrow schema for the topic metadata (the latter is
  :func:`raftlog.records.topic_schema.schema_from_bytes`, which the node uses too).
* :func:`check_schema` raises :class:`SchemaMismatchError` showing both schemas.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark_raftlog.errors import SchemaMismatchError
from pyspark_raftlog.options import MAX_CHUNK_BYTES

from raftlog.records.payload_check import PayloadError, arrow_rows
from raftlog.records.topic_schema import schema_from_bytes, schema_shape

__all__ = [
    "Chunk",
    "RowChunker",
    "check_schema",
    "chunk_record_batch",
    "conform_batch",
    "decode_payload",
    "encode_payload",
    "schema_from_bytes",
    "schema_to_bytes",
]

Chunk = tuple[bytes | memoryview, int]
"""(IPC stream payload, number of rows) -- the (payload, record_count) the client produces."""


def encode_payload(batch: pa.RecordBatch) -> memoryview:
    """One IPC stream holding ``batch``'s schema and the batch itself, as a read-only
    view of Arrow's buffer: the client sends it as it is, with no copy in Python.

    A sliced batch is written with only its slice of the buffers (Arrow's IPC
    writer truncates them), so slicing then encoding is how chunks are cut.
    """
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return memoryview(sink.getvalue()).toreadonly()


def decode_payload(payload: bytes) -> pa.RecordBatch:
    """The single record batch inside a payload written by :func:`encode_payload`.

    Raises ValueError naming the problem when the payload is not one IPC stream
    with exactly one batch (e.g. data written to the topic by a non-Spark producer),
    or compresses its body: its buffers would be decompressed to the sizes they
    declare, unbounded (:func:`raftlog.records.payload_check.arrow_rows`).
    """
    try:
        arrow_rows(payload)  # reads message metadata only, before any body is read
        reader = pa.ipc.open_stream(payload)
        batches = list(reader)
    except (pa.ArrowException, PayloadError) as exc:
        raise ValueError(
            f"record payload of {len(payload)} bytes is not an Arrow IPC stream: {exc}"
        ) from None
    if len(batches) != 1:
        raise ValueError(
            f"record payload holds {len(batches)} Arrow record batches; expected exactly 1"
        )
    return batches[0]


def chunk_record_batch(batch: pa.RecordBatch, chunk_bytes: int) -> Iterator[Chunk]:
    """Cut ``batch`` into payloads of at most ``chunk_bytes`` bytes (rows never split).

    Yields (payload, rows) in row order; the rows of all chunks add up to
    ``batch.num_rows``. An empty batch yields nothing.
    """
    if chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
    if batch.num_rows == 0:
        return
    whole = encode_payload(batch)
    if len(whole) <= chunk_bytes:
        yield whole, batch.num_rows
        return
    # First guess at rows per chunk from the average row size, leaving room for the
    # schema message; a guess that comes out too big is halved until it fits.
    overhead = len(encode_payload(batch.slice(0, 0)))
    per_row = max(1.0, (len(whole) - overhead) / batch.num_rows)
    rows = max(1, int((chunk_bytes - overhead) / per_row))
    start = 0
    while start < batch.num_rows:
        n = min(rows, batch.num_rows - start)
        payload = encode_payload(batch.slice(start, n))
        while len(payload) > chunk_bytes and n > 1:
            n = max(1, n // 2)
            payload = encode_payload(batch.slice(start, n))
        if len(payload) > MAX_CHUNK_BYTES:
            raise ValueError(
                f"row {start} alone encodes to {len(payload)} bytes, more than the "
                f"{MAX_CHUNK_BYTES}-byte limit of one raftlog record batch"
            )
        yield payload, n
        start += n


class RowChunker:
    """Arrow IPC payloads of about ``chunk_bytes`` from a stream of record batches of one
    schema (:class:`pyspark_raftlog.raw_records.RecordChunker` is its twin for
    Kafka-style records).

    Contract: the chunks of :meth:`add` and :meth:`flush` hold every row added, once,
    in order; a chunk is at most ``chunk_bytes`` (except a row larger than that,
    alone) and, but for the last, close to it: rows left over at the end of a batch
    wait for the next one's. Sizes are estimated from a batch's bytes in memory and
    checked on the encoded payload by :func:`chunk_record_batch`.
    """

    # Leave room for the IPC framing (schema message, padding) around the rows.
    _FILL = 0.95

    def __init__(self, chunk_bytes: int) -> None:
        if chunk_bytes < 1:
            raise ValueError(f"chunk_bytes must be >= 1, got {chunk_bytes}")
        self._chunk_bytes = chunk_bytes
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0

    def add(self, batch: pa.RecordBatch) -> Iterator[Chunk]:
        """The payloads that ``batch``'s rows complete (none while they fit in one)."""
        if batch.num_rows == 0:
            return
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes
        if self._pending_bytes < self._chunk_bytes * self._FILL:
            return
        total = self._pending_bytes
        joined = self._take()
        per_row = max(1.0, total / joined.num_rows)
        rows = max(1, int(self._chunk_bytes * self._FILL / per_row))
        whole = (joined.num_rows // rows) * rows
        for start in range(0, whole, rows):
            yield from chunk_record_batch(joined.slice(start, rows), self._chunk_bytes)
        if whole < joined.num_rows:
            rest = joined.slice(whole)
            self._pending, self._pending_bytes = [rest], rest.nbytes

    @property
    def waiting(self) -> bool:
        """Rows were added that no payload holds yet."""
        return bool(self._pending)

    def flush(self) -> Iterator[Chunk]:
        """The payloads of the rows still waiting; the chunker is empty after (and
        takes more rows)."""
        if self._pending:
            yield from chunk_record_batch(self._take(), self._chunk_bytes)

    def _take(self) -> pa.RecordBatch:
        pending, self._pending, self._pending_bytes = self._pending, [], 0
        return pending[0] if len(pending) == 1 else pa.concat_batches(pending)


def schema_to_bytes(schema: pa.Schema) -> bytes:
    """The schema as Arrow IPC bytes, for the topic's metadata."""
    return schema.serialize().to_pybytes()


def check_schema(topic: str, expected: pa.Schema, actual: pa.Schema) -> None:
    """Raise :class:`SchemaMismatchError` unless the two schemas have the same fields.

    Field names, order and types must match; nullability and metadata are not
    compared (Spark marks columns nullable by its own analysis, which may
    differ between two DataFrames with the same data), nor representation
    (large vs regular string/binary, a timestamp's time zone label).
    """
    if schema_shape(expected) == schema_shape(actual):
        return
    raise SchemaMismatchError(
        f"the DataFrame's schema does not match the schema of topic {topic!r}.\n"
        f"topic schema:\n{_show(expected)}\n"
        f"DataFrame schema:\n{_show(actual)}\n"
        "write to a new topic, or select/cast the columns to the topic's schema"
    )


def conform_batch(topic: str, batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` with exactly the ``target`` schema, or :class:`SchemaMismatchError`.

    Only representation differences are bridged (large vs regular string and
    binary, a timestamp's time zone label, nullability flags); anything else,
    e.g. int32 vs int64, is a mismatch. Spark's Arrow batches may use large types
    or the session's time zone, while the topic keeps one canonical schema.
    """
    if batch.schema.equals(target):
        return batch
    check_schema(topic, target, batch.schema)
    columns = [
        col if col.type == field.type else col.cast(field.type)
        for col, field in zip(batch.columns, target, strict=True)
    ]
    return pa.RecordBatch.from_arrays(columns, schema=target)


def _show(schema: pa.Schema) -> str:
    return "\n".join(f"  {f.name}: {f.type}" for f in schema) or "  (no columns)"
