"""The replication stream (raftlog.rpc.transport.StreamTransport against make_app's
``/raft/stream``): framing, multiplexing, failure and authentication.

Every test runs a real aiohttp server on 127.0.0.1 with a scripted node, and
every wait is bounded (``asyncio.timeout``), so a hang fails instead of blocking.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import socket
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from rpc_helpers import NodeStub, serve_on_loopback

from raftlog.client import frame_records
from raftlog.faults.proxy import TcpProxy
from raftlog.raft.errors import PeerRefused, TransportError
from raftlog.raft.messages import (
    AppendEntriesRequest,
    TimeoutNowReply,
    TimeoutNowRequest,
    VoteReply,
    VoteRequest,
)
from raftlog.rpc import codec, transport
from raftlog.rpc.messages import ErrorCode, ErrorResponse
from raftlog.rpc.peer import STREAM_PATH, split_frame, stream_frame
from raftlog.rpc.server import AuthPolicy, RequestError, make_app
from raftlog.rpc.transport import StreamTransport, UnmaskedWebSocket
from raftlog.storage.batch import RecordBatch

CLIENT, PEER = "client-secret", "peer-secret"
BOUND_S = 10.0  # no test step may take longer: a hang is a failure


def vote(term: int) -> VoteRequest:
    return VoteRequest(1, 2, 1, term, False, 0, 0, False)


class ScriptedNode(NodeStub):
    """A node whose replies echo the request's term; a request waits for its gate."""

    def __init__(self) -> None:
        self.gates: dict[int, asyncio.Event] = {}
        self.seen: list[Any] = []
        self.fail: dict[int, Exception] = {}

    async def handle_peer(self, message: Any) -> Any:
        self.seen.append(message)
        gate = self.gates.get(message.term)
        if gate is not None:
            await gate.wait()
        if message.term in self.fail:
            raise self.fail[message.term]
        if isinstance(message, TimeoutNowRequest):
            return TimeoutNowReply(message.group, 1, message.source_node, message.term, True)
        return VoteReply(message.group, 1, message.source_node, message.term, False, True, True)

    async def forward_client(
        self, route: str, message: Any, body: bytes, authorization: str
    ) -> tuple[int, bytes | memoryview] | None:
        raise AssertionError("no client calls here")


class Server:
    """make_app on 127.0.0.1, counting the stream handshakes it accepted."""

    def __init__(self, node: ScriptedNode, auth: AuthPolicy | None = None) -> None:
        self.node = node
        self.handshakes = 0
        self.app = make_app(node, auth=auth, max_request_bytes=1 << 20)

        @web.middleware
        async def count(request: web.Request, handler: Any) -> web.StreamResponse:
            if request.path == STREAM_PATH:
                self.handshakes += 1
            return await handler(request)

        self.app.middlewares.insert(0, count)
        self.runner = web.AppRunner(self.app, access_log=None)
        self.address = ""

    async def __aenter__(self) -> Server:
        self.address = await serve_on_loopback(self.runner)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


@contextlib.asynccontextmanager
async def transport_to(address: str, **kw: Any) -> AsyncIterator[StreamTransport]:
    t = StreamTransport(2, {1: address}, **kw)
    try:
        yield t
    finally:
        await t.close()


def run(test: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(BOUND_S * 3):
            await test()

    asyncio.run(bounded())


async def settle(predicate: Callable[[], bool], what: str) -> None:
    """Wait (bounded in time and count) until ``predicate()`` holds."""
    for _ in range(int(BOUND_S / 0.01)):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


def test_replies_out_of_order_are_matched_by_id_on_one_stream() -> None:
    async def body() -> None:
        node = ScriptedNode()
        terms = [5, 6, 7, 8]
        node.gates = {t: asyncio.Event() for t in terms}
        async with Server(node) as server, transport_to(server.address) as t:
            calls = [asyncio.create_task(t.send(1, vote(term))) for term in terms]
            await settle(lambda: len(node.seen) == len(terms), "every request to arrive")
            # answer in reverse order: each caller must still get the reply to its own request
            for term in reversed(terms):
                node.gates[term].set()
                await asyncio.sleep(0.02)
            replies = await asyncio.gather(*calls)
            assert [r.term for r in replies] == terms
            assert all(isinstance(r, VoteReply) for r in replies)
            assert server.handshakes == 1  # every request multiplexed on the one stream

    run(body)


def test_a_cut_link_fails_every_pending_request_and_the_next_send_reconnects() -> None:
    async def body() -> None:
        node = ScriptedNode()
        node.gates = {t: asyncio.Event() for t in (11, 12, 13)}  # never set: stuck in flight
        host, port = "127.0.0.1", 0
        async with Server(node) as server:
            host, _, port_s = server.address.rpartition(":")
            port = int(port_s)
            async with (
                TcpProxy(host, port, name="link") as proxy,
                transport_to(server.address, routes={1: proxy.address}, timeout_s=BOUND_S) as t,
            ):
                pending = [asyncio.create_task(t.send(1, vote(term))) for term in (11, 12, 13)]
                await settle(lambda: len(node.seen) == 3, "the requests to arrive")
                started = asyncio.get_running_loop().time()
                proxy.cut()
                results = await asyncio.gather(*pending, return_exceptions=True)
                # failed by the stream's end, not by the (long) request timeout
                assert asyncio.get_running_loop().time() - started < BOUND_S / 2
                assert all(isinstance(r, TransportError) for r in results), results
                assert all("stream" in str(r) for r in results), results
                proxy.heal()
                reply = await t.send(1, vote(20))
                assert reply.term == 20
                assert server.handshakes == 2

    run(body)


def test_a_silent_link_is_dropped_after_a_timeout_and_reopened() -> None:
    """Bytes still reach the peer but nothing comes back (no reset, no close): a
    timeout with nothing received closes the stream, so the next send handshakes
    anew instead of waiting on a dead stream forever."""

    async def body() -> None:
        async with Server(ScriptedNode()) as server:
            host, _, port = server.address.rpartition(":")
            async with (
                TcpProxy(host, int(port), name="link") as proxy,
                transport_to(server.address, routes={1: proxy.address}, timeout_s=0.5) as t,
            ):
                assert (await t.send(1, vote(1))).term == 1
                proxy.drop_responses()
                with pytest.raises(TransportError, match="timed out"):
                    await t.send(1, vote(2))
                assert server.handshakes == 1
                with pytest.raises(TransportError):
                    await t.send(1, vote(3))  # a new handshake (its answer is dropped too)
                assert server.handshakes == 2
                proxy.heal()
                # past the handshake's own bound (the timeout): the attempt begun while
                # responses were dropped has failed by now, and the next send starts anew
                await asyncio.sleep(0.6)
                assert (await t.send(1, vote(4))).term == 4

    run(body)


def test_an_idle_stream_outlives_the_request_timeout() -> None:
    async def body() -> None:
        async with (
            Server(ScriptedNode()) as server,
            transport_to(server.address, timeout_s=0.3) as t,
        ):
            assert (await t.send(1, vote(1))).term == 1
            await asyncio.sleep(0.8)
            assert (await t.send(1, vote(2))).term == 2
            assert server.handshakes == 1

    run(body)


def test_a_slow_request_times_out_without_dropping_a_busy_stream() -> None:
    async def body() -> None:
        node = ScriptedNode()
        node.gates = {9: asyncio.Event()}  # never answered
        async with Server(node) as server, transport_to(server.address, timeout_s=0.5) as t:
            slow = asyncio.create_task(t.send(1, vote(9)))
            # other replies keep arriving while the slow one waits: the link is alive
            while not slow.done():
                await t.send(1, vote(1))
                await asyncio.sleep(0.05)
            with pytest.raises(TransportError, match="timed out"):
                await slow
            assert (await t.send(1, vote(2))).term == 2
            assert server.handshakes == 1

    run(body)


@pytest.mark.parametrize(
    ("token", "status"),
    [(None, 401), ("wrong", 401), (CLIENT, 403)],
    ids=["none", "wrong", "client"],
)
def test_the_stream_takes_the_peer_token_only(token: str | None, status: int) -> None:
    async def body() -> None:
        node = ScriptedNode()
        auth = AuthPolicy(client_token=CLIENT, peer_token=PEER, open_status=False)
        async with Server(node, auth) as server:
            async with transport_to(server.address, peer_token=token) as t:
                with pytest.raises(TransportError, match=f"refused the raft stream: HTTP {status}"):
                    await t.send(1, vote(1))
            assert node.seen == []  # refused before anything reached the node
            async with transport_to(server.address, peer_token=PEER) as t:
                assert (await t.send(1, vote(1))).term == 1

    run(body)


def test_error_replies_fail_only_their_request() -> None:
    async def body() -> None:
        node = ScriptedNode()
        node.fail = {
            3: RequestError(ErrorCode.STALE_TERM, "term 3 is stale"),
            4: RuntimeError("boom"),
        }
        async with Server(node) as server, transport_to(server.address) as t:
            with pytest.raises(TransportError, match="term 3 is stale"):
                await t.send(1, vote(3))
            with pytest.raises(TransportError, match="RuntimeError: boom"):
                await t.send(1, vote(4))
            assert (await t.send(1, vote(5))).term == 5
            assert server.handshakes == 1

    run(body)


async def raw_stream(
    session: aiohttp.ClientSession, address: str
) -> aiohttp.ClientWebSocketResponse:
    return await session.ws_connect(f"ws://{address}{STREAM_PATH}")


def test_the_server_answers_a_bad_frame_under_its_id_and_closes_on_a_frame_without_one() -> None:
    async def body() -> None:
        node = ScriptedNode()
        async with Server(node) as server, aiohttp.ClientSession() as session:
            ws = await raw_stream(session, server.address)
            good = codec.encode(vote(1))
            bad = [
                struct.pack("<Q", 7) + good[:-3],  # truncated
                struct.pack("<Q", 8) + b"\xff\xff" + good[2:],  # unknown type id
                struct.pack("<Q", 9) + codec.encode(VoteReply(1, 1, 2, 1, False, True, True)),
            ]
            for frame in bad:
                await ws.send_bytes(frame)
            await ws.send_bytes(stream_frame(10, vote(1)))
            replies = {}
            for _ in range(4):
                msg = await ws.receive(timeout=BOUND_S)
                request_id, reply = split_frame(msg.data)
                replies[request_id] = codec.decode(reply)
            for request_id in (7, 8, 9):
                err = replies[request_id]
                assert isinstance(err, ErrorResponse), err
                assert err.code == ErrorCode.INVALID_REQUEST and "malformed" in err.message
            assert isinstance(replies[10], VoteReply)
            assert len(node.seen) == 1  # only the valid request reached the node
            await ws.send_bytes(b"\x01\x02\x03")  # too short to carry an id
            msg = await ws.receive(timeout=BOUND_S)
            assert msg.type is aiohttp.WSMsgType.CLOSE
            assert msg.data == aiohttp.WSCloseCode.PROTOCOL_ERROR
            await ws.close()
            # the node is unharmed: a new stream works
            async with transport_to(server.address) as t:
                assert (await t.send(1, vote(2))).term == 2

    run(body)


class FakePeer:
    """A raw stream server scripted per request term, for the client's side."""

    def __init__(self, script: Callable[[web.WebSocketResponse, int, Any], Awaitable[None]]):
        self.script = script
        self.app = web.Application()
        self.app.router.add_get(STREAM_PATH, self.handle)
        self.runner = web.AppRunner(self.app)
        self.address = ""

    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            request_id, body = split_frame(msg.data)
            await self.script(ws, request_id, codec.decode(body))
        return ws

    async def __aenter__(self) -> FakePeer:
        self.address = await serve_on_loopback(self.runner)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.shutdown()
        await self.runner.cleanup()


def test_an_undecodable_or_mistyped_reply_fails_that_request_only() -> None:
    async def script(ws: web.WebSocketResponse, request_id: int, msg: Any) -> None:
        ok = VoteReply(1, 1, 2, msg.term, False, True, True)
        if msg.term == 1:
            await ws.send_bytes(stream_frame(request_id, ok)[:-2])  # undecodable
        elif msg.term == 2:
            await ws.send_bytes(stream_frame(request_id, TimeoutNowReply(1, 1, 2, 2, True)))
        elif msg.term == 3:
            await ws.send_bytes(stream_frame(request_id + 1000, ok))  # nobody asked
            await ws.send_bytes(stream_frame(request_id, ok))
        else:
            await ws.send_bytes(b"\x00")  # no id: the stream is unusable

    async def body() -> None:
        async with FakePeer(script) as peer, transport_to(peer.address) as t:
            with pytest.raises(TransportError, match="bad reply"):
                await t.send(1, vote(1))
            with pytest.raises(TransportError, match="expected a VoteReply, got TimeoutNowReply"):
                await t.send(1, vote(2))
            assert (await t.send(1, vote(3))).term == 3
            with pytest.raises(TransportError, match="stream frame truncated"):
                await t.send(1, vote(4))
            # the next send opens a new stream, on which the peer answers again
            assert (await t.send(1, vote(3))).term == 3

    run(body)


def test_unknown_peers_non_requests_and_a_closed_transport_are_refused() -> None:
    async def body() -> None:
        async with Server(ScriptedNode()) as server:
            t = StreamTransport(2, {1: server.address})
            with pytest.raises(TransportError, match="unknown peer node 5"):
                await t.send(5, vote(1))
            with pytest.raises(TransportError, match="not a peer request"):
                await t.send(1, VoteReply(1, 1, 2, 1, False, True, True))
            assert (await t.send(1, TimeoutNowRequest(1, 2, 1, 3))).term == 3
            await t.close()
            with pytest.raises(TransportError, match="closed"):
                await t.send(1, vote(1))

    run(body)


def _mutate(rng: random.Random, body: bytes) -> bytes:
    choice = rng.randrange(4)
    if choice == 0:
        return body[: rng.randrange(len(body))]  # truncated
    if choice == 1:
        flipped = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        return bytes(flipped)
    if choice == 2:
        cut = rng.randrange(len(body))
        return body[:cut] + rng.randbytes(rng.randint(1, 16)) + body[cut:]
    return rng.randbytes(rng.randint(0, 64))


def test_mutated_frames_are_refused_under_their_id_and_never_reach_the_node() -> None:
    """Valid peer requests mutated (truncated, bit-flipped, spliced, random): every
    frame is answered once under its own id; a body the codec refuses gets
    INVALID_REQUEST and never reaches the node; the stream and node stay up."""
    batch = RecordBatch.create(frame_records([b"fuzz"]), 1)
    samples = [
        codec.encode(vote(3)),
        codec.encode(TimeoutNowRequest(1, 2, 1, 4)),
        codec.encode(AppendEntriesRequest(1, 2, 1, 5, 0, 1, 0, True, [batch], 9)),
    ]
    rng = random.Random(19)

    async def body() -> None:
        node = ScriptedNode()
        async with Server(node) as server, aiohttp.ClientSession() as session:
            ws = await raw_stream(session, server.address)
            expected_refused: set[int] = set()
            decodable = 0
            for request_id in range(1, 401):
                frame = _mutate(rng, rng.choice(samples))
                try:
                    codec.decode(frame)
                    decodable += 1
                except codec.CodecError:
                    expected_refused.add(request_id)
                await ws.send_bytes(stream_frame(request_id, vote(1))[:8] + frame)
            answered: dict[int, Any] = {}
            while len(answered) < 400:
                msg = await ws.receive(timeout=BOUND_S)
                assert msg.type is aiohttp.WSMsgType.BINARY, msg
                request_id, reply = split_frame(msg.data)
                assert request_id not in answered
                answered[request_id] = codec.decode(reply)
            assert len(expected_refused) >= 300  # the mutations mostly make bad input
            for request_id in expected_refused:
                err = answered[request_id]
                assert isinstance(err, ErrorResponse), err
                assert err.code == ErrorCode.INVALID_REQUEST and "malformed" in err.message
            # only what decoded (and is a peer request) reached the node
            assert len(node.seen) <= decodable
            await ws.close()
            async with transport_to(server.address) as t:
                assert (await t.send(1, vote(2))).term == 2

    run(body)


def test_a_handshake_the_peer_abandoned_is_dropped_quietly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A peer whose connect timed out (this node was stopped) has closed its socket by
    the time the upgrade is answered: no error is logged, the node serves on."""

    async def body() -> None:
        server = Server(ScriptedNode())

        @web.middleware
        async def late(request: web.Request, handler: Any) -> web.StreamResponse:
            await asyncio.sleep(0.3)  # the answer comes after the peer has gone
            return await handler(request)

        server.app.middlewares.insert(0, late)
        async with server:
            host, _, port = server.address.rpartition(":")
            _, writer = await asyncio.open_connection(host, int(port))
            writer.write(
                f"GET {STREAM_PATH} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n".encode()
            )
            await writer.drain()
            writer.close()
            await settle(lambda: server.handshakes == 1, "the handshake to arrive")
            await asyncio.sleep(0.5)  # past the late answer
            async with transport_to(server.address) as t:
                assert (await t.send(1, vote(2))).term == 2

    with caplog.at_level(logging.ERROR):
        run(body)
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def _append_with(*payload_sizes: int) -> AppendEntriesRequest:
    rng = random.Random(sum(payload_sizes))
    batches, offset = [], 1
    for size in payload_sizes:
        batch = RecordBatch.create(frame_records([rng.randbytes(size)]), 1).stamped(offset, 5)
        batches.append(batch)
        offset += 1
    return AppendEntriesRequest(1, 2, 1, 5, 0, 0, 0, True, batches, 9)


@pytest.mark.parametrize(
    "message",
    [
        vote(7),  # under 126 bytes: the 7-bit length
        _append_with(1_000),  # the 16-bit length
        # the 64-bit length; batches of 64 KiB and more go to writelines as they are,
        # between the small fields joined: five buffers, one frame
        _append_with(70_000, 10, 200_000),
    ],
    ids=["short", "16-bit", "64-bit-gathered"],
)
def test_stream_frames_go_unmasked_and_the_server_reads_them(message):
    """A raft stream's frames carry no mask (node to node, no browser): the first
    frame on the wire is one binary frame (FIN set), its mask bit clear and the
    request's bytes as they are, however many buffers it was written from;
    make_app's server reads such frames (the request reaches the node)."""
    import base64
    import hashlib

    seen: dict[str, bytes] = {}

    async def handshake_then_read_one_frame(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        key = next(
            line.split(b":", 1)[1].strip()
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"sec-websocket-key:")
        )
        accept = base64.b64encode(
            hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()
        )
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
        )
        fin_opcode, second = await reader.readexactly(2)
        seen["fin_opcode"] = bytes([fin_opcode])
        length = second & 0x7F
        if length == 126:
            (length,) = struct.unpack(">H", await reader.readexactly(2))
        elif length == 127:
            (length,) = struct.unpack(">Q", await reader.readexactly(8))
        seen["mask_bit"] = bytes([second & 0x80])
        seen["payload"] = await reader.readexactly(length)
        writer.close()

    async def test() -> None:
        server = await asyncio.start_server(handshake_then_read_one_frame, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with transport_to(f"127.0.0.1:{port}", timeout_s=2.0) as t:
                with pytest.raises(TransportError):
                    await t.send(1, message)
        finally:
            server.close()
            await server.wait_closed()
        assert seen["fin_opcode"] == b"\x82"
        assert seen["mask_bit"] == b"\x00"
        _request_id, frame = split_frame(seen["payload"])
        assert bytes(frame) == codec.encode(message)
        assert codec.decode(frame) == message
        # and the real server reads unmasked frames: the request reaches the node
        node = ScriptedNode()
        async with Server(node) as real, transport_to(real.address) as t:
            try:
                reply = await t.send(1, message)
                assert reply.term == message.term
            except TransportError:  # the scripted node answers an append with a vote
                assert not isinstance(message, VoteRequest)
            assert node.seen == [message]

    run(test)


def test_send_now_writes_before_returning_and_falls_back_when_it_cannot(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``send_now`` puts the request on the open stream in the call itself: the peer
    has it with no further turn of the sender's code (here: the sender never yields
    between the call and the check, the peer reads it while the sender only waits).
    No stream open yet, a closed transport, or a message that is not a peer request:
    None, and ``send`` does it (opening the stream) or says why not. Its replies
    match by id like any other, 20 at once, answered in reverse order."""

    async def body() -> None:
        node = ScriptedNode()
        async with Server(node) as server, transport_to(server.address, timeout_s=BOUND_S) as t:
            assert t.send_now(1, vote(1)) is None  # nothing open: send opens it
            assert (await t.send(1, vote(1))).term == 1
            terms = list(range(100, 120))
            node.gates = {term: asyncio.Event() for term in terms}
            written: list[int] = []
            write_parts = UnmaskedWebSocket.write_parts

            def recording(ws: UnmaskedWebSocket, parts: list[bytes | memoryview]) -> bool:
                written.append(sum(len(p) for p in parts))
                return write_parts(ws, parts)

            monkeypatch.setattr(UnmaskedWebSocket, "write_parts", recording)
            pending = []
            for n, term in enumerate(terms, 1):
                sent = t.send_now(1, vote(term))
                assert sent is not None
                assert len(written) == n, "send_now returned before the frame was written"
                pending.append(sent)
            await settle(lambda: len(node.seen) == 21, "the 20 requests written by send_now")
            for term in reversed(terms):
                node.gates[term].set()
            replies = await asyncio.gather(*pending)
            assert [r.term for r in replies] == terms
            assert server.handshakes == 1
            assert t.send_now(1, b"not a request") is None
            with pytest.raises(TransportError, match="not a peer request"):
                await t.send(1, b"not a request")
        assert t.send_now(1, vote(2)) is None  # closed

    run(body)


def test_send_now_reply_fails_when_the_link_is_cut_and_times_out_on_a_silent_one() -> None:
    async def body() -> None:
        node = ScriptedNode()
        node.gates = {7: asyncio.Event()}  # never answered
        async with Server(node) as server:
            host, _, port = server.address.rpartition(":")
            async with (
                TcpProxy(host, int(port), name="link") as proxy,
                transport_to(server.address, routes={1: proxy.address}, timeout_s=0.5) as t,
            ):
                assert (await t.send(1, vote(1))).term == 1
                stuck = t.send_now(1, vote(7))
                assert stuck is not None
                await settle(lambda: len(node.seen) == 2, "the stuck request to arrive")
                proxy.cut()
                with pytest.raises(TransportError, match="stream"):
                    await stuck
                proxy.heal()
                assert (await t.send(1, vote(2))).term == 2  # reopened
                proxy.drop_responses()
                silent = t.send_now(1, vote(3))
                assert silent is not None
                with pytest.raises(TransportError, match="timed out"):
                    await silent
                assert t.send_now(1, vote(4)) is None  # the silent stream was dropped

    run(body)


def test_a_refused_peer_costs_one_connect_per_reopen_interval() -> None:
    """After an open that failed, sends to that peer fail at once (the same error) for
    REOPEN_AFTER_S instead of each trying a connection of its own (a node killed under
    a thousand groups drew a connect per vote request and append); then one send tries
    again and reaches the peer once it listens."""

    async def body() -> None:
        accepted = 0

        async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            writer.close()  # no handshake: the open fails

        dropper = await asyncio.start_server(drop, "127.0.0.1", 0)
        port = dropper.sockets[0].getsockname()[1]
        async with transport_to(f"127.0.0.1:{port}", timeout_s=BOUND_S) as t:
            errors = []
            with pytest.raises(TransportError):
                await t.send(1, vote(0))
            per_open = accepted  # aiohttp may try a dropped handshake twice
            assert per_open in (1, 2), per_open
            for term in range(1, 51):
                with pytest.raises(TransportError) as caught:
                    await t.send(1, vote(term))
                errors.append(str(caught.value))
            assert accepted == per_open, accepted
            assert all("cannot open the raft stream to node 1" in e for e in errors), errors[:2]
            assert f"not retried for {transport.REOPEN_AFTER_S:g} s" in errors[-1]
            dropper.close()
            await dropper.wait_closed()
            await asyncio.sleep(transport.REOPEN_AFTER_S + 0.05)
            async with Server(ScriptedNode()) as server:
                t.add_peer(1, server.address)  # the peer back (here at another port)
                assert (await t.send(1, vote(60))).term == 60
                assert server.handshakes == 1

    run(body)


def test_a_failed_open_is_retried_after_the_reopen_interval() -> None:
    async def body() -> None:
        accepted = 0

        async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal accepted
            accepted += 1
            writer.close()

        dropper = await asyncio.start_server(drop, "127.0.0.1", 0)
        port = dropper.sockets[0].getsockname()[1]
        async with transport_to(f"127.0.0.1:{port}", timeout_s=BOUND_S) as t:
            counts = []
            for _ in range(3):
                with pytest.raises(TransportError):
                    await t.send(1, vote(1))
                with pytest.raises(TransportError):
                    await t.send(1, vote(2))
                counts.append(accepted)
                await asyncio.sleep(transport.REOPEN_AFTER_S + 0.05)
            per_open = counts[0]
            assert counts == [per_open, 2 * per_open, 3 * per_open], counts
        dropper.close()
        await dropper.wait_closed()

    run(body)


def test_a_refused_connect_is_told_apart_from_a_peer_that_answers_badly() -> None:
    """Nothing listening at the peer's address (a killed node): PeerRefused, also for
    the sends held after it; node liveness judges such a peer on the clock. A peer that
    accepts the connection and then drops it (alive, or at least listening): a plain
    TransportError, judged in rounds."""

    async def body() -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]  # closed on exit: nothing listens there
        async with transport_to(f"127.0.0.1:{free}", timeout_s=BOUND_S) as t:
            with pytest.raises(PeerRefused, match="cannot open the raft stream to node 1"):
                await t.send(1, vote(1))
            with pytest.raises(PeerRefused, match="not retried for"):
                await t.send(1, vote(2))

        async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        dropper = await asyncio.start_server(drop, "127.0.0.1", 0)
        port = dropper.sockets[0].getsockname()[1]
        try:
            async with transport_to(f"127.0.0.1:{port}", timeout_s=BOUND_S) as t:
                with pytest.raises(TransportError) as caught:
                    await t.send(1, vote(1))
                assert not isinstance(caught.value, PeerRefused), caught.value
        finally:
            dropper.close()
            await dropper.wait_closed()

    run(body)
