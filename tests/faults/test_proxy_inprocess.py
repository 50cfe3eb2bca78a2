"""TcpProxy in-process: forwarding, cut, blackhole, heal, drop_responses, delay."""

from __future__ import annotations

import time

import pytest
from proxy_helpers import (
    EchoServer,
    closed_by_peer,
    connect,
    read_nothing,
    roundtrip,
)

from raftlog.faults.proxy import Mode, TcpProxy


@pytest.fixture
async def echo():
    server = await EchoServer().start()
    yield server
    await server.stop()


@pytest.fixture
async def proxy(echo):
    p = TcpProxy("127.0.0.1", echo.port)
    await p.start()
    yield p
    await p.stop()


async def test_bytes_flow_both_ways(echo, proxy):
    assert proxy.port != echo.port
    assert await roundtrip(proxy.port, b"hello raft") == b"hello raft"
    assert echo.received == b"hello raft"
    status = proxy.status()
    assert status["bytes_up"] == 10 and status["bytes_down"] == 10
    assert status["mode"] == "pass" and status["connections_accepted"] == 1


async def test_large_transfer_keeps_order(echo, proxy):
    payload = bytes(i % 251 for i in range(1_000_000))
    assert await roundtrip(proxy.port, payload) == payload


async def test_cut_aborts_live_connections_and_refuses_new_ones(echo, proxy):
    reader, writer = await connect(proxy.port)
    writer.write(b"a")
    await echo.wait_received(1)
    assert await reader.readexactly(1) == b"a"
    proxy.cut()
    assert proxy.mode is Mode.CUT
    assert await closed_by_peer(reader)
    writer.transport.abort()
    reader2, writer2 = await connect(proxy.port)  # the listener accepts, then drops it
    writer2.write(b"lost")
    assert await closed_by_peer(reader2)
    writer2.transport.abort()
    assert echo.received == b"a"  # nothing got through after the cut
    proxy.heal()
    assert await roundtrip(proxy.port, b"again") == b"again"
    assert echo.received == b"aagain"


async def test_blackhole_holds_connections_silently_until_heal(echo, proxy):
    proxy.cut(blackhole=True)
    reader, writer = await connect(proxy.port)
    writer.write(b"into the void")
    await writer.drain()
    assert await read_nothing(reader)
    assert echo.received == b""
    assert proxy.open_connections == 1
    proxy.heal()
    assert await closed_by_peer(reader)  # a held connection never resumes
    writer.transport.abort()
    assert proxy.status()["bytes_dropped"] == len(b"into the void")
    assert await roundtrip(proxy.port, b"ok") == b"ok"


async def test_drop_responses_delivers_requests_but_not_replies(echo, proxy):
    proxy.drop_responses()
    reader, writer = await connect(proxy.port)
    writer.write(b"write-1")
    await writer.drain()
    assert await echo.wait_received(7) == b"write-1"  # the write landed
    assert await read_nothing(reader)  # ... but the client never hears
    assert proxy.status()["bytes_dropped"] == 7
    proxy.heal()
    # the stream lost bytes, so it is closed rather than resumed
    assert await closed_by_peer(reader)
    writer.transport.abort()
    assert await roundtrip(proxy.port, b"write-2") == b"write-2"


async def test_delay_holds_chunks_but_keeps_them(echo, proxy):
    proxy.delay(0.2)
    started = time.monotonic()
    assert await roundtrip(proxy.port, b"slow") == b"slow"
    # a lower bound only: the proxy waits at least the delay in each direction
    assert time.monotonic() - started >= 0.4
    proxy.delay(0)
    assert proxy.delay_seconds == 0.0


async def test_target_down_closes_the_client(echo):
    port = echo.port
    await echo.stop()  # nothing listens on the target port now
    async with TcpProxy("127.0.0.1", port) as p:
        reader, writer = await connect(p.port)
        assert await closed_by_peer(reader)
        writer.transport.abort()


async def test_stop_closes_everything(echo):
    p = TcpProxy("127.0.0.1", echo.port)
    await p.start()
    port = p.port
    reader, writer = await connect(port)
    await p.stop()
    assert await closed_by_peer(reader)
    writer.transport.abort()
    with pytest.raises(OSError):
        await connect(port)
    await p.stop()  # idempotent


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"target_port": 0}, "target_port must be an int in 1..65535"),
        ({"listen_host": "0.0.0.0"}, "listen host must be a loopback address"),
        ({"listen_port": -1}, "listen_port must be an int in 0..65535"),
    ],
)
def test_bad_construction_names_the_field(kwargs, needle):
    args = {"target_host": "127.0.0.1", "target_port": 9, **kwargs}
    with pytest.raises(ValueError) as exc:
        TcpProxy(**args)
    assert needle in str(exc.value)


@pytest.mark.parametrize("bad", [-1, 61, "1", True])
def test_bad_delay_is_rejected(bad):
    with pytest.raises(ValueError, match="delay seconds"):
        TcpProxy("127.0.0.1", 9).delay(bad)
