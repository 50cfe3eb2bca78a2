"""A client request's body as make_app reads it (``read_bounded_body``): every byte
delivered whole, however the body arrives (one write, many small ones, chunked),
and a body past the limit refused with RECORD_TOO_LARGE while the server keeps
serving.

Each test runs a real aiohttp server on 127.0.0.1 and a real client; every wait
is bounded (``asyncio.timeout``).
"""

from __future__ import annotations

import asyncio
import http.client
import os
import threading
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from rpc_helpers import NodeStub, serve_on_loopback

from raftlog.rpc import codec
from raftlog.rpc.messages import (
    ErrorCode,
    ErrorResponse,
    ProduceBatch,
    ProduceRequest,
    ProduceResponse,
)
from raftlog.rpc.server import CONTENT_TYPE, make_app

LIMIT = 1 << 20
BOUND_S = 10.0


class EchoNode(NodeStub):
    """Answers a produce with offsets that encode what it received: the payload's
    length as ``base_offset`` and the first batch's record count as ``last_offset``."""

    def __init__(self) -> None:
        self.payloads: list[bytes] = []

    async def handle_client(self, message: Any) -> Any:
        assert isinstance(message, ProduceRequest)
        self.payloads.append(message.batches[0].payload)
        return ProduceResponse(len(message.batches[0].payload), message.batches[0].record_count)


async def serve(node: EchoNode) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(make_app(node, max_request_bytes=LIMIT), access_log=None)
    return runner, "http://" + await serve_on_loopback(runner)


def produce_body(payload: bytes, records: int = 7) -> bytes:
    return codec.encode(ProduceRequest("t", 0, -1, [ProduceBatch(payload, records)]))


async def post(session: aiohttp.ClientSession, url: str, data: Any) -> tuple[int, Any]:
    async with session.post(
        f"{url}/v1/produce", data=data, headers={"Content-Type": CONTENT_TYPE}
    ) as resp:
        return resp.status, codec.decode(await resp.read())


async def pieces(body: bytes, size: int) -> AsyncIterator[bytes]:
    """The body in ``size``-byte writes, each a separate chunk of a chunked request."""
    for i in range(0, len(body), size):
        await asyncio.sleep(0)
        yield body[i : i + size]


@pytest.mark.parametrize("how", ["whole", "chunked-small", "chunked-large"])
def test_every_byte_of_a_body_arrives_however_it_is_sent(how):
    payload = os.urandom(LIMIT - 4096)  # just under the limit once framed
    body = produce_body(payload)

    async def main() -> None:
        node = EchoNode()
        runner, url = await serve(node)
        try:
            async with asyncio.timeout(BOUND_S), aiohttp.ClientSession() as session:
                data: Any = body
                if how == "chunked-small":
                    data = pieces(body, 997)
                elif how == "chunked-large":
                    data = pieces(body, 300_000)
                status, reply = await post(session, url, data)
                assert status == 200, reply
                assert reply == ProduceResponse(len(payload), 7)
                assert node.payloads == [payload]
        finally:
            await runner.cleanup()

    asyncio.run(main())


@pytest.mark.parametrize("chunked", [False, True], ids=["declared", "chunked"])
def test_a_body_past_the_limit_is_refused_and_the_server_goes_on(chunked):
    big = produce_body(os.urandom(LIMIT + 1))

    async def main() -> None:
        node = EchoNode()
        runner, url = await serve(node)
        try:
            async with asyncio.timeout(BOUND_S), aiohttp.ClientSession() as session:
                status, reply = await post(session, url, pieces(big, 65536) if chunked else big)
                assert status == 413
                assert isinstance(reply, ErrorResponse)
                assert reply.code == ErrorCode.RECORD_TOO_LARGE
                assert f"request body exceeds the limit of {LIMIT} bytes" in reply.message
                assert node.payloads == []
                # the next request (a fresh connection or the same one) is served
                status, reply = await post(session, url, produce_body(b"x" * 100, 3))
                assert (status, reply) == (200, ProduceResponse(100, 3))
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_a_chunk_end_that_arrives_after_its_data_does_not_end_the_body():
    """A chunked body sent raw: each chunk's data, a pause (the server takes the data),
    then the chunk's closing CRLF. aiohttp then reports the chunk's end with no data,
    which must not be taken for the end of the body."""
    payload = os.urandom(200_000)
    body = produce_body(payload)
    pieces_of = [body[i : i + 50_000] for i in range(0, len(body), 50_000)]

    async def main() -> None:
        node = EchoNode()
        runner, url = await serve(node)
        host, port = url.removeprefix("http://").split(":")
        try:
            async with asyncio.timeout(BOUND_S):
                reader, writer = await asyncio.open_connection(host, int(port))
                writer.write(
                    f"POST /v1/produce HTTP/1.1\r\nHost: {host}\r\nContent-Type: {CONTENT_TYPE}"
                    "\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".encode()
                )
                for piece in pieces_of:
                    writer.write(f"{len(piece):x}\r\n".encode() + piece)
                    await writer.drain()
                    await asyncio.sleep(0.02)  # the server reads the data before its end
                    writer.write(b"\r\n")
                writer.write(b"0\r\n\r\n")
                await writer.drain()
                head, _, answer = (await reader.read()).partition(b"\r\n\r\n")
                writer.close()
                assert head.startswith(b"HTTP/1.1 200"), head
                assert codec.decode(answer) == ProduceResponse(len(payload), 7)
                assert node.payloads == [payload]
        finally:
            await runner.cleanup()

    asyncio.run(main())


def test_empty_bodies_one_after_another_are_answered_and_the_server_goes_on():
    """aiohttp gives every empty body one shared reader, which reports the end of an HTTP
    chunk from its second read on: a body reader that took that for more data to come
    spun on the second empty POST, and the node answered nothing more. The server runs
    on a loop in its own thread here, so that a spinning server fails the client's
    timeout instead of hanging the test."""
    loop = asyncio.new_event_loop()
    started: list[tuple[web.AppRunner, str]] = []
    ready = threading.Event()

    def serve_forever() -> None:
        asyncio.set_event_loop(loop)
        started.append(loop.run_until_complete(serve(EchoNode())))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=serve_forever, daemon=True)
    thread.start()
    try:
        assert ready.wait(BOUND_S)
        host, port = started[0][1].removeprefix("http://").split(":")
        for body in (b"", b"", b"", produce_body(b"x" * 100, 3)):
            conn = http.client.HTTPConnection(host, int(port), timeout=5.0)
            try:
                conn.request("POST", "/v1/produce", body=body)
                resp = conn.getresponse()
                status, reply = resp.status, codec.decode(resp.read())
            finally:
                conn.close()
            if body:
                assert (status, reply) == (200, ProduceResponse(100, 3))
            else:
                assert status == 400 and isinstance(reply, ErrorResponse)
                assert "malformed produce body" in reply.message
    finally:
        if started:
            asyncio.run_coroutine_threadsafe(started[0][0].cleanup(), loop).result(BOUND_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(BOUND_S)
        if not thread.is_alive():
            loop.close()
