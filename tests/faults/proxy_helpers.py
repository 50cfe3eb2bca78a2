"""A tiny recording echo server on 127.0.0.1 for the proxy tests."""

from __future__ import annotations

import asyncio
import contextlib

WAIT_S = 10.0  # upper bound for anything that must happen
ABSENCE_S = 0.3  # how long we watch for something that must not happen


class EchoServer:
    """Echoes every byte back and records what it received (``received``)."""

    def __init__(self) -> None:
        self.received = bytearray()
        self.got_bytes = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> EchoServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        try:
            while data := await reader.read(65536):
                self.received += data
                self.got_bytes.set()
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._writers.discard(writer)
            writer.transport.abort()

    async def wait_received(self, size: int) -> bytes:
        """Wait (bounded) until at least ``size`` bytes arrived in total."""
        async with asyncio.timeout(WAIT_S):
            while len(self.received) < size:
                self.got_bytes.clear()
                await self.got_bytes.wait()
        return bytes(self.received)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.transport.abort()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), WAIT_S)


async def roundtrip(port: int, payload: bytes) -> bytes:
    reader, writer = await connect(port)
    try:
        writer.write(payload)
        await writer.drain()
        return await asyncio.wait_for(reader.readexactly(len(payload)), WAIT_S)
    finally:
        writer.transport.abort()


async def read_nothing(reader: asyncio.StreamReader) -> bool:
    """True when no byte arrives within ABSENCE_S (the connection stays silent)."""
    try:
        data = await asyncio.wait_for(reader.read(1), ABSENCE_S)
    except TimeoutError:
        return True
    return data == b""  # closed counts as "nothing arrived"


async def closed_by_peer(reader: asyncio.StreamReader) -> bool:
    """True when the connection is closed (EOF or reset) within WAIT_S."""
    try:
        data = await asyncio.wait_for(reader.read(65536), WAIT_S)
    except ConnectionError:
        return True
    return data == b""
