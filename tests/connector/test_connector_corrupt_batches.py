"""The connector's decoders check counts against bytes: a batch that cannot hold its
record count fails with its topic, partition and offsets named, never a MemoryError."""

from __future__ import annotations

import struct
import types

import pyarrow as pa
import pytest
from pyspark_raftlog.arrow_payload import encode_payload
from pyspark_raftlog.raw_records import decode_records
from pyspark_raftlog.source import _to_output

from raftlog.client import CorruptBatchError
from raftlog.records.payload_check import PayloadError

MAX_COUNT = 2**31 - 1
KEYED_12 = struct.pack("<4sII", b"\xffRK1", MAX_COUNT, 0)


def test_a_keyed_payload_claiming_two_billion_records_is_refused() -> None:
    with pytest.raises(PayloadError, match="does not fit a keyed payload of 12 bytes"):
        decode_records(KEYED_12, MAX_COUNT)


def test_an_opaque_payload_is_one_value_not_a_copy_per_record() -> None:
    """A 1 MiB opaque payload claiming 10,000 records: one copy, not 10 GB of them."""
    payload = b"\x80" * (1 << 20)
    d = decode_records(payload, 10_000)
    assert len(d.value) == 10_000 and d.value.null_count == 9_999
    assert d.value[0].as_py() == payload
    with pytest.raises(PayloadError, match="record_count 2147483647 does not fit"):
        decode_records(b"x", MAX_COUNT)


def _batch(payload: bytes, count: int) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        payload=payload,
        record_count=count,
        base_offset=40,
        last_offset=40 + count - 1,
        timestamp_ms=0,
    )


def test_the_source_fails_the_batch_naming_topic_partition_and_offsets() -> None:
    """Both reads (raw records, typed Arrow rows) fail before decoding anything sized by
    the count; the error names the batch (what Kafka's source does on corrupt data)."""
    unused = pa.schema([])  # the error comes before the output schema is used
    with pytest.raises(
        CorruptBatchError, match=r"offsets 40\.\.2147483686 of topic 'orders' partition 3"
    ):
        _to_output("orders", 3, _batch(KEYED_12, MAX_COUNT), 40, 50, None, unused)
    typed = pa.record_batch({"a": pa.array([1, 2, 3], pa.int64())})
    with pytest.raises(CorruptBatchError, match="holds 3 rows, the batch claims 5"):
        _to_output(
            "orders", 3, _batch(bytes(encode_payload(typed)), 5), 40, 45, typed.schema, unused
        )


def test_a_typed_batch_not_of_one_arrow_batch_of_the_topics_columns_fails_that_batch() -> None:
    """Batches a node stored before it checked typed topics' payloads: two Arrow batches,
    other columns, plain bytes. The source fails naming the batch, as for a corrupt one
    (a bare ValueError or a schema mismatch that reads as the writer's fault before)."""
    unused = pa.schema([])
    rows = pa.record_batch({"a": pa.array([1, 2], pa.int64())})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, rows.schema) as writer:
        writer.write_batch(rows)
        writer.write_batch(rows)
    two = sink.getvalue().to_pybytes()
    other = bytes(encode_payload(pa.record_batch({"a": pa.array(["x", "y"])})))
    for payload, count, why in [
        (two, 4, "holds 2 Arrow record batches; expected exactly 1"),
        (other, 2, "schema does not match"),
        (b"hello", 1, "not an Arrow IPC stream"),
    ]:
        with pytest.raises(CorruptBatchError, match=r"offsets 40\.\.") as caught:
            _to_output("orders", 3, _batch(payload, count), 40, 40 + count, rows.schema, unused)
        assert "topic 'orders' partition 3" in str(caught.value) and why in str(caught.value)


def test_an_arrow_payload_compressing_its_body_is_refused_before_it_is_read() -> None:
    """Arrow IPC buffer compression declares each buffer's decompressed size: reading
    one is a bomb no codec cap sees, so the decoder refuses it from its metadata."""
    from pyspark_raftlog.arrow_payload import decode_payload

    batch = pa.record_batch({"a": pa.array(range(1000))})
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.ipc.new_stream(sink, batch.schema, options=options) as writer:
        writer.write_batch(batch)
    with pytest.raises(ValueError, match="compresses its body"):
        decode_payload(sink.getvalue().to_pybytes())
