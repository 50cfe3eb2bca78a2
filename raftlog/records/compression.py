"""Payload compression: the codecs writers compress with and readers undo.

A batch's codec lives in its attributes (:class:`raftlog.storage.batch.Compression`,
Kafka's ids); the engine stores, replicates and checksums the compressed bytes
as sent (a node decompresses a produced payload once, bounded, only to check it:
:mod:`raftlog.records.payload_check`). The client compresses on produce and
decompresses every fetched batch (:mod:`raftlog.client.compression`), so a reader
never sees a compressed payload.

Codecs are Kafka's standard ones that Python has wheels for: ``lz4`` (the LZ4
frame format, as Kafka's lz4 is) through the ``lz4`` package and ``zstd``
through ``zstandard``. Names are Kafka's ``compression.type`` values.
"""

from __future__ import annotations

import lz4.frame
import zstandard

from raftlog.storage.batch import SUPPORTED_COMPRESSION, Compression

__all__ = [
    "CODEC_NAMES",
    "Compression",
    "codec_named",
    "compress",
    "decompress",
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


def decompress(
    codec: Compression, payload: bytes | memoryview, limit: int = _MAX_DECOMPRESSED
) -> bytes | memoryview:
    """The bytes that :func:`compress` turned into ``payload``; ValueError when
    ``payload`` is not a valid frame of ``codec`` (trailing bytes included) or expands
    past ``limit`` bytes (64 MiB by default).

    Bounded whatever the frame declares: lz4 output stops at ``limit + 1`` bytes, and a
    zstd frame declaring more than ``limit`` is refused before decoding (zstandard's
    one-shot ``decompress`` allocates a frame's declared size, ignoring
    ``max_output_size``: 16 KB of zstd declaring 512 MiB took 512 MiB).
    """
    if codec is Compression.NONE:
        return payload
    name = codec.name.lower()
    try:
        if codec is Compression.LZ4:
            frame = lz4.frame.LZ4FrameDecompressor()
            out = frame.decompress(payload, max_length=limit + 1)
            if len(out) <= limit:
                if not frame.eof:
                    raise ValueError(f"a {name} payload is truncated")
                if frame.unused_data:
                    raise ValueError(f"{len(frame.unused_data)} bytes follow the lz4 frame")
        elif codec is Compression.ZSTD:
            # A frame that declares its size is decoded into a buffer of that size, one
            # that does not into at most ``limit`` bytes: refuse a declared size past the
            # limit first, so neither can allocate more. Bytes after the first frame are
            # ignored, by every reader alike (zstd's one-shot API).
            declared = zstandard.frame_content_size(payload)
            if declared > limit:
                raise _TooLarge(declared)
            try:
                out = zstandard.ZstdDecompressor().decompress(payload, max_output_size=limit)
            except zstandard.ZstdError as exc:
                if declared >= 0:
                    raise
                # no declared size: truncated, or larger than the limit allowed
                raise ValueError(
                    f"it does not decode within the limit of {limit} bytes: {exc}"
                ) from None
        else:
            raise ValueError(f"codec {name} is not supported")
    except (RuntimeError, ValueError, zstandard.ZstdError) as exc:  # lz4: RuntimeError
        raise ValueError(f"compression: a {name} payload is corrupt: {exc}") from None
    except _TooLarge as exc:
        raise ValueError(
            f"compression: a {name} payload declares {exc.args[0]} bytes, past the limit of "
            f"{limit} bytes"
        ) from None
    if len(out) > limit:
        raise ValueError(f"compression: a {name} payload expands past the limit of {limit} bytes")
    return out


class _TooLarge(Exception):
    """A frame declares a decompressed size past the limit (its size in args[0])."""
