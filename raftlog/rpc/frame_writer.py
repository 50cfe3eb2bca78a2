"""Writing a stream's binary frames from buffers, without joining them.

aiohttp's ``send_bytes`` takes one buffer, so a frame of several (a request id, a
message's header fields, the batches of an append or a fetch answer) had to be
joined first: a copy of every byte sent. A node answering a 4 MiB fetch on the
client stream copied the batches twice before the socket (the codec's join and the
request id's), a quarter of its time serving the source (py-spy,
``benchmarks spark``'s read). :func:`write_frame` hands the frame header and the
parts to the transport in one ``writelines`` (uvloop: one ``writev``).

Both ends of a stream write this way: the client's :class:`~raftlog.rpc.transport.
UnmaskedWebSocket` and the server's answers (:mod:`raftlog.rpc.server`). Frames are
unmasked (see ``UnmaskedWebSocket`` for why that is safe here). A frame is written
within one call, so concurrent writers never interleave inside a frame.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Any

import aiohttp

from raftlog.rpc import codec

__all__ = ["send_frame", "write_frame"]

# RFC 6455 frame headers, unmasked: FIN and the binary opcode, then the length in
# 7 bits, or 126 and 16 bits, or 127 and 64 bits (network order).
_WS_BINARY_FIN = 0x80 | int(aiohttp.WSMsgType.BINARY)
_WS_HEADER_SHORT = struct.Struct("!BB")
_WS_HEADER_16 = struct.Struct("!BBH")
_WS_HEADER_64 = struct.Struct("!BBQ")


def write_frame(writer: Any, parts: list[bytes | memoryview]) -> bool:
    """Write one binary frame whose payload is ``parts`` joined, through aiohttp's
    ``WebSocketWriter`` ``writer`` (its transport and protocol), in this call.

    Returns whether the transport's buffer is now over its high-water mark (the
    caller should wait, :func:`send_frame`, before writing more). Raises
    ConnectionError when the connection is closing.
    """
    transport = writer.transport
    # aiohttp's writer is closing once it sent a close frame: no data frame may follow
    if transport is None or transport.is_closing() or getattr(writer, "_closing", False):
        raise aiohttp.ClientConnectionResetError("Cannot write to closing transport")
    size = sum(len(p) for p in parts)
    if size < 126:
        header = _WS_HEADER_SHORT.pack(_WS_BINARY_FIN, size)
    elif size < 65536:
        header = _WS_HEADER_16.pack(_WS_BINARY_FIN, 126, size)
    else:
        header = _WS_HEADER_64.pack(_WS_BINARY_FIN, 127, size)
    if size < codec.GATHER_MIN_PART:
        # A small frame (a heartbeat, a one-record append) as one buffer: uvloop's
        # write of a single buffer is its fast path, a list takes a slower one
        # (measured: `benchmarks small` at 64 clients lost a tenth of its rate).
        transport.write(b"".join((header, *parts)))
    elif type(transport).writelines is asyncio.WriteTransport.writelines:
        # asyncio's own transport before Python 3.12 joins a writelines' buffers
        # first: one write each spares that join (what a send leaves over is still
        # copied into the transport's buffer); a client on a plain asyncio loop
        for part in (header, *parts):
            transport.write(part)
    else:
        transport.writelines([header, *parts])
    return bool(writer.protocol.writing_paused)


async def send_frame(writer: Any, parts: list[bytes | memoryview]) -> None:
    """:func:`write_frame`, then wait while the transport's buffer is over its
    high-water mark, as aiohttp's own writer does. Raises ConnectionError when the
    connection is closing."""
    if write_frame(writer, parts):
        await writer.protocol._drain_helper()
