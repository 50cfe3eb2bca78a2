"""Client retries against a scripted fake node (no cluster): a hung attempt is retried."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from aiohttp import web

from raftlog.client import KafkaStorageError, RaftlogClient, RequestTimeoutError
from raftlog.rpc import codec
from raftlog.rpc.messages import (
    ErrorCode,
    ErrorResponse,
    MetadataResponse,
    NodeInfo,
    ProduceRequest,
    ProduceResponse,
)
from tests.client.fake_node import FakeNodeServer, Route

Handler = Callable[[ProduceRequest, int], Awaitable[object]]


class FakeNode(FakeNodeServer):
    """One node that leads partition t/0; ``on_produce(request, attempt_no)`` scripts produce."""

    def __init__(self, on_produce: Handler) -> None:
        super().__init__()
        self.on_produce = on_produce
        self.produce_requests: list[ProduceRequest] = []

    def routes(self) -> dict[str, Route]:
        return {"produce": self._produce}

    async def _produce(self, request: web.Request) -> web.Response:
        req = codec.decode(await request.read())
        assert isinstance(req, ProduceRequest)
        self.produce_requests.append(req)
        resp = await self.on_produce(req, len(self.produce_requests))
        return web.Response(body=codec.encode(resp))


@pytest.fixture
async def node_factory() -> AsyncIterator[Callable[[Handler], Awaitable[FakeNode]]]:
    nodes: list[FakeNode] = []

    async def make(on_produce: Handler) -> FakeNode:
        node = FakeNode(on_produce)
        await node.start()
        nodes.append(node)
        return node

    yield make
    for n in nodes:
        await n.stop()


async def test_a_hung_attempt_is_retried_within_the_request_timeout(node_factory) -> None:
    node: FakeNode

    async def hang_first(req: ProduceRequest, n: int) -> object:
        if n == 1:
            await node.release.wait()  # never answers while the client waits
        return ProduceResponse(7, 7)

    node = await node_factory(hang_first)
    async with RaftlogClient([node.address], request_timeout_s=3.0) as client:
        r = await client.produce(
            "t", 0, [(b"v", 1)], producer_id=4, producer_epoch=0, first_sequence=0
        )
    assert (r.base_offset, r.last_offset) == (7, 7)
    assert len(node.produce_requests) >= 2
    # the retry is the same idempotent request (rm_stm resolves it from its table)
    assert {(q.producer_id, q.first_sequence) for q in node.produce_requests} == {(4, 0)}


async def test_attempts_that_all_hang_fail_with_a_timeout_naming_the_node(node_factory) -> None:
    node: FakeNode

    async def hang(req: ProduceRequest, n: int) -> object:
        await node.release.wait()
        return ProduceResponse(0, 0)

    node = await node_factory(hang)
    async with RaftlogClient([node.address], request_timeout_s=0.6) as client:
        with pytest.raises(RequestTimeoutError, match=f"request to {node.address} timed out"):
            await client.produce("t", 0, [(b"v", 1)])
    assert len(node.produce_requests) >= 2  # retried, not one attempt using the whole budget


def test_attempt_timeout_defaults_and_validation() -> None:
    assert RaftlogClient("127.0.0.1:1", request_timeout_s=30.0).attempt_timeout_s == 10.0
    assert RaftlogClient("127.0.0.1:1", request_timeout_s=0.3).attempt_timeout_s == (
        pytest.approx(0.1)
    )
    assert (
        RaftlogClient("127.0.0.1:1", request_timeout_s=2, attempt_timeout_s=5).attempt_timeout_s
        == 2
    )
    with pytest.raises(ValueError, match="attempt_timeout_s must be > 0"):
        RaftlogClient("127.0.0.1:1", attempt_timeout_s=0)


async def test_a_storage_error_fails_at_once_and_is_not_retried(node_factory) -> None:
    """KAFKA_STORAGE_ERROR (the leader's disk is full): the write was refused whole, and
    retrying only hides it until the timeout (issue 44's produce hung for 60 s)."""
    reason = (
        "KAFKA_STORAGE_ERROR: node 1's data dir /x has 12 MiB free, below --min-free-bytes "
        "64 MiB; writes are refused until retention, a topic delete or the operator frees "
        "space (reads go on)"
    )

    async def full(req: ProduceRequest, n: int) -> object:
        return ErrorResponse(ErrorCode.KAFKA_STORAGE_ERROR, reason)

    node = await node_factory(full)
    async with RaftlogClient([node.address], request_timeout_s=30.0) as client:
        started = time.monotonic()
        with pytest.raises(KafkaStorageError) as info:
            await client.produce("t", 0, [(b"v", 1)])
        assert time.monotonic() - started < 5.0
    assert str(info.value) == reason
    assert info.value.code is ErrorCode.KAFKA_STORAGE_ERROR
    assert len(node.produce_requests) == 1


class LaggingNode(FakeNode):
    """Answers its first ``lagging`` metadata requests as a node that knows no
    controller leader (an election) and lags a topic 't' just created; then leads."""

    def __init__(self, on_produce: Handler, lagging: int) -> None:
        super().__init__(on_produce)
        self.lagging = lagging
        self.metadata_asked = 0

    async def _metadata(self, request: web.Request) -> web.Response:
        self.metadata_asked += 1
        if self.metadata_asked > self.lagging:
            return await super()._metadata(request)
        meta = MetadataResponse(1, -1, [NodeInfo(1, self.address)], [])
        return web.Response(body=codec.encode(meta))


async def test_a_topic_unknown_to_a_node_that_does_not_lead_the_controller_is_asked_again() -> None:
    # During a controller election any node answers metadata, and one restarted after a
    # crash may lag a topic just created: its "unknown" is no proof, so the call is
    # retried (the chaos run's final read failed with UnknownTopicError on such a node).
    async def ok(req: ProduceRequest, n: int) -> object:
        return ProduceResponse(3, 3)

    node = LaggingNode(ok, lagging=2)
    await node.start()
    try:
        async with RaftlogClient([node.address], request_timeout_s=10.0) as client:
            r = await client.produce("t", 0, [(b"v", 1)])
        assert (r.base_offset, r.last_offset) == (3, 3)
        assert node.metadata_asked == 3
    finally:
        await node.stop()
