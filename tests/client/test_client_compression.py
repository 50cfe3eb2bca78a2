"""Payload compression: the codec in a batch's attributes, the CRC over the compressed
bytes (raftlog.records.compression), and the client's transparent decompression
(raftlog.client.compression)."""

from __future__ import annotations

import os

import pytest

from raftlog.client.compression import decompressed, produce_batch
from raftlog.records.compression import CODEC_NAMES, Compression, codec_named, compress, decompress
from raftlog.rpc import codec
from raftlog.rpc.messages import ProduceBatch, ProduceRequest
from raftlog.storage.batch import BatchKind, CorruptBatch, RecordBatch

# compressible, and not trivially so: repeated words with a random tail
PAYLOAD = b"".join(b"row %d of the compression test; " % i for i in range(2000)) + os.urandom(64)


def test_codec_names_are_kafkas():
    assert CODEC_NAMES == ("none", "lz4", "zstd")
    assert (Compression.NONE, Compression.LZ4, Compression.ZSTD) == (0, 3, 4)  # Kafka's ids
    assert codec_named("ZSTD") is Compression.ZSTD
    with pytest.raises(ValueError, match=r"compression must be one of none, lz4, zstd, got 'gzip'"):
        codec_named("gzip")


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_batch_keeps_codec_in_attributes_and_crc_covers_compressed_bytes(codec):
    wire = compress(codec, PAYLOAD)
    assert len(wire) < len(PAYLOAD) // 4
    batch = RecordBatch.create(wire, 3, transactional=True, compression=codec)
    # the codec sits beside the kind and transactional bits without disturbing them
    assert batch.compression is codec
    assert batch.kind is BatchKind.DATA and batch.is_transactional
    encoded = batch.encode()
    back, _ = RecordBatch.decode(encoded)
    assert back == batch and back.payload == wire
    # flipping one byte of the compressed payload breaks the CRC
    damaged = bytearray(encoded)
    damaged[-1] ^= 0xFF
    with pytest.raises(CorruptBatch):
        RecordBatch.decode(bytes(damaged))
    plain = decompressed(back)
    assert plain.payload == PAYLOAD
    assert plain.compression is Compression.NONE
    assert plain.is_transactional and plain.record_count == 3


def test_uncompressed_batch_is_returned_as_is():
    batch = RecordBatch.create(b"abc", 1)
    assert batch.compression is Compression.NONE
    assert decompressed(batch) is batch


def test_unsupported_and_control_compression_refused():
    with pytest.raises(ValueError, match="compression: expected one of none, lz4, zstd"):
        RecordBatch.create(b"x", 1, compression=Compression.GZIP)
    with pytest.raises(ValueError, match="TX_COMMIT batch cannot be compressed"):
        RecordBatch.create(b"x", 1, kind=BatchKind.TX_COMMIT, compression=Compression.LZ4)


@pytest.mark.parametrize("codec", [Compression.LZ4, Compression.ZSTD])
def test_corrupt_frame_is_a_value_error_naming_the_offset(codec):
    batch = RecordBatch.create(b"not a frame at all", 1, compression=codec).stamped(41, 1)
    with pytest.raises(ValueError, match=r"batch at offset 41: compression: a .* payload is"):
        decompressed(batch)


def test_truncated_lz4_frame_refused():
    wire = compress(Compression.LZ4, PAYLOAD)
    with pytest.raises(ValueError, match="lz4 payload is"):
        decompress(Compression.LZ4, wire[:-7])


def test_produce_batch_carries_codec_over_the_wire():
    pb = produce_batch(PAYLOAD, 5, Compression.ZSTD)
    assert pb.compression == int(Compression.ZSTD)
    assert decompress(Compression.ZSTD, pb.payload) == PAYLOAD
    req = ProduceRequest("t", 0, -1, [pb])
    back = codec.decode(codec.encode(req))
    assert back.batches[0].compression == 4
    # a codec id past Kafka's range is refused at decoding, naming the field
    wrong = ProduceRequest("t", 0, -1, [ProduceBatch(b"x", 1, 9)])
    with pytest.raises(codec.CodecError, match=r"compression: 9 is out of range, allowed 0..4"):
        codec.decode(codec.encode(wrong))


def test_produce_batch_sends_an_immutable_payload_as_it_is_and_copies_a_writable_one():
    frozen = memoryview(PAYLOAD)
    assert produce_batch(frozen, 1, Compression.NONE).payload is frozen
    assert produce_batch(PAYLOAD, 1, Compression.NONE).payload is PAYLOAD
    buf = bytearray(PAYLOAD)
    for writable in (buf, memoryview(buf)):
        pb = produce_batch(writable, 1, Compression.NONE)
        buf[0] ^= 0xFF  # the caller reuses its buffer before a retry
        assert pb.payload == PAYLOAD
        buf[0] ^= 0xFF
