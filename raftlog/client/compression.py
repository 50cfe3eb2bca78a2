"""Payload compression: the codecs writers compress with and readers undo.

A batch's codec lives in its attributes (:class:`raftlog.storage.batch.Compression`,
Kafka's ids); the engine stores, replicates and checksums the compressed bytes
and never decompresses. The client compresses on produce
(:func:`produce_batch`) and decompresses every fetched batch
(:func:`decompressed`), so a reader never sees a compressed payload.

Codecs are Kafka's standard ones that Python has wheels for: ``lz4`` (the LZ4
frame format, as Kafka's lz4 is) through the ``lz4`` package and ``zstd``
through ``zstandard``. Names are Kafka's ``compression.type`` values.
"""

from __future__ import annotations

import lz4.frame
import zstandard

from raftlog.rpc.messages import ProduceBatch
from raftlog.storage.batch import SUPPORTED_COMPRESSION, Compression, RecordBatch, frozen_buffer

__all__ = [
    "CODEC_NAMES",
    "Compression",
    "codec_named",
    "compress",
    "decompress",
    "decompressed",
    "produce_batch",
]

CODEC_NAMES: tuple[str, ...] = tuple(c.name.lower() for c in SUPPORTED_COMPRESSION)
"""The codec names a writer may choose, in order: none, lz4, zstd."""

# zstd's default level (3): Kafka's default too; fast enough that the sink stays CPU-light.
_ZSTD_LEVEL = 3
# A decompressed payload is bounded like a stored one, so a corrupt or hostile frame
# cannot make a reader allocate without limit (raftlog.storage.batch.MAX_PAYLOAD_BYTES).
_MAX_DECOMPRESSED = 64 * 1024 * 1024


def codec_named(name: str | Compression, what: str = "compression") -> Compression:
    """The codec called ``name`` (none, lz4, zstd; any case); ValueError naming ``what``
    and the allowed values otherwise."""
    if isinstance(name, Compression) and name in SUPPORTED_COMPRESSION:
        return name
    text = str(name).strip().lower()
    if text not in CODEC_NAMES:
        raise ValueError(f"{what} must be one of {', '.join(CODEC_NAMES)}, got {name!r}")
    return Compression[text.upper()]


def compress(codec: Compression, payload: bytes | memoryview) -> bytes | memoryview:
    """``payload`` compressed with ``codec`` (as is for NONE)."""
    if codec is Compression.NONE:
        return payload
    if codec is Compression.LZ4:
        return lz4.frame.compress(payload)
    if codec is Compression.ZSTD:
        return zstandard.ZstdCompressor(level=_ZSTD_LEVEL).compress(payload)
    raise ValueError(f"compression: codec {codec.name.lower()} is not supported")


def decompress(codec: Compression, payload: bytes) -> bytes:
    """The bytes that :func:`compress` turned into ``payload``; ValueError when
    ``payload`` is not a valid frame of ``codec`` or expands past 64 MiB."""
    if codec is Compression.NONE:
        return payload
    try:
        if codec is Compression.LZ4:
            frame = lz4.frame.LZ4FrameDecompressor()
            out = frame.decompress(payload, max_length=_MAX_DECOMPRESSED + 1)
            if not frame.eof and len(out) <= _MAX_DECOMPRESSED:
                raise ValueError(f"a {codec.name.lower()} payload is truncated")
        elif codec is Compression.ZSTD:
            # compress() writes the content size into the frame, so this is bounded
            out = zstandard.ZstdDecompressor().decompress(
                payload, max_output_size=_MAX_DECOMPRESSED
            )
        else:
            raise ValueError(f"codec {codec.name.lower()} is not supported")
    except (RuntimeError, ValueError, zstandard.ZstdError) as exc:  # lz4: RuntimeError
        raise ValueError(f"compression: a {codec.name.lower()} payload is corrupt: {exc}") from None
    if len(out) > _MAX_DECOMPRESSED:
        raise ValueError(
            f"compression: a {codec.name.lower()} payload expands to {len(out)} bytes, "
            f"past the limit of {_MAX_DECOMPRESSED}"
        )
    return out


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
