"""Porting from format("kafka") (issue 18), without Spark or a cluster: Kafka's partitioner,
raw-record framing, Kafka's option names, the write layout and multi-topic offsets."""

from __future__ import annotations

import random
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest
from pyspark_raftlog.offsets import (
    OffsetDocumentError,
    format_topic_offsets,
    parse_topic_offsets,
    resolve_topic_spec,
)
from pyspark_raftlog.options import (
    OptionError,
    check_write_columns,
    parse_sink_options,
    parse_source_options,
)
from pyspark_raftlog.raw_records import (
    HEADERS_TYPE,
    RecordChunker,
    decode_records,
)
from pyspark_raftlog.routing import key_bytes, murmur2, murmur2_many, partitions_of

from raftlog.client.partitioner import murmur2 as client_murmur2
from raftlog.records.framing import Record, frame_keyed, frame_records, unframe_any

# Kafka's own test vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java)
KAFKA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize(("data", "want"), KAFKA_VECTORS.items())
def test_murmur2_matches_kafka(data: bytes, want: int) -> None:
    assert murmur2(data) == want
    assert client_murmur2(data) == want
    assert murmur2_many(pa.array([data])).tolist() == [want]


def test_vectorized_murmur2_equals_the_reference_on_a_sliced_array() -> None:
    rng = random.Random(7)
    values = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40))) for _ in range(300)]
    arr = pa.array(values, pa.binary()).slice(5)
    assert murmur2_many(arr).tolist() == [murmur2(v) for v in values[5:]]
    # a string key hashes its UTF-8 bytes, as Kafka's StringSerializer writes them
    assert murmur2_many(pa.array(["é1"])).tolist() == [murmur2("é1".encode())]


def test_key_bytes_single_and_several_columns() -> None:
    ints = pa.array([1, None], pa.int64())
    assert key_bytes([ints]).to_pylist() == [b"\x00" * 7 + b"\x01", None]
    assert key_bytes([pa.array([5], pa.int32())]).to_pylist() == [b"\x00\x00\x00\x05"]
    two = key_bytes([pa.array(["a", "ab"]), pa.array(["bc", "c"])]).to_pylist()
    assert two[0] != two[1]  # ("a", "bc") and ("ab", "c") differ
    assert two[0] == b"\x00\x00\x00\x01a\x00\x00\x00\x02bc"


def test_partitions_of_follows_partition_then_hash_then_default() -> None:
    n = np.array([4, 4, 4, 4])
    keys = pa.array([b"k", None, b"k", b"z"])
    out = partitions_of(
        n,
        explicit=pa.array([None, None, 3, None], pa.int32()),
        hashed_bytes=keys,
        hash_null_means_default=True,
        default=6,
    )
    k = (murmur2(b"k") & 0x7FFFFFFF) % 4
    z = (murmur2(b"z") & 0x7FFFFFFF) % 4
    assert out.tolist() == [k, 6 % 4, 3, z]
    with pytest.raises(ValueError, match=r"column 'partition' of row 0 is 4.*4 partitions"):
        partitions_of(
            n[:1],
            explicit=pa.array([4]),
            hashed_bytes=None,
            hash_null_means_default=False,
            default=0,
        )


def _kafka_batch() -> pa.RecordBatch:
    return pa.record_batch(
        {
            "key": pa.array([b"k1", None, b"k3"]),
            "value": pa.array(["v1", "", None]),
            "headers": pa.array(
                [[{"key": "h", "value": b"x"}], None, [{"key": "a", "value": None}]],
                HEADERS_TYPE,
            ),
            "timestamp": pa.array(
                [datetime(2024, 1, 1, tzinfo=UTC)] * 3, pa.timestamp("us", tz="UTC")
            ),
        }
    )


def _chunks(batch: pa.RecordBatch, chunk_bytes: int) -> list:
    chunker = RecordChunker(chunk_bytes)
    return [*chunker.add(batch), *chunker.flush()]


def test_raw_records_round_trip_and_read_by_the_cli_framing() -> None:
    ((payload, rows),) = _chunks(_kafka_batch(), 1 << 20)
    assert rows == 3
    d = decode_records(payload, 3)
    assert d.key.to_pylist() == [b"k1", None, b"k3"]
    assert d.value.to_pylist() == [b"v1", b"", None]
    assert d.timestamp_ms.tolist() == [1704067200000] * 3
    assert d.headers.to_pylist() == [
        [{"key": "h", "value": b"x"}],
        [],
        [{"key": "a", "value": None}],
    ]
    # the CLI's own parser reads the same payload (it is the CLI's framing)
    assert unframe_any(payload, 3) == [
        Record(b"v1", b"k1", (("h", b"x"),), 1704067200000),
        Record(b"", None, (), 1704067200000),
        Record(None, b"k3", (("a", None),), 1704067200000),
    ]


def test_cli_payloads_decode_as_kafka_columns() -> None:
    keyed = frame_keyed([Record(b"v", b"k", (("h", b"1"),)), Record(b"w")])
    d = decode_records(keyed, 2)
    assert (d.key.to_pylist(), d.value.to_pylist(), d.timestamp_ms) == (
        [b"k", None],
        [b"v", b"w"],
        None,
    )
    plain = decode_records(frame_records([b"a", b"bc"]), 2)
    assert plain.value.to_pylist() == [b"a", b"bc"] and plain.key.null_count == 2
    opaque = decode_records(b"\x00not framed", 1)
    assert opaque.value.to_pylist() == [b"\x00not framed"]


def test_chunks_cut_between_rows_and_a_large_row_travels_alone() -> None:
    batch = pa.record_batch({"value": pa.array([b"x" * 10, b"y" * 500, b"z" * 10])})
    chunks = _chunks(batch, 100)
    assert [rows for _, rows in chunks] == [1, 1, 1]
    values = [v for p, n in chunks for v in decode_records(p, n).value.to_pylist()]
    assert values == batch.column("value").to_pylist()


def test_raw_records_of_many_spark_batches_are_joined_into_full_payloads() -> None:
    """Spark hands a task 10,000 rows at a time; Kafka-style rows (key, value, headers)
    are joined across those batches into payloads close to ``chunk_bytes``, as typed
    rows are, not sent one payload per Spark batch; every row comes back, in order."""
    chunk_bytes = 256 * 1024
    chunker = RecordChunker(chunk_bytes)
    sent, chunks = [], []
    for b in range(30):
        rows = [f"{b}-{i}".encode() * 5 for i in range(300)]  # ~30 KiB per batch
        sent += rows
        batch = pa.record_batch(
            {
                "key": pa.array([r[:4] for r in rows], pa.binary()),
                "value": pa.array(rows, pa.binary()),
                "headers": pa.array([[("h", b"1")]] * len(rows), HEADERS_TYPE),
            }
        )
        chunks += chunker.add(batch)
    chunks += chunker.flush()
    sizes = [len(p) for p, _ in chunks]
    assert all(s <= chunk_bytes for s in sizes), sizes
    assert len(chunks) <= 6, f"not joined: {len(chunks)} payloads for 30 batches: {sizes}"
    assert all(s >= chunk_bytes * 0.75 for s in sizes[:-1]), sizes
    decoded = [decode_records(p, n) for p, n in chunks]
    assert [v for d in decoded for v in d.value.to_pylist()] == sent
    assert [k for d in decoded for k in d.key.to_pylist()] == [r[:4] for r in sent]


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("kafka.bootstrap.servers", "use option 'servers' instead"),
        ("kafka.request.timeout.ms", "use option 'requestTimeoutMs'"),
        ("kafka.linger.ms", "use option 'lingerMs'"),
        ("kafka.buffer.memory", "option 'kafka.buffer.memory' is a Kafka client setting"),
        ("kafka.group.id", "no consumer groups"),
        ("totallyUnknown", "unknown option 'totallyunknown'"),
    ],
)
def test_kafka_and_unknown_options_are_refused_by_name(name: str, named: str) -> None:
    with pytest.raises(OptionError, match=named):
        parse_source_options({"topic": "t", name: "x"}, streaming=True)
    with pytest.raises(OptionError, match=name.lower().replace(".", r"\.")):
        parse_sink_options({"topic": "t", name: "x"}, streaming=True)


def test_spark_options_and_max_offsets_alias_are_accepted() -> None:
    o = parse_source_options(
        {"topic": "t", "path": "p", "checkpointLocation": "/c", "maxOffsetsPerTrigger": "7"},
        streaming=True,
    )
    assert o.max_records_per_trigger == 7
    assert parse_sink_options({"topic": "t", "__partition_columns": "[]"}, streaming=True)
    with pytest.raises(OptionError, match="disagree"):
        parse_source_options(
            {"topic": "t", "maxOffsetsPerTrigger": "7", "maxRecordsPerTrigger": "8"},
            streaming=True,
        )


def test_starting_timestamp_is_milliseconds_for_reads_only() -> None:
    for streaming in (True, False):
        o = parse_source_options(
            {"topic": "t", "startingTimestamp": "1700000000000"}, streaming=streaming
        )
        assert o.starting_timestamp == 1_700_000_000_000
    assert parse_source_options({"topic": "t"}, streaming=True).starting_timestamp is None
    for bad in ("-1", "soon", "1.5"):
        with pytest.raises(OptionError, match="option 'startingTimestamp' must be an integer"):
            parse_source_options({"topic": "t", "startingTimestamp": bad}, streaming=True)
    with pytest.raises(OptionError, match="option 'startingTimestamp' applies to reads"):
        parse_sink_options({"topic": "t", "startingTimestamp": "1"}, streaming=True)


def test_timestamps_by_partition_and_ending_timestamp() -> None:
    o = parse_source_options(
        {"subscribe": "a,b", "startingOffsetsByTimestamp": '{"a": {"0": 5, "1": 7}}'},
        streaming=True,
    )
    assert o.starting_offsets_by_timestamp == {"a": {0: 5, 1: 7}}
    with pytest.raises(OptionError, match=r"names topic\(s\) \['c'\] that are not read"):
        parse_source_options(
            {"topic": "a", "startingOffsetsByTimestamp": '{"c": {"0": 5}}'}, streaming=True
        )
    with pytest.raises(OptionError, match="must be >= 0"):
        parse_source_options(
            {"topic": "a", "startingOffsetsByTimestamp": '{"a": {"0": -2}}'}, streaming=True
        )
    with pytest.raises(OptionError, match="cannot be used with 'subscribePattern'"):
        parse_source_options(
            {"subscribePattern": "a.*", "startingOffsetsByTimestamp": '{"a": {"0": 1}}'},
            streaming=True,
        )
    assert (
        parse_source_options(
            {"topic": "a", "endingTimestamp": "9"}, streaming=False
        ).ending_timestamp
        == 9
    )
    with pytest.raises(OptionError, match="'endingTimestamp' applies to batch reads"):
        parse_source_options({"topic": "a", "endingTimestamp": "9"}, streaming=True)


def test_exactly_one_subscription_option() -> None:
    assert parse_source_options({"subscribe": "a, b,a"}, streaming=True).topics == ("a", "b")
    o = parse_source_options({"subscribePattern": "ev-.*"}, streaming=True)
    assert o.matches("ev-1") and not o.matches("xev-1")
    with pytest.raises(OptionError, match="exactly one of the options"):
        parse_source_options({"topic": "a", "subscribe": "b"}, streaming=True)
    with pytest.raises(OptionError, match="option 'subscribePattern' must be a regular"):
        parse_source_options({"subscribePattern": "("}, streaming=True)


def test_write_layout() -> None:
    opts = parse_sink_options({"partitionBy": "user"}, streaming=True)
    with pytest.raises(OptionError, match="option 'topic' is required unless"):
        check_write_columns(opts, ["user", "value"])
    with pytest.raises(OptionError, match=r"'partitionBy' names column\(s\) \['user'\].*'users'"):
        check_write_columns(opts, ["topic", "users"])
    raw = check_write_columns(opts, ["topic", "key", "value", "user"])
    assert not raw.raw and raw.data_columns == ("key", "value", "user") and raw.topic_column
    kafka = check_write_columns(
        parse_sink_options({"topic": "t"}, streaming=True), ["key", "value", "partition"]
    )
    assert kafka.raw and kafka.data_columns == ("key", "value") and not kafka.topic_column


def test_offsets_of_several_topics() -> None:
    doc = format_topic_offsets({("b", 1): 5, ("a", 0): 2, ("b", 0): 3})
    assert doc == {"a": {"0": 2}, "b": {"0": 3, "1": 5}}
    assert parse_topic_offsets(doc, lambda t: t in "ab") == {("a", 0): 2, ("b", 0): 3, ("b", 1): 5}
    with pytest.raises(
        OffsetDocumentError, match="names topic 'b', which this query does not read"
    ):
        parse_topic_offsets(doc, lambda t: t == "a")
    spec = parse_source_options(
        {"subscribe": "a,b", "startingOffsets": '{"a": {"0": -2}, "b": {"0": 1}}'}, streaming=True
    ).starting_offsets
    bounds = {("a", 0): (4, 9), ("b", 0): (0, 9)}
    assert resolve_topic_spec(spec, bounds, "startingOffsets") == {("a", 0): 4, ("b", 0): 1}
    with pytest.raises(OffsetDocumentError, match="topic 'c' is missing"):
        resolve_topic_spec(spec, {**bounds, ("c", 0): (0, 1)}, "startingOffsets")


def _random_kafka_batch(
    rng: random.Random, shape: dict, rows: int, first: int
) -> tuple[pa.RecordBatch, list[Record]]:
    """Kafka's columns in ``shape`` (which columns, string or binary of either width),
    with nulls, empty values, headers on some rows and a slice; the Records the CLI's
    parser must read back, in order."""

    def maybe(value: bytes, p_null: float) -> bytes | None:
        return None if rng.random() < p_null else value

    keys = [maybe(f"k{first + i}".encode(), 0.3) for i in range(rows)]
    values = [maybe(f"v{first + i}".encode() * rng.randint(0, 30), 0.1) for i in range(rows)]
    headers = [
        None
        if rng.random() < 0.3
        else [(f"h{j}", maybe(b"x" * rng.randint(0, 5), 0.2)) for j in range(rng.randint(0, 3))]
        for _ in range(rows)
    ]
    stamps = [1_700_000_000_000 + first + i for i in range(rows)]
    cols: dict[str, pa.Array] = {}
    if shape["key"] is not None:
        cols["key"] = pa.array(keys, shape["key"])
    text = shape["value"] in (pa.string(), pa.large_string())
    cols["value"] = pa.array([v.decode() if text and v else v for v in values], shape["value"])
    if shape["headers"]:
        cols["headers"] = pa.array(headers, HEADERS_TYPE)
    if shape["timestamp"]:
        cols["timestamp"] = pa.array([s * 1000 for s in stamps], pa.timestamp("us", tz="UTC"))
    pad = rng.randint(0, 3)  # a slice: the arrays' offsets do not start at 0
    batch = pa.record_batch(
        {k: pa.concat_arrays([pa.nulls(pad, v.type), v]) for k, v in cols.items()}
    ).slice(pad)
    want = [
        Record(
            values[i],
            keys[i] if shape["key"] is not None else None,
            tuple(headers[i] or ()) if shape["headers"] else (),
            stamps[i] if shape["timestamp"] else None,
        )
        for i in range(rows)
    ]
    return batch, want


@pytest.mark.parametrize("seed", range(40))
def test_record_chunker_frames_any_kafka_rows_as_the_cli_reads_them(seed: int) -> None:
    """Batches of one random shape (as a task's batches from Spark are) through one
    RecordChunker at a random chunk size: every row comes back once, in order, through
    the CLI's own parser (an independent implementation of the framing) and through
    decode_records; no payload passes the chunk size but a lone row larger than it."""
    rng = random.Random(seed)
    shape = {
        "key": rng.choice([None, pa.binary(), pa.large_binary(), pa.string()]),
        "value": rng.choice([pa.string(), pa.large_string(), pa.binary(), pa.large_binary()]),
        "headers": rng.random() < 0.5,
        "timestamp": rng.random() < 0.5,
    }
    chunk_bytes = rng.choice([64, 300, 2_000, 50_000])
    chunker = RecordChunker(chunk_bytes)
    chunks, want = [], []
    for _ in range(rng.randint(1, 6)):
        batch, rows = _random_kafka_batch(rng, shape, rng.randint(0, 40), len(want))
        want += rows
        chunks += chunker.add(batch)
    chunks += chunker.flush()
    assert not chunker.waiting
    assert sum(n for _, n in chunks) == len(want)
    got = [r for p, n in chunks for r in unframe_any(bytes(p), n)]
    assert got == want
    for p, n in chunks:
        assert len(p) <= chunk_bytes or n == 1
        d = decode_records(p, n)
        assert d.value.to_pylist() == [r.value for r in unframe_any(bytes(p), n)]
        assert d.key.to_pylist() == [r.key for r in unframe_any(bytes(p), n)]


def test_a_null_slot_holding_bytes_frames_as_null_without_them() -> None:
    """Arrow lets a null slot's offsets span bytes (Spark's own arrays never do); the
    record is null and its bytes stay out of the payload."""
    values = pa.Array.from_buffers(
        pa.binary(),
        3,
        [
            pa.py_buffer(np.packbits([1, 0, 1], bitorder="little")),
            pa.py_buffer(np.array([0, 2, 4, 6], np.int32)),
            pa.py_buffer(b"abXYcd"),
        ],
    )
    ((payload, n),) = _chunks(pa.record_batch({"value": values}), 1 << 20)
    assert unframe_any(bytes(payload), n) == [Record(b"ab"), Record(None), Record(b"cd")]
    assert b"XY" not in bytes(payload)
