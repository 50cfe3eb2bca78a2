"""PartsPayload: a POST body given as buffers reaches the server byte for byte, with
its Content-Length, and the buffers go to the writer as they are (not copied)."""

from __future__ import annotations

import asyncio
import os

import aiohttp
from aiohttp import web
from rpc_helpers import serve_on_loopback

from raftlog.rpc import codec
from raftlog.rpc.messages import ProduceBatch, ProduceRequest
from raftlog.rpc.parts_payload import PartsPayload

BOUND_S = 10.0


class RecordingWriter:
    """Keeps every buffer written to it, as the objects it was given."""

    def __init__(self) -> None:
        self.written: list[bytes | memoryview] = []

    async def write(self, chunk: bytes | memoryview) -> None:
        self.written.append(chunk)


def test_the_buffers_go_to_the_writer_as_they_are():
    payload = os.urandom(4 << 20)
    parts = codec.encode_parts(ProduceRequest("t", 0, -1, [ProduceBatch(payload, 9)]))
    body = PartsPayload(parts)
    writer = RecordingWriter()
    asyncio.run(body.write(writer))  # type: ignore[arg-type]
    assert body.size == sum(len(p) for p in parts)
    assert [id(w) for w in writer.written] == [id(p) for p in parts]
    assert any(w is payload for w in writer.written)  # the payload itself, not a copy


def test_write_with_length_stops_at_the_declared_length():
    body = PartsPayload([b"abc", memoryview(b"defgh"), b"ij"])
    for length, expected in [(None, b"abcdefghij"), (0, b""), (3, b"abc"), (5, b"abcde")]:
        writer = RecordingWriter()
        asyncio.run(body.write_with_length(writer, length))  # type: ignore[arg-type]
        assert b"".join(bytes(w) for w in writer.written) == expected, length


def test_a_post_of_parts_arrives_whole_with_its_length():
    big = os.urandom(3 << 20)
    parts: list[bytes | memoryview] = [b"head", memoryview(big)[1:], b"", b"tail" * 1000]
    expected = b"".join(bytes(p) for p in parts)
    seen: list[tuple[bytes, str | None, str | None]] = []

    async def echo(request: web.Request) -> web.Response:
        seen.append(
            (
                await request.read(),
                request.headers.get("Content-Length"),
                request.headers.get("Transfer-Encoding"),
            )
        )
        return web.Response(text="ok")

    async def main() -> None:
        app = web.Application(client_max_size=8 << 20)
        app.router.add_post("/body", echo)
        runner = web.AppRunner(app, access_log=None)
        address = await serve_on_loopback(runner)
        try:
            url = f"http://{address}/body"
            async with (
                asyncio.timeout(BOUND_S),
                aiohttp.ClientSession() as session,
                session.post(url, data=PartsPayload(parts)) as r,
            ):
                assert r.status == 200
        finally:
            await runner.cleanup()

    asyncio.run(main())
    assert seen == [(expected, str(len(expected)), None)]
