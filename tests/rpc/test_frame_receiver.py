"""raftlog.rpc.frame_receiver: a stream's frames read straight into their own buffers.

The unit tests feed the protocol the way an event loop does (``get_buffer`` then
``buffer_updated``), cut at random places many times over; the last ones run the
real server with a real peer stream on 127.0.0.1, every wait bounded.
"""

from __future__ import annotations

import asyncio
import os
import random
import struct
import time
from typing import Any

import aiohttp
import pytest
from aiohttp import WSCloseCode
from aiohttp._websocket.helpers import websocket_mask
from rpc_helpers import NodeStub, serve_on_loopback

from raftlog.raft.messages import AppendEntriesReply, AppendEntriesRequest
from raftlog.rpc import codec
from raftlog.rpc.frame_receiver import FrameReceiver
from raftlog.rpc.peer import STREAM_PATH, split_frame, stream_frame
from raftlog.rpc.server import make_app
from raftlog.rpc.transport import StreamTransport
from raftlog.storage.batch import RecordBatch

BOUND_S = 10.0


def frame(payload: bytes, *, opcode: int = 0x2, fin: bool = True, mask: bytes | None = None,
          rsv: int = 0) -> bytes:  # fmt: skip
    """One WebSocket frame as a sender puts it on the wire."""
    first = (0x80 if fin else 0) | rsv | opcode
    n = len(payload)
    mask_bit = 0x80 if mask is not None else 0
    if n < 126:
        head = bytes((first, mask_bit | n))
    elif n < 65536:
        head = bytes((first, mask_bit | 126)) + struct.pack("!H", n)
    else:
        head = bytes((first, mask_bit | 127)) + struct.pack("!Q", n)
    if mask is None:
        return head + payload
    body = bytearray(payload)
    websocket_mask(mask, body)
    return head + mask + bytes(body)


class FakeTransport:
    def __init__(self) -> None:
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True


class Inner:
    """aiohttp's protocol, as the receiver forwards to it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def connection_lost(self, exc: Exception | None) -> None:
        self.calls.append("lost")

    def pause_writing(self) -> None:
        self.calls.append("pause")

    def resume_writing(self) -> None:
        self.calls.append("resume")


def receiver(max_frame: int = 0) -> tuple[FrameReceiver, FakeTransport, Inner, list[Any]]:
    got: list[Any] = []
    transport, inner = FakeTransport(), Inner()
    r = FrameReceiver(transport, inner, got.append, max_frame)  # type: ignore[arg-type]
    return r, transport, inner, got


def feed(r: FrameReceiver, data: bytes, rng: random.Random) -> None:
    """Hand ``data`` to ``r`` as reads of random sizes, each at most what get_buffer offers."""
    pos = 0
    for _ in range(len(data) + 1):
        if pos >= len(data):
            return
        buf = r.get_buffer(-1)
        assert len(buf) > 0
        n = min(len(buf), len(data) - pos, rng.choice((1, 2, 3, 7, 100, 4096, 70_000, 1 << 22)))
        buf[:n] = data[pos : pos + n]
        r.buffer_updated(n)
        pos += n
    raise AssertionError("feed did not finish")


def test_every_frame_arrives_whole_and_in_order_however_the_reads_cut_it() -> None:
    """200 streams of frames of every length class (7-bit, 16-bit, 64-bit; smaller and
    larger than the 64 KiB shared buffer), masked or not, read in random pieces."""

    async def body() -> None:
        rng = random.Random(7)
        for _ in range(200):
            sizes = [rng.choice((0, 1, 125, 126, 1000, 65535, 65536, 70_000, 300_000))
                     for _ in range(rng.randint(1, 8))]  # fmt: skip
            payloads = [os.urandom(n) for n in sizes]
            wire = b"".join(
                frame(p, mask=os.urandom(4) if rng.random() < 0.5 else None) for p in payloads
            )
            r, transport, _, got = receiver()
            feed(r, wire, rng)
            assert [bytes(g) for g in got] == payloads
            assert not transport.written and not transport.closed
            for g, p in zip(got, payloads, strict=True):
                if len(p) + 14 > 64 * 1024:
                    # its own buffer, read-only: decoded batches may keep views of it
                    assert isinstance(g, memoryview) and g.readonly and len(g.obj) == len(p)
                else:
                    assert type(g) is bytes  # copied out of the shared buffer

    asyncio.run(body())


@pytest.mark.parametrize("limit", [1000, 65_526, 100_000])
def test_an_oversized_frame_goes_to_on_oversized_and_the_stream_goes_on(limit: int) -> None:
    """200 random streams with frames past the limit among others (some read into a
    buffer of their own, larger than the 64 KiB shared one), masked or not, read in
    random pieces: each oversized frame gives on_oversized its first 16 bytes and its
    size, in stream order, is never delivered, and every frame after it arrives whole."""

    async def body() -> None:
        rng = random.Random(limit)
        near = (limit - 1, limit, limit + 1, 65_521, 65_522, 70_000, 300_000)
        for _ in range(200):
            sizes = [rng.choice((16, 100, 4096, *near)) for _ in range(rng.randint(1, 8))]
            payloads = [os.urandom(n) for n in sizes]
            wire = b"".join(
                frame(p, mask=os.urandom(4) if rng.random() < 0.5 else None) for p in payloads
            )
            events: list[Any] = []
            transport, inner = FakeTransport(), Inner()
            r = FrameReceiver(
                transport,  # type: ignore[arg-type]
                inner,  # type: ignore[arg-type]
                lambda f, events=events: events.append(bytes(f)),
                limit,
                lambda head, size, events=events: events.append(("oversized", head, size)),
            )
            feed(r, wire, rng)
            assert events == [
                p if len(p) <= limit else ("oversized", p[:16], len(p)) for p in payloads
            ]
            assert not transport.written and not transport.closed

    asyncio.run(body())


def test_a_large_frame_is_read_into_its_own_buffer_without_a_copy() -> None:
    async def body() -> None:
        r, _, _, got = receiver()
        payload = os.urandom(1 << 20)
        wire = frame(payload)
        first = r.get_buffer(-1)
        first[:100] = wire[:100]
        r.buffer_updated(100)
        own = r.get_buffer(-1)  # the frame's buffer, past the 90 payload bytes already in
        assert len(own.obj) == len(payload) and len(own) == len(payload) - (100 - 10)
        own[:] = wire[100:]
        r.buffer_updated(len(own))
        (g,) = got
        assert g.obj is own.obj and bytes(g) == payload

    asyncio.run(body())


@pytest.mark.parametrize(
    ("wire", "code", "reason"),
    [
        (frame(b"hi", opcode=0x1), WSCloseCode.UNSUPPORTED_DATA, b"binary, got TEXT"),
        (frame(b"ab", fin=False), WSCloseCode.PROTOCOL_ERROR, b"fragmented"),
        (frame(b"ab", opcode=0x0), WSCloseCode.PROTOCOL_ERROR, b"fragmented"),
        (frame(b"ab", rsv=0x40), WSCloseCode.PROTOCOL_ERROR, b"compressed"),
        (frame(b"x" * 200, opcode=0x9), WSCloseCode.PROTOCOL_ERROR, b"control frame"),
        (frame(b"x" * 101), WSCloseCode.MESSAGE_TOO_BIG, b"exceeds the limit of 100"),
        (frame(b"ab", opcode=0x5), WSCloseCode.PROTOCOL_ERROR, b"unknown opcode 5"),
    ],
)
def test_a_frame_no_raftlog_stream_sends_closes_it_with_the_code_that_says_why(
    wire: bytes, code: int, reason: bytes
) -> None:
    async def body() -> None:
        r, transport, _, got = receiver(max_frame=100)
        feed(r, frame(b"before") + wire + frame(b"after"), random.Random(1))
        assert got == [b"before"]  # what came before is handled, nothing after
        (close,) = transport.written
        assert close[0] == 0x88 and struct.unpack("!H", close[2:4])[0] == code
        assert reason in close[4:]
        assert transport.closed

    asyncio.run(body())


def test_a_ping_is_answered_a_close_is_answered_and_ends_reading() -> None:
    async def body() -> None:
        r, transport, inner, got = receiver()
        feed(r, frame(b"p1", opcode=0x9) + frame(b"", opcode=0xA) + frame(b"data"),
             random.Random(2))  # fmt: skip
        assert transport.written == [bytes((0x8A, 2)) + b"p1"] and got == [b"data"]
        feed(r, frame(struct.pack("!H", 1000), opcode=0x8), random.Random(3))
        assert transport.written[-1][:4] == bytes((0x88, 2)) + struct.pack("!H", 1000)
        assert transport.closed
        r.pause_writing()
        r.resume_writing()
        r.connection_lost(None)
        assert inner.calls == ["pause", "resume", "lost"] and r.done.done()

    asyncio.run(body())


def test_a_handler_error_closes_the_stream_instead_of_leaving_it_half_read() -> None:
    async def body() -> None:
        transport, inner = FakeTransport(), Inner()

        def broken(_: Any) -> None:
            raise ValueError("boom")

        r = FrameReceiver(transport, inner, broken, 0)  # type: ignore[arg-type]
        feed(r, frame(b"x") + frame(b"y"), random.Random(4))
        (close,) = transport.written
        assert struct.unpack("!H", close[2:4])[0] == WSCloseCode.INTERNAL_ERROR
        assert b"ValueError: boom" in close and transport.closed

    asyncio.run(body())


class Appends(NodeStub):
    """A follower that answers each append with the size of its first batch's payload."""

    def __init__(self) -> None:
        self.payloads: list[Any] = []

    async def handle_peer(self, message: Any) -> Any:
        self.payloads.append(message.batches[0].payload)
        return AppendEntriesReply(message.group, 1, message.source_node, message.term, 0,
                                  len(message.batches[0].payload), -1, -1, message.seq)  # fmt: skip


def test_a_real_stream_delivers_large_appends_as_views_of_their_frames_and_shuts_down_at_once() -> (
    None
):
    """Appends of 4 MiB over the real server: each batch's payload is a view into the
    frame's own buffer (no copy); the node's shutdown closes the stream at once (it is
    no longer aiohttp's to close, which would wait for its close timeout)."""

    async def body() -> None:
        node = Appends()
        runner = aiohttp.web.AppRunner(make_app(node, max_request_bytes=8 << 20), access_log=None)
        address = await serve_on_loopback(runner)
        t = StreamTransport(2, {1: address})
        try:
            async with asyncio.timeout(BOUND_S):
                sizes = [4 << 20, 10, 300_000, 4 << 20]
                for i, n in enumerate(sizes):
                    batch = RecordBatch.create(bytes([i]) * n, 1, timestamp_ms=0)
                    req = AppendEntriesRequest(1, 2, 1, 3, i - 1, 3 if i else 0, -1, False,
                                               [batch.stamped(i, 3)], seq=i + 1)  # fmt: skip
                    reply = await t.send(1, req)
                    assert reply.last_matched_offset == n
                assert [bytes(p[:1]) * len(p) == bytes(p) for p in node.payloads] == [True] * 4
                big = [p for p in node.payloads if len(p) > 1 << 20]
                # views into each frame's own buffer, not copies
                assert all(isinstance(p, memoryview) and len(p.obj) > len(p) for p in big)
                started = time.monotonic()
                await runner.cleanup()
                assert time.monotonic() - started < 2.0
        finally:
            await t.close()
            await runner.cleanup()

    asyncio.run(body())


def test_a_frame_that_is_not_a_stream_frame_closes_the_stream_with_protocol_error() -> None:
    async def body() -> None:
        runner = aiohttp.web.AppRunner(make_app(Appends(), max_request_bytes=1 << 20),
                                       access_log=None)  # fmt: skip
        address = await serve_on_loopback(runner)
        try:
            async with asyncio.timeout(BOUND_S), aiohttp.ClientSession() as session:
                ws = await session.ws_connect(f"http://{address}{STREAM_PATH}")
                await ws.send_bytes(b"\x01")  # shorter than a request id
                msg = await ws.receive()
                assert msg.type is aiohttp.WSMsgType.CLOSE
                assert msg.data == WSCloseCode.PROTOCOL_ERROR and "truncated" in msg.extra
                # a well-formed request on a new stream is answered
                ws = await session.ws_connect(f"http://{address}{STREAM_PATH}")
                batch = RecordBatch.create(b"z" * 70_000, 1, timestamp_ms=0).stamped(0, 1)
                req = AppendEntriesRequest(1, 2, 1, 1, -1, 0, -1, False, [batch], seq=1)
                await ws.send_bytes(stream_frame(9, req))
                reply = await ws.receive()
                request_id, answer = split_frame(reply.data)
                assert request_id == 9 and codec.decode(answer).last_matched_offset == 70_000
                await ws.close()
        finally:
            await runner.cleanup()

    asyncio.run(body())
