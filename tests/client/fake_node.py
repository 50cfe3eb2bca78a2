"""A fake raftlog node for client tests (no cluster): it leads partition t/0 on a free
loopback port and answers metadata; a subclass serves the other routes it scripts."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from raftlog.cluster import free_ports
from raftlog.rpc import codec
from raftlog.rpc.messages import MetadataResponse, NodeInfo, PartitionInfo, TopicInfo

Route = Callable[[web.Request], Awaitable[web.Response]]


class FakeNodeServer:
    """Node 1 at ``address``, the leader of t/0; ``routes()`` maps "produce" etc. to handlers."""

    def __init__(self) -> None:
        (self.port,) = free_ports(1)
        self.address = f"127.0.0.1:{self.port}"
        self.release = asyncio.Event()  # set at teardown: frees every hung handler
        self._runner: web.AppRunner | None = None

    def routes(self) -> dict[str, Route]:
        raise NotImplementedError

    async def _metadata(self, request: web.Request) -> web.Response:
        meta = MetadataResponse(
            1, 1, [NodeInfo(1, self.address)], [TopicInfo("t", 1, [PartitionInfo(0, 1, 1, [1])])]
        )
        return web.Response(body=codec.encode(meta))

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/metadata", self._metadata)
        for route, handler in self.routes().items():
            app.router.add_post(f"/v1/{route}", handler)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()
