"""The client's side of payload compression: it compresses what it produces
(:func:`produce_batch`) and decompresses every batch it fetches (:func:`decompressed`),
so a reader never sees a compressed payload. The codecs themselves are
:mod:`raftlog.records.compression`."""

from __future__ import annotations

from raftlog.records.compression import compress, decompress
from raftlog.rpc.messages import ProduceBatch
from raftlog.storage.batch import Compression, RecordBatch, frozen_buffer

__all__ = ["decompressed", "produce_batch"]


def produce_batch(
    payload: bytes | bytearray | memoryview, record_count: int, codec: Compression
) -> ProduceBatch:
    """The wire batch for ``payload`` (uncompressed), compressed with ``codec``.

    ``bytes`` and read-only views (an Arrow IPC buffer) are sent as they are, not
    copied; anything writable is copied first, since it could change before a retry.
    """
    return ProduceBatch(compress(codec, frozen_buffer(payload)), record_count, int(codec))


def decompressed(batch: RecordBatch) -> RecordBatch:
    """``batch`` with its payload decompressed and its codec bits cleared (itself when
    not compressed); ValueError naming the batch's offset when the payload is corrupt."""
    codec = batch.compression
    if codec is Compression.NONE:
        return batch
    try:
        payload = decompress(codec, batch.payload)
    except ValueError as exc:
        raise ValueError(f"batch at offset {batch.base_offset}: {exc}") from None
    return batch.with_payload(payload, Compression.NONE)
