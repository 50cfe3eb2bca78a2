"""What the rpc tests share: a node stub for make_app and a loopback server."""

from __future__ import annotations

from typing import Any

from aiohttp import web


class NodeStub:
    """The node interface make_app serves, answering nothing: a test overrides the
    handlers it expects to be called; any other call fails the test."""

    node_id = 1

    async def handle_peer(self, message: Any) -> Any:
        raise AssertionError("no peer calls here")

    async def handle_client(self, message: Any) -> Any:
        raise AssertionError("no client calls here")

    async def relay_peer(self, body: memoryview) -> memoryview | None:
        return None

    async def forward_client(
        self, route: str, message: Any, body: bytes, authorization: str
    ) -> tuple[int, bytes | memoryview] | None:
        return None

    async def health(self) -> dict[str, Any]:
        return {}

    async def render_metrics(self) -> bytes:
        return b""

    def count_request(self, route: str, status: int) -> None:
        pass


async def serve_on_loopback(runner: web.AppRunner) -> str:
    """Start ``runner`` on 127.0.0.1 and an ephemeral port; its address."""
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return f"127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
