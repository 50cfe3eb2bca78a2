"""Arrow payload chunking, decoding and schema handling."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark_raftlog.arrow_payload import (
    RowChunker,
    check_schema,
    chunk_record_batch,
    decode_payload,
    schema_from_bytes,
    schema_to_bytes,
)
from pyspark_raftlog.errors import SchemaMismatchError


def make_batch(n: int, text_len: int = 20) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "id": pa.array(range(n), pa.int64()),
            "text": pa.array([f"{i:0{text_len}d}" for i in range(n)], pa.string()),
        }
    )


def test_small_batch_is_one_payload() -> None:
    batch = make_batch(10)
    chunks = list(chunk_record_batch(batch, 1 << 20))
    assert [rows for _, rows in chunks] == [10]
    assert decode_payload(chunks[0][0]).equals(batch)


def test_large_batch_is_cut_under_the_limit_and_reassembles() -> None:
    batch = make_batch(20_000, text_len=40)
    limit = 64 * 1024
    chunks = list(chunk_record_batch(batch, limit))
    assert len(chunks) > 5
    assert all(len(p) <= limit for p, _ in chunks)
    decoded = [decode_payload(p) for p, _ in chunks]
    assert [d.num_rows for d in decoded] == [rows for _, rows in chunks]
    assert pa.Table.from_batches(decoded).equals(pa.Table.from_batches([batch]))


def test_row_bigger_than_chunk_travels_alone() -> None:
    batch = pa.record_batch({"blob": pa.array([b"x" * 5000, b"y", b"z" * 5000], pa.binary())})
    chunks = list(chunk_record_batch(batch, 2048))
    assert [rows for _, rows in chunks] == [1, 1, 1]
    assert [decode_payload(p)["blob"][0].as_py()[:1] for p, _ in chunks] == [b"x", b"y", b"z"]


def test_empty_batch_yields_nothing() -> None:
    assert list(chunk_record_batch(make_batch(0), 4096)) == []


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 3000), limit=st.integers(1024, 40_000))
def test_chunking_preserves_rows_in_order(n: int, limit: int) -> None:
    batch = make_batch(n)
    chunks = list(chunk_record_batch(batch, limit))
    ids = [i for p, _ in chunks for i in decode_payload(p)["id"].to_pylist()]
    assert ids == list(range(n))


def _chunk_stream(sizes: list[int], limit: int, text_len: int = 20) -> list[tuple[bytes, int]]:
    """Batches of ``sizes`` rows (ids counting on across them) through one RowChunker."""
    chunker, chunks, first = RowChunker(limit), [], 0
    for n in sizes:
        batch = make_batch(n + first, text_len).slice(first, n)
        chunks.extend(chunker.add(batch))
        first += n
    chunks.extend(chunker.flush())
    return chunks


def test_row_chunker_joins_spark_sized_batches_into_full_payloads() -> None:
    """Spark's 10,000-row batches of ~1.2 MB each, cut one by one against 1 MiB, gave a
    1 MiB payload and a small one per batch; joined, every payload but the last is
    full and all the rows arrive once, in order."""
    limit = 1 << 20
    sizes = [10_000] * 6
    chunks = _chunk_stream(sizes, limit, text_len=100)
    separately = [c for n in sizes for c in chunk_record_batch(make_batch(n, 100), limit)]
    assert len(separately) == 2 * len(sizes)  # the shape this fixes
    assert len(chunks) == 7, [len(p) for p, _ in chunks]
    assert all(len(p) <= limit for p, _ in chunks)
    assert all(len(p) > limit * 0.85 for p, _ in chunks[:-1]), [len(p) for p, _ in chunks]
    ids = [i for p, _ in chunks for i in decode_payload(p)["id"].to_pylist()]
    assert ids == list(range(sum(sizes)))
    assert sum(rows for _, rows in chunks) == sum(sizes)


@settings(max_examples=25, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 1500), min_size=1, max_size=8),
    limit=st.integers(1024, 40_000),
)
def test_row_chunker_keeps_every_row_once_in_order(sizes: list[int], limit: int) -> None:
    chunks = _chunk_stream(sizes, limit)
    ids = [i for p, _ in chunks for i in decode_payload(p)["id"].to_pylist()]
    assert ids == list(range(sum(sizes)))
    assert [rows for _, rows in chunks] == [decode_payload(p).num_rows for p, _ in chunks]
    assert all(rows == 1 or len(p) <= limit for p, rows in chunks)


def test_decode_rejects_garbage_and_multi_batch() -> None:
    with pytest.raises(ValueError, match=r"record payload of 5 bytes is not an Arrow IPC stream"):
        decode_payload(b"hello")
    batch = make_batch(2)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
        w.write_batch(batch)
    with pytest.raises(ValueError, match=r"holds 2 Arrow record batches; expected exactly 1"):
        decode_payload(sink.getvalue().to_pybytes())


def test_schema_round_trip() -> None:
    schema = pa.schema([("a", pa.int32()), ("ts", pa.timestamp("us", tz="UTC"))])
    assert schema_from_bytes(schema_to_bytes(schema)).equals(schema)
    with pytest.raises(ValueError, match=r"not an Arrow schema"):
        schema_from_bytes(b"\x00\x01")


def test_schema_mismatch_shows_both() -> None:
    topic = pa.schema([("id", pa.int64()), ("text", pa.string())])
    df = pa.schema([("id", pa.int32()), ("text", pa.string())])
    with pytest.raises(SchemaMismatchError) as err:
        check_schema("events", topic, df)
    text = str(err.value)
    assert "topic 'events'" in text
    assert "topic schema:\n  id: int64\n  text: string" in text
    assert "DataFrame schema:\n  id: int32\n  text: string" in text


def test_schema_check_ignores_nullability() -> None:
    a = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    b = pa.schema([pa.field("id", pa.int64(), nullable=True)])
    check_schema("events", a, b)  # does not raise


def test_conform_bridges_representation_only() -> None:
    from pyspark_raftlog.arrow_payload import conform_batch

    target = pa.schema([("s", pa.string()), ("ts", pa.timestamp("us", tz="UTC"))])
    batch = pa.record_batch(
        {
            "s": pa.array(["a", "b"], pa.large_string()),
            "ts": pa.array([1, 2], pa.timestamp("us", tz="Europe/Paris")),
        }
    )
    out = conform_batch("events", batch, target)
    assert out.schema.equals(target)
    assert out["s"].to_pylist() == ["a", "b"]
    assert out["ts"].cast(pa.int64()).to_pylist() == [1, 2]  # same instants
    wrong = pa.record_batch({"s": pa.array([1], pa.int64()), "ts": batch["ts"].slice(0, 1)})
    with pytest.raises(SchemaMismatchError, match=r"DataFrame schema:\n  s: int64"):
        conform_batch("events", wrong, target)
