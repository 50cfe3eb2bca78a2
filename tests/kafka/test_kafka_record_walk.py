"""raftlog.kafka.record_walk: the records section of a RecordBatch v2 read in columns
gives exactly what kafka-python's record reader (the reference) reads, and any bytes it
accepts are bytes the reference reads the same; what does not fit Kafka's layout is
refused, saying what."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from raftlog.kafka.record_walk import RecordWalkError, keyed_payload, walk
from raftlog.records.framing import Record, frame_keyed
from tests.kafka.kafka_batches import kafka_batch, records_strategy

HEADER = 61
FIRST_TIMESTAMP_AT = 27

# values and keys past 63 bytes take two-byte length varints
records_st = records_strategy(max_value=200, max_key=70, max_records=30)


def reference(batch: bytes) -> list[Record]:
    """kafka-python's reading of a batch, as Records."""
    return [
        Record(r.value, r.key, tuple(r.headers), r.timestamp) for r in DefaultRecordBatch(batch)
    ]


def fast(batch: bytes) -> bytes:
    count = struct.unpack_from(">i", batch, HEADER - 4)[0]
    first = struct.unpack_from(">q", batch, FIRST_TIMESTAMP_AT)[0]
    section = memoryview(batch)[HEADER:]
    return keyed_payload(section, walk(section, count), first)


@settings(max_examples=150, deadline=None)
@given(records=records_st)
def test_the_columns_are_the_reference_records_byte_for_byte(records) -> None:
    batch = kafka_batch(records)
    assert reference(batch) == records
    assert fast(batch) == frame_keyed(records)


@settings(max_examples=300, deadline=None)
@given(records=records_st, data=st.data())
def test_bytes_the_walk_accepts_read_the_same_in_the_reference(records, data) -> None:
    """Flip, cut or insert bytes in the records section: the walk refuses with
    RecordWalkError, or what it reads is what kafka-python reads from the same bytes."""
    batch = bytearray(kafka_batch(records))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(HEADER, len(batch) - 1))
        how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if how == "flip":
            batch[at] ^= data.draw(st.integers(1, 255))
        elif how == "cut":
            del batch[at]
        else:
            batch.insert(at, data.draw(st.integers(0, 255)))
        if len(batch) <= HEADER:
            return
    try:
        got = fast(bytes(batch))
    except RecordWalkError:
        return
    assert got == frame_keyed(reference(bytes(batch)))


def section_of(*records: bytes) -> bytes:
    """A records section of hand-made records (each given after its length varint)."""
    out = b""
    for body in records:
        out += bytes([len(body) << 1]) + body  # zig-zag of a small length
    return out


def rec(offset_delta: int, key: bytes = b"\x01", value: bytes = b"\x02v", tail: bytes = b"\x00"):
    # attributes 0, timestamp delta 0, offset delta (zig-zag, < 64), key, value, headers
    return b"\x00\x00" + bytes([offset_delta << 1]) + key + value + tail


def test_hand_made_records_read_as_kafka_lays_them_out() -> None:
    section = section_of(rec(0), rec(1, key=b"\x04ab"))
    cols = walk(section, 2)
    assert cols.key_len.tolist() == [-1, 2] and cols.value_len.tolist() == [1, 1]
    assert keyed_payload(section, cols, 5) == frame_keyed(
        [Record(b"v", None, (), 5), Record(b"v", b"ab", (), 5)]
    )


REFUSED = [
    (section_of(rec(0), rec(2)), 2, "record 1 has offset delta 2; expected 1"),
    (section_of(rec(0), b"\x80" + rec(1)[1:]), 2, "record 1 has attributes 128"),
    (section_of(rec(0)), 2, "record count 2 does not fit"),
    (section_of(rec(0)) + b"\x00" * 7, 1, "7 bytes follow the last of 1 records"),
    (section_of(rec(0))[:-1], 1, "record 0 declares 7 bytes; 6 remain"),
    (section_of(rec(0, value=b"\x08v")), 1, "value runs past its end"),
    (section_of(rec(0, key=b"\x80\x80\x80\x80\x80\x01")), 1, "varint runs past 5 bytes"),
    (section_of(rec(0, key=b"\x03")), 1, "below -1"),
    (section_of(rec(0, tail=b"\x02\x02\xff\x00")), 1, "header key is not UTF-8"),
    (section_of(rec(0, tail=b"\x02\x01\x00")), 1, "header key is null"),
    (section_of(rec(0, tail=b"\x00\x00")), 1, "do not end where its length says"),
    (section_of(rec(0, tail=b"\x02\x02a\x01\x00")), 1, "do not end where its length says"),
    (section_of(rec(0, key=b"\xfe\xff\xff\xff\x07")), 1, "key runs past its end"),
]


@pytest.mark.parametrize(("section", "count", "says"), REFUSED, ids=[c[2] for c in REFUSED])
def test_records_that_do_not_fit_kafkas_layout_are_refused(section, count, says) -> None:
    with pytest.raises(RecordWalkError, match=says):
        walk(section, count)
