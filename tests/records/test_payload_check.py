"""The batch check a node makes on produce (raftlog.records.payload_check) and the bounds
the CLI's decoder keeps: the probes of issue 44 and a fuzz of mutated valid batches."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark_raftlog.raw_records import decode_records

from raftlog.cli import _records
from raftlog.records.compression import compress
from raftlog.records.framing import Record, frame_keyed, frame_records, unframe_keyed
from raftlog.records.payload_check import PayloadError, check_payload
from raftlog.storage.batch import MAX_PAYLOAD_BYTES, Compression

MAX_COUNT = 2**31 - 1
KEYED_12 = struct.pack("<4sII", b"\xffRK1", MAX_COUNT, 0)  # keyed head, no sections


def test_seven_bytes_of_garbage_marked_lz4_are_refused() -> None:
    with pytest.raises(PayloadError, match="lz4 payload is corrupt"):
        check_payload(bytes(range(7)), 1, Compression.LZ4)


def test_a_count_its_bytes_cannot_hold_is_refused() -> None:
    with pytest.raises(PayloadError, match=r"record_count 2147483647 does not fit .* 1 bytes"):
        check_payload(b"x", MAX_COUNT)
    with pytest.raises(PayloadError, match="keyed payload of 12 bytes"):
        check_payload(KEYED_12, MAX_COUNT)


def test_the_cli_decoder_refuses_a_keyed_count_without_allocating() -> None:
    """12 bytes claiming 2**31-1 records: a clear error, not MemoryError (the CLI sized a
    tuple of 2**31 entries from the count)."""
    assert unframe_keyed(KEYED_12, MAX_COUNT) is None
    with pytest.raises(PayloadError, match="each record needs at least 4 bytes"):
        _records(KEYED_12, MAX_COUNT)


@pytest.mark.parametrize(
    ("keyed", "cut"),
    [(True, 1), (True, -1), (False, 0)],
    ids=["keyed-trailing-byte", "keyed-truncated", "keyed-count-mismatch"],
)
def test_broken_keyed_framing_is_refused(keyed: bool, cut: int) -> None:
    records = [Record(b"v%d" % i, b"k", (("h", b"x"),), 5) for i in range(3)]
    payload = frame_keyed(records)
    if cut > 0:
        payload += b"\0"
    elif cut < 0:
        payload = payload[:-1]
    count = 3 if keyed else 2
    with pytest.raises(PayloadError, match="keyed payload"):
        check_payload(payload, count)


def test_arrow_payload_rows_must_match_and_ipc_body_compression_is_refused() -> None:
    batch = pa.record_batch({"a": pa.array(range(10)), "s": pa.array(["x"] * 10)})

    def ipc(**options: object) -> bytes:
        sink = pa.BufferOutputStream()
        opts = pa.ipc.IpcWriteOptions(**options)
        with pa.ipc.new_stream(sink, batch.schema, options=opts) as w:
            w.write_batch(batch)
        return sink.getvalue().to_pybytes()

    assert len(check_payload(ipc(), 10)) == len(ipc())
    with pytest.raises(PayloadError, match="holds 10 rows, the batch claims 11"):
        check_payload(ipc(), 11)
    with pytest.raises(PayloadError, match="compresses its body"):
        check_payload(ipc(compression="zstd"), 10)


def _stream(*batches: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batches[0].schema) as w:
        for b in batches:
            w.write_batch(b)
    return sink.getvalue().to_pybytes()


def test_a_typed_topics_payload_is_one_arrow_batch_with_its_columns() -> None:
    """The probes of a hostile client on a Spark-typed topic: two record batches, other
    columns, a keyed or plain payload. Each was stored, and then failed every Spark
    reader of the topic; now each is refused naming what the topic expects."""
    topic = pa.schema([("s", pa.string()), ("n", pa.int64())])
    rows = pa.record_batch({"s": pa.array(["a", "b"]), "n": pa.array([1, 2])})
    assert len(check_payload(_stream(rows), 2, schema=topic)) == len(_stream(rows))
    # Spark's Arrow batches may use large strings and other nullability: the same columns
    large = pa.record_batch(
        [pa.array(["a", "b"], pa.large_string()), pa.array([1, 2])],
        schema=pa.schema([pa.field("s", pa.large_string()), pa.field("n", pa.int64(), False)]),
    )
    check_payload(_stream(large), 2, schema=topic)
    with pytest.raises(PayloadError, match="holds 2 record batches; a typed topic's payload"):
        check_payload(_stream(rows, rows), 4, schema=topic)
    other = pa.record_batch({"s": pa.array([1, 2]), "n": pa.array([1, 2])})
    with pytest.raises(PayloadError, match=r"expected \(s: string, n: int64\), got \(s: int64"):
        check_payload(_stream(other), 2, schema=topic)
    with pytest.raises(PayloadError, match="this is a plain payload"):
        check_payload(b"hello", 1, schema=topic)
    with pytest.raises(PayloadError, match="this is a keyed payload"):
        check_payload(frame_keyed([Record(b"v")]), 1, schema=topic)
    # an untyped topic (or a raw-records one) takes any of them
    check_payload(_stream(rows, rows), 4)
    check_payload(b"hello", 1)


_BOMB_SCRIPT = textwrap.dedent(
    """
    import json, resource, sys
    import lz4.frame, zstandard
    from raftlog.records.payload_check import PayloadError, check_payload
    GIB, MIB = 1 << 30, 1 << 20
    codec = sys.argv[1]
    zeros = bytes(MIB)
    if codec == "zstd":
        c = zstandard.ZstdCompressor().compressobj()
        bomb = b"".join(c.compress(zeros) for _ in range(GIB // MIB)) + c.flush()
        # and one that declares its 1 GiB up front
        declared = zstandard.ZstdCompressor().compressobj(size=GIB)
        bombs = [bomb, b"".join(declared.compress(zeros) for _ in range(GIB // MIB))
                 + declared.flush()]
        code = 4
    else:
        c = lz4.frame.LZ4FrameCompressor()
        bomb = c.begin() + b"".join(c.compress(zeros) for _ in range(GIB // MIB)) + c.flush()
        bombs, code = [bomb], 3
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    errors = []
    for b in bombs:
        try:
            check_payload(b, 1, code)
        except PayloadError as exc:
            errors.append(str(exc))
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
    print(json.dumps({"errors": errors, "grown": grown, "sizes": [len(b) for b in bombs]}))
    """
)


@pytest.mark.parametrize("codec", ["zstd", "lz4"])
def test_a_decompression_bomb_is_refused_within_the_cap(codec: str) -> None:
    """1 GiB of zeros in a few MB: refused, the process's peak memory growing by no more
    than the 64 MiB cap and slack (zstd's one-shot decode allocated the declared 1 GiB)."""
    out = subprocess.run(
        [sys.executable, "-c", _BOMB_SCRIPT, codec],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout)
    assert all(size < 8 * 1024 * 1024 for size in result["sizes"])
    assert len(result["errors"]) == len(result["sizes"])
    assert all("limit of 67108864 bytes" in e for e in result["errors"]), result
    assert result["grown"] < MAX_PAYLOAD_BYTES + 48 * 1024 * 1024, result


# -- fuzz: mutated valid batches are accepted and decode exactly, or refused clearly ---


def _valid(kind: str, n: int) -> bytes:
    if kind == "keyed":
        return frame_keyed(
            [
                Record(b"v" * i, b"k%d" % i if i % 2 else None, (("h", b"x"),) * (i % 3), i)
                for i in range(n)
            ]
        )
    if kind == "plain":
        return frame_records([b"r" * i for i in range(n)])
    batch = pa.record_batch({"a": pa.array(range(n)), "s": pa.array(["s" * i for i in range(n)])})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


@settings(max_examples=int(os.environ.get("RAFTLOG_FUZZ_EXAMPLES", "400")), deadline=None)
@given(
    kind=st.sampled_from(["keyed", "plain", "arrow"]),
    n=st.integers(1, 6),
    codec=st.sampled_from([Compression.NONE, Compression.LZ4, Compression.ZSTD]),
    mutations=st.lists(
        st.tuples(st.sampled_from(["flip", "cut", "insert", "count"]), st.integers(0, 10**6)),
        max_size=3,
    ),
)
def test_mutated_batches_are_accepted_and_decode_or_refused_clearly(
    kind: str, n: int, codec: Compression, mutations: list[tuple[str, int]]
) -> None:
    payload = bytearray(compress(codec, _valid(kind, n)))
    count = n
    for op, at in mutations:
        pos = at % (len(payload) + 1)
        if op == "flip" and payload:
            payload[pos % len(payload)] ^= 1 << (at % 8)
        elif op == "cut":
            del payload[pos:]
        elif op == "insert":
            payload[pos:pos] = bytes([at % 256])
        else:
            count = [1, n + 1, max(1, n - 1), MAX_COUNT, at or 1][at % 5]
    try:
        data = check_payload(bytes(payload), count, codec)
    except PayloadError as exc:
        assert str(exc)
        return
    # accepted: every reader decodes it, the CLI with exactly its records (one for an
    # opaque payload), the connector with one row per record
    records = _records(bytes(data), count)
    if bytes(data[:4]) in (b"\xffRK1", b"\xff\xff\xff\xff"):
        assert len(records) == count
    else:
        assert len(records) in (1, count)
    assert len(decode_records(bytes(data), count).value) == count
