"""raftlog.kafka.listener in-process (no node: ApiVersions needs none): the connection
limit closes one connection too many at once and counts it; a declared size past
--kafka-max-request-bytes closes the connection unread and counts it; the listener
serves on."""

from __future__ import annotations

import asyncio
import struct

from raftlog.kafka.apis import KafkaApis
from raftlog.kafka.listener import KafkaListener
from raftlog.metrics import NodeMetrics
from raftlog.rpc.server import AuthPolicy

API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 9, 1) + b"t"


async def _api_versions(address: str) -> int:
    """The correlation id of an ApiVersions v0 answer on a new connection."""
    host, _, port = address.rpartition(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
        (size,) = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))
        answer = await asyncio.wait_for(reader.readexactly(size), 10)
        return struct.unpack_from(">i", answer)[0]
    finally:
        writer.close()


async def _closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(1), 10) == b""


def _sample(metrics: NodeMetrics, name: str, **labels: str) -> float:
    value = metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


async def test_one_connection_past_the_limit_is_closed_and_counted() -> None:
    metrics = NodeMetrics(1, lambda: [])
    listener = KafkaListener(KafkaApis(None, {}, AuthPolicy()), 1 << 20, metrics, max_connections=2)
    await listener.start("127.0.0.1", 0)
    host, _, port = listener.address.rpartition(":")
    try:
        held = [await asyncio.open_connection(host, int(port)) for _ in range(2)]
        await asyncio.sleep(0.1)  # both accepted
        assert _sample(metrics, "raftlog_kafka_connections") == 2
        reader, writer = await asyncio.open_connection(host, int(port))
        assert await _closed(reader)
        writer.close()
        assert (
            _sample(metrics, "raftlog_kafka_connections_closed_total", reason="connection_limit")
            == 1
        )
        for _, w in held:
            w.close()
        await asyncio.sleep(0.1)
        assert await _api_versions(listener.address) == 9  # serves again below the limit
        assert _sample(metrics, "raftlog_kafka_requests_total", api="ApiVersions") == 1
    finally:
        await listener.stop()


async def test_a_declared_size_past_the_limit_closes_unread() -> None:
    metrics = NodeMetrics(1, lambda: [])
    listener = KafkaListener(KafkaApis(None, {}, AuthPolicy()), 4096, metrics)
    await listener.start("127.0.0.1", 0)
    host, _, port = listener.address.rpartition(":")
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(struct.pack(">i", 4097))  # one byte past the limit; no body follows
        assert await _closed(reader)
        writer.close()
        assert (
            _sample(metrics, "raftlog_kafka_connections_closed_total", reason="request_size") == 1
        )
        assert await _api_versions(listener.address) == 9
    finally:
        await listener.stop()
