"""The client stream: the Python client's calls as frames on one WebSocket per node
(``GET /v1/stream``), small and large, against make_app's real server.

What a user sees must not depend on the path a call took: the same answers, the
same errors with the same text, each answer to its own call however many are in
flight, and a node that goes away fails the calls in flight at once.
"""

from __future__ import annotations

import asyncio
import gc
import random
import warnings
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from raftlog.client import (
    ClusterUnavailableError,
    InvalidRequestError,
    RaftlogClient,
    RecordTooLargeError,
    UnauthorizedError,
)
from raftlog.client.calls import STREAM_MAX_REQUEST_BYTES
from raftlog.rpc.messages import (
    CLIENT_STREAM_PATH,
    ErrorCode,
    FetchRequest,
    FetchResponse,
    MetadataRequest,
    MetadataResponse,
    NodeInfo,
    PartitionInfo,
    ProduceBatch,
    ProduceRequest,
    ProduceResponse,
    TopicInfo,
)
from raftlog.rpc.server import AuthPolicy, RequestError, make_app
from raftlog.rpc.transport import UnmaskedWebSocket, open_frame_stream
from raftlog.storage.batch import RecordBatch
from tests.rpc.rpc_helpers import NodeStub, serve_on_loopback

BOUND_S = 30.0  # no test may take longer: a hang is a failure


class ProduceNode(NodeStub):
    """Leads t/0; a produce answers the offset written in its payload's first 8 bytes,
    after a random pause (so answers overtake each other), or the error it names."""

    def __init__(self, seed: int = 0) -> None:
        self.address = ""
        self.rng = random.Random(seed)
        self.payloads: list[bytes] = []
        self.fetchable: dict[int, bytes] = {}  # offset -> the payload a fetch there answers
        self.counted: list[tuple[str, int]] = []  # (route, status) of every answer
        self.hold = asyncio.Event()
        self.hold.set()

    def count_request(self, route: str, status: int) -> None:
        self.counted.append((route, status))

    async def handle_client(self, message: Any) -> Any:
        if isinstance(message, MetadataRequest):
            return MetadataResponse(
                1,
                1,
                [NodeInfo(1, self.address)],
                [TopicInfo("t", 1, [PartitionInfo(0, 1, 1, [1])])],
            )
        if isinstance(message, FetchRequest):
            # the batch written at the offset asked for, as its payload sizes it
            batch = RecordBatch.create(self.fetchable[message.offset]).stamped(message.offset, 1)
            return FetchResponse([batch], message.offset + 1, message.offset + 1, 0, -1)
        assert isinstance(message, ProduceRequest)
        payload = bytes(message.batches[0].payload)
        self.payloads.append(payload)
        await self.hold.wait()
        if payload.startswith(b"refuse"):
            raise RequestError(ErrorCode.INVALID_REQUEST, f"refused: {payload[:12]!r}")
        await asyncio.sleep(self.rng.random() * 0.005)
        offset = int.from_bytes(payload[:8], "big")
        return ProduceResponse(offset, offset + message.batches[0].record_count - 1)


class Server:
    """make_app on loopback, counting client stream handshakes and POSTs."""

    def __init__(
        self, node: ProduceNode, auth: AuthPolicy | None = None, max_request_bytes: int = 8 << 20
    ) -> None:
        self.node = node
        self.handshakes = 0
        self.posts = 0
        app = make_app(node, auth=auth, max_request_bytes=max_request_bytes)

        @web.middleware
        async def count(request: web.Request, handler: Any) -> web.StreamResponse:
            if request.path == CLIENT_STREAM_PATH:
                self.handshakes += 1
            elif request.path == "/v1/produce":
                self.posts += 1
            return await handler(request)

        app.middlewares.insert(0, count)
        self.runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)

    async def __aenter__(self) -> Server:
        self.node.address = await serve_on_loopback(self.runner)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.node.hold.set()
        await self.runner.cleanup()


def run(test: Any) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(BOUND_S):
            await test()

    asyncio.run(bounded())


def payload_for(offset: int, size: int = 100) -> bytes:
    return offset.to_bytes(8, "big") + bytes(size - 8)


@pytest.mark.parametrize("seed", range(5))
def test_many_calls_in_flight_on_one_stream_each_get_their_own_answer(seed: int) -> None:
    """400 produces from 64 tasks share one stream (one handshake, no POST); answers
    come back out of order and each call gets the offset its own payload named."""

    async def body() -> None:
        async with Server(ProduceNode(seed)) as server:
            async with RaftlogClient(server.node.address) as client:
                order = list(range(400))
                random.Random(seed).shuffle(order)
                queue = asyncio.Queue[int]()
                for n in order:
                    queue.put_nowait(n)
                got: dict[int, int] = {}

                async def worker() -> None:
                    while not queue.empty():
                        n = queue.get_nowait()
                        result = await client.produce("t", 0, [(payload_for(n * 10), 3)])
                        got[n] = result.base_offset
                        assert result.last_offset == n * 10 + 2

                await asyncio.gather(*(worker() for _ in range(64)))
            assert got == {n: n * 10 for n in range(400)}
            assert server.handshakes == 1
            assert server.posts == 0

    run(body)


@pytest.mark.parametrize("size", [STREAM_MAX_REQUEST_BYTES + 1, 64 * 1024 + 3, 4 << 20])
def test_a_large_call_goes_on_the_stream_byte_for_byte(size: int) -> None:
    """Past the one-buffer bound a call goes on the stream as its parts (never a POST on
    a plain connection): the node gets every byte, interleaved with small calls."""

    async def body() -> None:
        async with Server(ProduceNode()) as server:
            async with RaftlogClient(server.node.address) as client:
                big = payload_for(7, size) + bytes(random.Random(size).randbytes(1000))
                result, small = await asyncio.gather(
                    client.produce("t", 0, [(big, 1)]),
                    client.produce("t", 0, [(payload_for(9), 1)]),
                )
                after = await client.produce("t", 0, [(payload_for(11), 1)])
            assert (result.base_offset, small.base_offset, after.base_offset) == (7, 9, 11)
            assert sorted(server.node.payloads) == sorted([big, payload_for(9), payload_for(11)])
            assert server.posts == 0
            assert server.handshakes == 1

    run(body)


def test_a_call_past_the_nodes_bound_is_refused_as_a_post_is_and_the_stream_goes_on() -> None:
    """A request past the node's --max-request-bytes: RECORD_TOO_LARGE with the POST's
    text, its bytes dropped unread by the node, and the calls around it on the same
    stream answered (one handshake)."""

    async def body() -> None:
        limit = 256 * 1024
        async with Server(ProduceNode(), max_request_bytes=limit) as server:
            async with RaftlogClient(server.node.address) as client:
                calls = [client.produce("t", 0, [(payload_for(n), 1)]) for n in range(1, 4)] + [
                    client.produce("t", 0, [(payload_for(100, size), 1)])
                    for size in (limit, 3 * limit)
                ]
                got = await asyncio.gather(*calls, return_exceptions=True)
                after = await client.produce("t", 0, [(payload_for(5), 1)])
            assert [g.base_offset for g in got[:3]] == [1, 2, 3]
            for refused in got[3:]:
                assert isinstance(refused, RecordTooLargeError), refused
                assert f"request body exceeds the limit of {limit} bytes" in str(refused)
            assert after.base_offset == 5
            assert len(server.node.payloads) == 4  # the refused ones never reached it
            # counted under the call's route, as a refused POST is
            assert server.node.counted.count(("/v1/produce", 413)) == 2
            assert server.posts == 0
            assert server.handshakes == 1

    run(body)


def test_large_answers_arrive_whole_in_buffers_of_their_own() -> None:
    """Fetch answers from 100 B to 8 MiB, many in flight on one stream: each batch's
    payload byte for byte; a large one a read-only view into the buffer the socket
    filled (no copy of it on the client), a small one copied out."""

    async def body() -> None:
        rng = random.Random(3)
        node = ProduceNode()
        sizes = [100, 60_000, 70_000, 1 << 20, 4 << 20, 8 << 20] * 3
        node.fetchable = {n: rng.randbytes(size) for n, size in enumerate(sizes)}
        async with Server(node) as server:
            async with RaftlogClient(server.node.address) as client:
                got = await asyncio.gather(
                    *(client.fetch("t", 0, n, max_bytes=16 << 20) for n in node.fetchable)
                )
            assert server.handshakes == 1 and server.posts == 0
        for n, result in enumerate(got):
            (batch,) = result.batches
            assert batch.base_offset == n and bytes(batch.payload) == node.fetchable[n]
            if len(node.fetchable[n]) > 64 * 1024:
                assert isinstance(batch.payload, memoryview) and batch.payload.readonly
                assert not isinstance(batch.payload.obj, bytes)

    run(body)


def test_a_closed_client_leaves_no_connection_or_response_open() -> None:
    """Closing the client ends its streams on aiohttp's side too: nothing is left for
    the garbage collector to warn about (aiohttp's "Unclosed response")."""

    async def body() -> None:
        node = ProduceNode()
        node.fetchable = {0: bytes(1 << 20)}
        async with Server(node) as server, RaftlogClient(server.node.address) as client:
            await client.produce("t", 0, [(payload_for(1), 1)])
            await client.produce("t", 0, [(payload_for(2, 1 << 20), 1)])
            await client.fetch("t", 0, 0, max_bytes=2 << 20)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run(body)
        gc.collect()
    leaks = [str(w.message) for w in seen if issubclass(w.category, ResourceWarning)]
    assert leaks == []


def test_a_stream_aborted_before_its_reader_ran_closes_its_connection() -> None:
    """abort() right after the stream opened (a pool closed meanwhile): the connection
    closes at once, though the reader task that closes it otherwise never ran."""

    async def body() -> None:
        async with (
            Server(ProduceNode()) as server,
            aiohttp.ClientSession(ws_response_class=UnmaskedWebSocket) as session,
        ):
            url = f"ws://{server.node.address}{CLIENT_STREAM_PATH}"
            stream = await open_frame_stream(session, url, "node", headers={}, max_msg_size=0)
            stream.abort("closed at once")
            receiver = stream._receiver
            assert receiver is not None
            await asyncio.wait_for(asyncio.shield(receiver.done), BOUND_S)

    run(body)


def test_an_error_on_the_stream_is_the_error_a_post_gets() -> None:
    """The node's refusal reaches the caller with its code and text, and the stream
    keeps serving the next call."""

    async def body() -> None:
        async with Server(ProduceNode()) as server:
            async with RaftlogClient(server.node.address) as client:
                with pytest.raises(InvalidRequestError, match=r"refused: b'refuse-this-'"):
                    await client.produce("t", 0, [(b"refuse-this-one", 1)])
                ok = await client.produce("t", 0, [(payload_for(5), 1)])
            assert ok.base_offset == 5
            assert server.handshakes == 1

    run(body)


def test_a_refused_handshake_gets_the_nodes_reason_by_post() -> None:
    """A wrong token: the stream's upgrade is refused, and the caller gets the node's
    own message, which names the route and the token it needs."""

    async def body() -> None:
        policy = AuthPolicy(client_token="right")
        async with Server(ProduceNode(), auth=policy) as server:
            async with RaftlogClient(server.node.address, auth_token="wrong") as client:
                with pytest.raises(UnauthorizedError, match=r"metadata needs the client role"):
                    await client.produce("t", 0, [(payload_for(1), 1)])
            async with RaftlogClient(server.node.address, auth_token="right") as client:
                ok = await client.produce("t", 0, [(payload_for(3), 1)])
            assert ok.base_offset == 3

    run(body)


def test_a_node_that_goes_away_fails_the_calls_in_flight_at_once() -> None:
    """Calls waiting on a stream whose node stops fail within a moment (not at their
    timeout) as unreachable, once the node is gone for good."""

    async def body() -> None:
        node = ProduceNode()
        server = Server(node)
        await server.__aenter__()
        client = RaftlogClient(node.address, request_timeout_s=3.0)
        try:
            await client.produce("t", 0, [(payload_for(1), 1)])
            node.hold.clear()
            calls = [
                asyncio.ensure_future(client.produce("t", 0, [(payload_for(n), 1)]))
                for n in range(10)
            ]
            for _ in range(500):  # bounded: every call is at the node
                if len(node.payloads) == 11:
                    break
                await asyncio.sleep(0.01)
            assert len(node.payloads) == 11
            started = asyncio.get_running_loop().time()
            await server.__aexit__()
            results = await asyncio.gather(*calls, return_exceptions=True)
            took = asyncio.get_running_loop().time() - started
            assert all(isinstance(r, ClusterUnavailableError) for r in results), results
            assert "127.0.0.1" in str(results[0])
            assert took < 3.0 + 1.0
        finally:
            await client.close()

    run(body)


def test_a_late_answer_is_dropped_and_the_stream_serves_on() -> None:
    """A call whose attempt timed out while the node held it is retried; the first
    attempt's late answer matches nothing, and every answer is its own call's. Nothing
    at all arrived on the stream while the attempt waited, so the stream is taken
    for dead and the retry opens a new one (as the replication stream does)."""

    async def body() -> None:
        node = ProduceNode()
        async with Server(node) as server:
            async with RaftlogClient(
                node.address, request_timeout_s=5.0, attempt_timeout_s=0.3
            ) as client:
                await client.produce("t", 0, [(payload_for(1), 1)])
                node.hold.clear()
                slow = asyncio.ensure_future(client.produce("t", 0, [(payload_for(2), 1)]))
                await asyncio.sleep(0.5)  # the first attempt timed out, a retry waits
                node.hold.set()
                assert (await slow).base_offset == 2
                after = await client.produce("t", 0, [(payload_for(4), 1)])
                assert after.base_offset == 4
            assert node.payloads.count(payload_for(2)) >= 2
            assert server.handshakes == 2

    run(body)


def test_the_node_answers_a_bad_frame_under_its_id_and_serves_on() -> None:
    """Garbage and a peer's message on the client stream get INVALID_REQUEST under
    their own ids and never reach the node; the next call is answered."""
    from raftlog.raft.messages import VoteRequest
    from raftlog.rpc import codec
    from raftlog.rpc.messages import ErrorResponse
    from raftlog.rpc.peer import encoded_frame, split_frame, stream_frame

    async def body() -> None:
        node = ProduceNode()
        async with Server(node) as server, aiohttp.ClientSession() as session:
            url = f"ws://{node.address}{CLIENT_STREAM_PATH}"
            async with session.ws_connect(url) as ws:
                await ws.send_bytes(encoded_frame(5, b"\xff\x00garbage"))
                await ws.send_bytes(stream_frame(6, VoteRequest(1, 2, 1, 3, False, 0, 0, False)))
                produce = ProduceRequest("t", 0, -1, [ProduceBatch(payload_for(8), 1, 0)])
                await ws.send_bytes(stream_frame(7, produce))
                answers = {}
                for _ in range(3):
                    request_id, answer = split_frame(await ws.receive_bytes(timeout=5))
                    answers[request_id] = codec.decode(answer)
        bad, peer, ok = answers[5], answers[6], answers[7]
        assert isinstance(bad, ErrorResponse) and bad.code == ErrorCode.INVALID_REQUEST
        assert "malformed request on the client stream" in bad.message
        assert isinstance(peer, ErrorResponse) and "VoteRequest is not a client request" in (
            peer.message
        )
        assert ok == ProduceResponse(8, 8)
        assert node.payloads == [payload_for(8)]
        assert server.handshakes == 1

    run(body)


def _pattern(size: int) -> bytes:
    """``size`` bytes, each its position mod 251 (a cut or shifted answer shows)."""
    return bytes(i % 251 for i in range(size))


class FetchNode(ProduceNode):
    """Answers a fetch of t/0 with one batch whose payload is ``_pattern(size)``, the
    size named by the request's offset."""

    async def handle_client(self, message: Any) -> Any:
        from raftlog.rpc.messages import FetchRequest, FetchResponse
        from raftlog.storage.batch import RecordBatch

        if not isinstance(message, FetchRequest):
            return await super().handle_client(message)
        size = message.offset
        batch = RecordBatch.create(_pattern(size), record_count=1).stamped(message.offset, 1)
        return FetchResponse(
            batches=[batch],
            high_watermark=size + 1,
            last_stable_offset=size + 1,
            start_offset=0,
            next_offset=size + 1,
        )


def test_answers_of_every_frame_size_come_back_whole_on_the_stream() -> None:
    """Answers on the client stream of every frame-length class (7-bit, 16-bit and
    64-bit), below and past the 64 KiB gather threshold, each read back byte for
    byte, in order, on one stream."""

    async def body() -> None:
        async with Server(FetchNode()) as server:
            async with RaftlogClient(server.node.address) as client:
                for size in (1, 60, 100, 5_000, 65_000, 70_000, 300_000, 3_000_000):
                    got = await client.fetch("t", 0, size, max_bytes=8 << 20)
                    assert len(got.batches) == 1
                    assert got.batches[0].base_offset == size
                    assert got.batches[0].payload == _pattern(size)
                    assert got.high_watermark == size + 1
            assert server.handshakes == 1

    run(body)
