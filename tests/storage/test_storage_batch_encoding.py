"""A batch's encoded form is computed once and kept (a leader encodes a batch for its
log and for every follower; a follower writes what it received), but only where it
stays valid: decoded from immutable bytes, dropped on re-stamping and on pickling.
Segments write a batch run with one pwritev, whatever the number of batches."""

from __future__ import annotations

import pickle

from storage_helpers import make_batches

from raftlog.storage.batch import (
    HEADER_SIZE,
    BatchKind,
    RecordBatch,
    decode_batches,
    encode_batches,
)
from raftlog.storage.fs import REAL_FS


def batch(payload: bytes = b"p" * 64) -> RecordBatch:
    return RecordBatch.create(payload, 3, timestamp_ms=1_000).stamped(40, 2)


def test_encode_is_computed_once_and_decodes_back():
    b = batch()
    first = b.encode()
    assert b.encode() is first
    (back,) = decode_batches(first)
    assert back == b and back.payload == b.payload


def test_a_batch_decoded_from_bytes_encodes_to_those_bytes_without_copying():
    wire = encode_batches(make_batches(0, 1, [50, 70, 90]))
    decoded = list(decode_batches(wire))
    assert b"".join(bytes(d.encode()) for d in decoded) == wire
    assert all(isinstance(d.encode(), memoryview) and d.encode().obj is wire for d in decoded)


def test_a_batch_decoded_from_a_mutable_buffer_keeps_no_view_of_it():
    buf = bytearray(encode_batches([batch()]))
    (decoded,) = decode_batches(buf)
    want = bytes(buf)
    buf[-1] ^= 0xFF  # the buffer is reused for the next read
    assert bytes(decoded.encode()) == want
    (again,) = decode_batches(bytes(decoded.encode()))
    assert again == batch()


def test_restamping_drops_the_cached_form():
    b = batch()
    b.encode()
    moved = b.stamped(100, 7)
    (back,) = decode_batches(bytes(moved.encode()))
    assert (back.base_offset, back.term) == (100, 7)
    assert back.payload == b.payload


def test_a_batch_pickles_without_its_cached_form():
    (decoded,) = decode_batches(encode_batches([batch()]))
    assert isinstance(decoded.encode(), memoryview)
    clone = pickle.loads(pickle.dumps(decoded))
    assert clone == decoded
    assert bytes(clone.encode()) == bytes(decoded.encode())


def test_pwritev_writes_every_buffer_in_order(tmp_path):
    path = tmp_path / "f"
    f = REAL_FS.open(path, create=True)
    try:
        few = [b"ab", memoryview(b"cdef"), b"", b"g"]
        f.pwritev(few, 3)
        many = [bytes([i % 251]) * (i % 5) for i in range(3000)]  # past IOV_MAX
        f.pwritev(many, 10)
        assert f.pread(100_000, 0) == b"\0\0\0" + b"abcdefg" + b"".join(many)
    finally:
        f.close()


def test_a_data_payload_decoded_from_bytes_is_a_view_of_them_and_a_control_one_is_bytes():
    control = RecordBatch.create(b'{"c": 1}', kind=BatchKind.TX_COMMIT, timestamp_ms=1)
    wire = encode_batches([batch(), control.stamped(43, 2)])
    data, marker = decode_batches(wire)
    assert isinstance(data.payload, memoryview) and data.payload.obj is wire
    assert data.payload == b"p" * 64 and hash(data) == hash(batch())
    assert type(marker.payload) is bytes and marker.payload == b'{"c": 1}'
    clone = pickle.loads(pickle.dumps(data))  # a view does not pickle: the state is bytes
    assert clone == data and type(clone.payload) is bytes


def test_a_payload_decoded_from_a_mutable_buffer_is_a_copy():
    buf = bytearray(encode_batches([batch()]))
    (decoded,) = decode_batches(buf)
    buf[-1] ^= 0xFF
    assert type(decoded.payload) is bytes and decoded.payload == b"p" * 64


def test_a_restamped_batch_is_a_new_header_and_the_payload_it_arrived_in():
    """What a leader does with a produced payload: no copy of it, one CRC."""
    frame = b"\x00" * 5 + b"q" * 1000 + b"\x00" * 3
    produced = RecordBatch.create(memoryview(frame)[5:1005], 4, timestamp_ms=9)
    placed = produced.stamped(700, 5)
    header, payload = placed.encoded_parts()
    assert payload is produced.payload and payload.obj is frame
    assert len(header) == HEADER_SIZE
    assert placed.encoded_parts()[0] is header  # computed once
    (back,) = decode_batches(bytes(header) + bytes(payload))
    assert (back.base_offset, back.term, back.record_count) == (700, 5, 4)
    assert back.payload == b"q" * 1000
    assert bytes(placed.encode()) == bytes(header) + bytes(payload)


def test_create_copies_a_payload_that_could_change():
    buf = bytearray(b"abc")
    for source in (buf, memoryview(buf)):
        b = RecordBatch.create(source, timestamp_ms=1)
        buf[0] = ord("z")
        assert type(b.payload) is bytes and b.payload == b"abc"
        buf[0] = ord("a")


def test_a_segment_writes_a_restamped_batch_as_its_encoded_bytes(tmp_path):
    from raftlog.storage.log import SegmentedLog

    frame = b"r" * 5000
    placed = [RecordBatch.create(memoryview(frame)[i * 1000 :], 2, timestamp_ms=3) for i in (0, 4)]
    log = SegmentedLog.open(tmp_path / "log")
    try:
        log.append([placed[0].stamped(0, 1), placed[1].stamped(2, 1)])
        log.flush()
    finally:
        log.close()
    log = SegmentedLog.open(tmp_path / "log")
    try:
        got = list(log.read(0, 10_000_000))
    finally:
        log.close()
    assert [(b.base_offset, bytes(b.payload)) for b in got] == [(0, frame), (2, frame[4000:])]


def test_a_payload_decoded_from_a_read_only_view_is_a_view_of_it():
    """A stream frame's own buffer, handed on read-only (raftlog.rpc.frame_receiver): the
    payload and the encoded form point into it, no copy."""
    buf = bytearray(encode_batches([batch()]))
    (decoded,) = decode_batches(memoryview(buf).toreadonly())
    assert isinstance(decoded.payload, memoryview) and decoded.payload.obj is buf
    assert decoded.payload == b"p" * 64
    assert isinstance(decoded.encode(), memoryview) and decoded.encode().obj is buf
