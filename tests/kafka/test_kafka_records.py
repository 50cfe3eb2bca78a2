"""Kafka RecordBatch v2 <-> raftlog's stored batches (raftlog.kafka.records): records
survive both ways (key, value, headers, timestamp; offsets = raftlog's), and every
batch that must not enter the log is refused with Kafka's code before anything is
sized by what it declares."""

from __future__ import annotations

import dataclasses
import gzip
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.util import calc_crc32c

from raftlog.kafka.records import (
    CORRUPT_MESSAGE,
    INVALID_RECORD,
    UNSUPPORTED_COMPRESSION_TYPE,
    UNSUPPORTED_FOR_MESSAGE_FORMAT,
    KafkaRecordError,
    ProducedBytes,
    decode_batch,
    encode_batch,
    split_batches,
)
from raftlog.records.framing import Record, frame_keyed, frame_records, unframe_keyed
from raftlog.records.payload_check import check_payload
from raftlog.storage.batch import RecordBatch
from tests.kafka.kafka_batches import kafka_batch, records_strategy

CODECS = {"none": 0, "gzip": 1, "lz4": 3, "zstd": 4}


def _crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, 17, calc_crc32c(memoryview(batch)[21:]))


records_st = records_strategy()


def _fields(data: bytes) -> tuple:
    out = DefaultRecordBatch(data)
    assert out.validate_crc()
    head = (out.base_offset, out.leader_epoch, out.producer_id, out.producer_epoch)
    head += (out.base_sequence, out.is_transactional, out.timestamp_type)
    return head, [(r.offset, r.key, r.value, tuple(r.headers), r.timestamp) for r in out]


@settings(max_examples=60, deadline=None)
@given(records=records_st, base=st.integers(0, 2**40), term=st.integers(0, 2**31 - 1))
def test_a_produced_batch_is_fetched_as_it_came_with_the_same_records(records, base, term):
    cache = ProducedBytes()
    produced = decode_batch(kafka_batch(records, producer=(9, 2, 40)))
    cache.add("t", 0, base, produced)
    stored = RecordBatch.create(
        produced.payload, len(records), producer_id=9, producer_epoch=2, first_sequence=40
    ).stamped(base, term)
    got = cache.encoded(stored, "t", 0)
    assert got is not None and _fields(got) == _fields(encode_batch(stored, "t"))
    assert cache.held == len(got)
    # anything else stored at that offset (another leader's batch, other records or
    # producer fields, another partition) is a miss: encode_batch answers it
    other = dataclasses.replace(records[0], value=(records[0].value or b"") + b"x")
    producer = {"producer_id": 9, "producer_epoch": 2, "first_sequence": 40}
    misses = [
        RecordBatch.create(frame_keyed([other, *records[1:]]), len(records), **producer),
        *(
            RecordBatch.create(produced.payload, len(records), **{**producer, field: 1})
            for field in producer
        ),
        RecordBatch.create(produced.payload, len(records), transactional=True, **producer),
    ]
    assert [cache.encoded(b.stamped(base, term), "t", 0) for b in misses] == [None] * 5
    assert cache.encoded(stored, "t", 1) is None and cache.encoded(stored, "u", 0) is None


def test_produced_bytes_stay_under_their_bound_oldest_dropped_first() -> None:
    batch = decode_batch(kafka_batch([Record(b"v" * 100, None, (), 5)]))
    assert batch.wire is not None
    cache = ProducedBytes(max_bytes=3 * len(batch.wire))
    for offset in range(10):
        cache.add("t", 0, offset, batch)
        assert cache.held <= cache.max_bytes
    stored = [RecordBatch.create(batch.payload, 1).stamped(o, 1) for o in range(10)]
    assert [cache.encoded(b, "t", 0) is not None for b in stored] == [False] * 7 + [True] * 3
    # compressed or log-append-time batches are not kept: their bytes are not the records
    gz = decode_batch(kafka_batch([Record(b"v" * 1000, None, (), 5)], codec=1))
    assert gz.wire is None


@settings(max_examples=60, deadline=None)
@given(
    records=records_st, codec=st.sampled_from(sorted(CODECS.values())), base=st.integers(0, 2**40)
)
def test_a_kafka_batch_round_trips_through_the_log(records, codec, base) -> None:
    produced = decode_batch(kafka_batch(records, codec))
    assert produced.record_count == len(records)
    # what is stored is a keyed payload the node's batch check accepts as is
    check_payload(produced.payload, produced.record_count)
    assert unframe_keyed(produced.payload, len(records)) == records
    stored = dataclasses.replace(
        RecordBatch.create(produced.payload, len(records)), base_offset=base, term=7
    )
    out = DefaultRecordBatch(encode_batch(stored, "t"))
    assert out.validate_crc()
    assert out.base_offset == base and out.leader_epoch == 7
    got = list(out)
    assert [r.offset for r in got] == list(range(base, base + len(records)))
    assert [(r.key, r.value, tuple(r.headers), r.timestamp) for r in got] == [
        (r.key, r.value, r.headers, r.timestamp_ms) for r in records
    ]


def test_plain_raftlog_records_are_read_with_the_batch_timestamp() -> None:
    stored = dataclasses.replace(
        RecordBatch.create(frame_records([b"a", b"bc"]), 2, timestamp_ms=1234), base_offset=10
    )
    got = list(DefaultRecordBatch(encode_batch(stored)))
    assert [(r.offset, r.key, r.value, r.timestamp) for r in got] == [
        (10, None, b"a", 1234),
        (11, None, b"bc", 1234),
    ]


def test_producer_fields_are_kept() -> None:
    produced = decode_batch(kafka_batch([Record(b"v", timestamp_ms=1)], producer=(42, 3, 17)))
    assert (produced.producer_id, produced.producer_epoch, produced.base_sequence) == (42, 3, 17)


def test_a_wrong_crc_is_corrupt_message() -> None:
    batch = bytearray(kafka_batch([Record(b"value", timestamp_ms=1)]))
    batch[-2] ^= 1  # the last value byte: the records still parse, the CRC does not match
    with pytest.raises(KafkaRecordError, match="CRC") as err:
        decode_batch(batch)
    assert err.value.code == CORRUPT_MESSAGE


def test_a_record_count_the_bytes_cannot_hold_is_refused_by_count() -> None:
    batch = bytearray(kafka_batch([Record(b"v", timestamp_ms=1)]))
    struct.pack_into(">i", batch, 57, 2**31 - 1)
    _crc(batch)
    with pytest.raises(KafkaRecordError, match="record count 2147483647 does not fit") as err:
        decode_batch(batch)
    assert err.value.code == CORRUPT_MESSAGE


def test_a_count_below_its_records_is_corrupt() -> None:
    batch = bytearray(kafka_batch([Record(b"v", timestamp_ms=1), Record(b"w", timestamp_ms=1)]))
    struct.pack_into(">i", batch, 57, 1)
    _crc(batch)
    with pytest.raises(KafkaRecordError) as err:
        decode_batch(batch)
    assert err.value.code == CORRUPT_MESSAGE


def test_a_last_offset_delta_other_than_count_minus_one_is_corrupt() -> None:
    """The header's offset range must hold its count (Kafka's LogValidator): a fetch
    answering the producer's bytes would give consumers that header."""
    batch = bytearray(kafka_batch([Record(b"v", timestamp_ms=1), Record(b"w", timestamp_ms=1)]))
    struct.pack_into(">i", batch, 23, 5)
    _crc(batch)
    with pytest.raises(KafkaRecordError, match=r"last offset delta 5 .*\(expected 1\)") as err:
        decode_batch(batch)
    assert err.value.code == CORRUPT_MESSAGE


def test_a_gzip_bomb_stops_at_the_limit() -> None:
    bomb = bytearray(kafka_batch([Record(b"v", timestamp_ms=1)]))
    body = gzip.compress(b"\x00" * (4 * 1024 * 1024))
    bomb = bomb[:61] + body
    struct.pack_into(">i", bomb, 8, len(bomb) - 12)
    struct.pack_into(">h", bomb, 21, 1)  # gzip
    _crc(bomb)
    with pytest.raises(KafkaRecordError, match="past the limit of 1048576 bytes") as err:
        decode_batch(bomb, max_bytes=1024 * 1024)
    assert err.value.code == CORRUPT_MESSAGE


def test_snappy_and_control_batches_are_refused_by_code() -> None:
    batch = bytearray(kafka_batch([Record(b"v", timestamp_ms=1)]))
    struct.pack_into(">h", batch, 21, 2)  # snappy
    _crc(batch)
    with pytest.raises(KafkaRecordError, match="snappy") as err:
        decode_batch(batch)
    assert err.value.code == UNSUPPORTED_COMPRESSION_TYPE
    struct.pack_into(">h", batch, 21, 0x20)  # control
    _crc(batch)
    with pytest.raises(KafkaRecordError, match="control") as err:
        decode_batch(batch)
    assert err.value.code == INVALID_RECORD


def test_split_refuses_a_length_past_the_bytes() -> None:
    one = kafka_batch([Record(b"v", timestamp_ms=1)])
    assert [bytes(b) for b in split_batches(one + one)] == [one, one]
    for cut in (one[:-1], one[:10], one + one[:20], b""):
        with pytest.raises(KafkaRecordError) as err:
            split_batches(cut)
        assert err.value.code == CORRUPT_MESSAGE


def test_an_arrow_topic_batch_names_its_format() -> None:
    table = pa.table({"x": [1, 2]})
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    stored = RecordBatch.create(sink.getvalue().to_pybytes(), 2)
    with pytest.raises(KafkaRecordError, match="topic 'typed' holds Arrow IPC") as err:
        encode_batch(stored, "typed")
    assert err.value.code == UNSUPPORTED_FOR_MESSAGE_FORMAT


def test_keyed_payloads_from_raftlog_produce_keep_keys_and_headers() -> None:
    records = [Record(b"v1", b"k1", (("h", b"x"),)), Record(None, b"k2")]
    stored = RecordBatch.create(frame_keyed(records), 2, timestamp_ms=99)
    got = list(DefaultRecordBatch(encode_batch(stored)))
    assert [(r.key, r.value, r.headers, r.timestamp) for r in got] == [
        (b"k1", b"v1", [("h", b"x")], 99),
        (b"k2", None, [], 99),
    ]


@pytest.mark.parametrize(("first", "last"), [(0, 0), (14, 16), (2**40, 2**40 + 999)])
def test_a_skip_batch_covers_its_offsets_as_a_commit_marker_of_no_producer(first, last) -> None:
    """What clients see of offsets they never read: a valid control batch ending at
    ``last`` (so their position moves to ``last + 1``), whose one record is a COMMIT
    control record (ignored at every isolation level) of no producer."""
    from aiokafka.record.control_record import COMMIT_MARKER, ControlRecord
    from aiokafka.record.default_records import DefaultRecordBatch as AioBatch

    from raftlog.kafka.records import skip_batch

    data = skip_batch(first, last, 1_700_000_000_000)
    batch = DefaultRecordBatch(data)
    assert batch.validate_crc() and batch.is_control_batch
    assert (batch.base_offset, batch.next_offset, batch.producer_id) == (first, last + 1, -1)
    (record,) = list(batch)
    assert record.offset == last and not record.abort
    theirs = AioBatch(data)  # aiokafka's own codec reads it the same way
    assert theirs.validate_crc() and theirs.is_control_batch
    assert theirs.next_offset == last + 1
    assert ControlRecord.parse(next(theirs).key) == COMMIT_MARKER
    assert split_batches(data) and len(split_batches(data + data)) == 2


def builder_batch(stored: RecordBatch, records: list[Record]) -> bytes:
    """The reference answer to a fetch of ``stored``: kafka-python's builder, then the
    fields a broker sets (base offset, length, leader epoch)."""
    builder = DefaultRecordBatchBuilder(
        2,
        0,
        stored.is_transactional,
        stored.producer_id,
        stored.producer_epoch,
        stored.first_sequence,
        2**31 - 1,
    )
    for i, r in enumerate(records):
        stamp = stored.timestamp_ms if r.timestamp_ms is None else r.timestamp_ms
        builder.append(i, stamp, r.key, r.value, list(r.headers))
    out = builder.build()
    struct.pack_into(">qii", out, 0, stored.base_offset, len(out) - 12, stored.term)
    return bytes(out)


@settings(max_examples=150, deadline=None)
@given(
    records=records_strategy(max_value=200, max_key=70, max_records=30),
    stamped=st.booleans(),
    transactional=st.booleans(),
    producer=st.tuples(
        st.integers(-1, 2**62), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1)
    ),
    base=st.integers(0, 2**40),
    term=st.integers(0, 2**31 - 1),
    append_time=st.integers(0, 2**41),
)
def test_a_stored_keyed_batch_is_fetched_as_kafka_pythons_builder_makes_it(
    records, stamped, transactional, producer, base, term, append_time
) -> None:
    """encode_batch builds keyed payloads in columns: byte for byte the builder's batch,
    with or without per-record timestamps (else the batch's), keys, headers (these go
    through the builder itself), producer fields and the transactional bit."""
    if not stamped:
        records = [dataclasses.replace(r, timestamp_ms=None) for r in records]
    pid, epoch, sequence = producer
    stored = dataclasses.replace(
        RecordBatch.create(
            frame_keyed(records),
            len(records),
            producer_id=pid,
            producer_epoch=epoch,
            first_sequence=sequence,
            transactional=transactional,
        ),
        base_offset=base,
        term=term,
        timestamp_ms=append_time,
    )
    assert encode_batch(stored, "t") == builder_batch(stored, records)
