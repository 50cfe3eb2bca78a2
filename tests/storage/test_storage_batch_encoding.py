"""A batch's encoded form is computed once and kept (a leader encodes a batch for its
log and for every follower; a follower writes what it received), but only where it
stays valid: decoded from immutable bytes, dropped on re-stamping and on pickling.
Segments write a batch run with one pwritev, whatever the number of batches."""

from __future__ import annotations

import pickle

from storage_helpers import make_batches

from raftlog.storage.batch import RecordBatch, decode_batches, encode_batches
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
