"""Refused connections: fail at once while nothing has ever answered, retry once something has.

See the module doc of ``raftlog.client.calls`` for the rule.
"""

from __future__ import annotations

import asyncio
import errno
import time

import aiohttp
import pytest
from aiohttp import web

from raftlog.client import ClusterUnavailableError, RaftlogClient
from raftlog.client.calls import _is_refused
from raftlog.cluster import free_ports
from tests.client.fake_node import FakeNodeServer


class _MetadataOnly(FakeNodeServer):
    def routes(self) -> dict[str, object]:
        return {}


async def test_every_server_refusing_fails_at_once_naming_each_address() -> None:
    ports = free_ports(2)
    servers = [f"127.0.0.1:{p}" for p in ports]
    async with RaftlogClient(servers, request_timeout_s=30.0) as client:
        start = time.monotonic()
        with pytest.raises(ClusterUnavailableError) as info:
            await client.list_topics()
        elapsed = time.monotonic() - start
    assert elapsed < 2.0, f"took {elapsed:.1f}s: refused connections must not be retried"
    message = str(info.value)
    for address in servers:
        assert address in message
    assert "connection refused" in message
    assert "raftlog local start" in message


async def test_partition_and_controller_calls_fail_fast_too() -> None:
    (port,) = free_ports(1)
    async with RaftlogClient([f"127.0.0.1:{port}"], request_timeout_s=30.0) as client:
        start = time.monotonic()
        with pytest.raises(ClusterUnavailableError, match=f"127.0.0.1:{port}"):
            await client.create_topic("t")
        with pytest.raises(ClusterUnavailableError, match=f"127.0.0.1:{port}"):
            await client.fetch("t", 0, 0)
        assert time.monotonic() - start < 2.0


async def test_a_hostname_with_several_addresses_counts_as_refused_when_all_refuse() -> None:
    (port,) = free_ports(1)
    async with RaftlogClient([f"localhost:{port}"], request_timeout_s=30.0) as client:
        start = time.monotonic()
        with pytest.raises(ClusterUnavailableError, match=f"localhost:{port}"):
            await client.list_topics()
        assert time.monotonic() - start < 2.0


async def test_once_a_server_answered_a_refusal_is_retried_until_it_comes_back() -> None:
    """A node that answered before and now refuses is restarting: wait for it."""
    node = _MetadataOnly()
    await node.start()
    try:
        async with RaftlogClient([node.address], request_timeout_s=10.0) as client:
            await client.metadata()  # answered once
            await node.stop()
            restart = asyncio.get_running_loop().call_later(
                0.8, lambda: asyncio.ensure_future(node.start())
            )
            start = time.monotonic()
            meta = await client.metadata()
            elapsed = time.monotonic() - start
            restart.cancel()
        assert meta.nodes[0].address == node.address
        assert 0.5 < elapsed < 5.0, elapsed
    finally:
        await node.stop()


async def test_once_answered_a_refusal_still_ends_at_the_request_timeout() -> None:
    node = _MetadataOnly()
    await node.start()
    async with RaftlogClient([node.address], request_timeout_s=1.0) as client:
        await client.metadata()
        await node.stop()
        start = time.monotonic()
        with pytest.raises(ClusterUnavailableError, match=node.address):
            await client.metadata()
        assert 0.9 < time.monotonic() - start < 3.0


def test_refused_is_told_apart_from_other_connection_errors() -> None:
    key = aiohttp.client_reqrep.ConnectionKey("h", 1, False, True, None, None, None)

    def connector_error(err: OSError) -> aiohttp.ClientConnectorError:
        return aiohttp.ClientConnectorError(key, err)

    assert _is_refused(connector_error(ConnectionRefusedError(errno.ECONNREFUSED, "refused")))
    joined = OSError(
        "Multiple exceptions: [Errno 111] Connect call failed ('::1', 1, 0, 0), "
        "[Errno 111] Connect call failed ('127.0.0.1', 1)"
    )
    assert _is_refused(connector_error(joined)) == (errno.ECONNREFUSED == 111)
    mixed = OSError(
        "Multiple exceptions: [Errno 99] Cannot assign requested address, "
        "[Errno 111] Connect call failed ('127.0.0.1', 1)"
    )
    assert not _is_refused(connector_error(mixed))
    assert not _is_refused(connector_error(ConnectionResetError(errno.ECONNRESET, "reset")))
    assert not _is_refused(aiohttp.ServerDisconnectedError())


async def test_an_answering_server_is_never_mistaken_for_a_refusal() -> None:
    """An HTTP error status is an answer, not a refused connection: no fast fail path."""

    async def teapot(request: web.Request) -> web.Response:
        return web.Response(status=418, body=b"\x00")

    app = web.Application()
    app.router.add_post("/v1/list_topics", teapot)
    runner = web.AppRunner(app)
    await runner.setup()
    (port,) = free_ports(1)
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        async with RaftlogClient([f"127.0.0.1:{port}"], request_timeout_s=2.0) as client:
            with pytest.raises(Exception) as info:
                await client.list_topics()
            assert "connection refused" not in str(info.value)
    finally:
        await runner.cleanup()
