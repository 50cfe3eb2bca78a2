"""The node's aiohttp application: peer RPC, client calls, metrics.

Routes (all bodies are codec frames, see :mod:`raftlog.rpc.codec`):

- ``POST /raft/{append_entries,vote,timeout_now,heartbeat}`` — peer RPC;
- ``POST /v1/<call>`` — client calls (see ``messages.CLIENT_ROUTES``);
  errors are a framed ErrorResponse with a matching HTTP status;
- ``GET /metrics`` — Prometheus text; ``GET /health`` — JSON status.

When the node has an auth token, every route but ``/health`` requires
``Authorization: Bearer <token>``; a request without it gets 401 before its
body is read, so it changes nothing. A malformed body gets 400 with the
codec's message (which field, what was expected) and never reaches the node.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any, Protocol

from aiohttp import web

from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError
from raftlog.rpc.messages import CLIENT_ROUTES, ErrorCode, ErrorResponse
from raftlog.rpc.peer import PEER_ROUTES

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/x-raftlog"

STATUS: dict[ErrorCode, int] = {
    ErrorCode.NOT_LEADER: 421,
    ErrorCode.LEADER_NOT_AVAILABLE: 503,
    ErrorCode.TIMEOUT: 504,
    ErrorCode.UNKNOWN_TOPIC: 404,
    ErrorCode.UNKNOWN_PARTITION: 404,
    ErrorCode.TOPIC_EXISTS: 409,
    ErrorCode.INVALID_REQUEST: 400,
    ErrorCode.RECORD_TOO_LARGE: 413,
    ErrorCode.OFFSET_OUT_OF_RANGE: 416,
    ErrorCode.NOT_SUPPORTED: 501,
    ErrorCode.UNAUTHORIZED: 401,
    ErrorCode.FENCED: 409,
    ErrorCode.OUT_OF_ORDER_SEQUENCE: 409,
    ErrorCode.STALE_TERM: 409,
    ErrorCode.INTERNAL: 500,
    ErrorCode.DUPLICATE_SEQUENCE: 409,
    ErrorCode.INVALID_TXN_STATE: 409,
    ErrorCode.INVALID_PRODUCER_EPOCH: 409,
}


class RequestError(Exception):
    """Raised by node handlers; becomes an ErrorResponse with the code's status."""

    def __init__(
        self, code: ErrorCode, message: str, leader_id: int = -1, leader_address: str = ""
    ) -> None:
        super().__init__(message)
        self.code = code
        self.leader_id = leader_id
        self.leader_address = leader_address


class NodeHandlers(Protocol):
    node_id: int

    async def handle_peer(self, message: Any) -> Any: ...

    async def handle_client(self, message: Any) -> Any: ...

    def health(self) -> dict[str, Any]: ...

    def render_metrics(self) -> bytes: ...

    def count_request(self, route: str, status: int) -> None: ...


def make_app(
    node: NodeHandlers, *, auth_token: str | None = None, max_request_bytes: int
) -> web.Application:
    """The application serving ``node``; ``max_request_bytes`` bounds a body."""
    peer_types = {route: cls for cls, route in PEER_ROUTES.items()}
    client_types = {route: cls for cls, route in CLIENT_ROUTES.items()}
    expected = f"Bearer {auth_token}".encode() if auth_token else None

    @web.middleware
    async def auth(request: web.Request, handler: Any) -> web.StreamResponse:
        if expected is not None and request.path != "/health":
            got = request.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(got, expected):
                node.count_request(request.path, 401)
                return _error(
                    ErrorCode.UNAUTHORIZED,
                    "missing or wrong auth token: send 'Authorization: Bearer <token>' "
                    "(the cluster's --auth-token / RAFTLOG_AUTH_TOKEN)",
                )
        return await handler(request)

    async def read_body(request: web.Request, route: str, cls: type) -> Any:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge as exc:
            raise RequestError(
                ErrorCode.RECORD_TOO_LARGE,
                f"request body exceeds the limit of {max_request_bytes} bytes",
            ) from exc
        try:
            return codec.decode(body, cls)
        except CodecError as exc:
            raise RequestError(ErrorCode.INVALID_REQUEST, f"malformed {route} body: {exc}") from exc

    async def peer(request: web.Request) -> web.Response:
        route = request.match_info["route"]
        cls = peer_types.get(route)
        if cls is None:
            return _error(ErrorCode.INVALID_REQUEST, f"unknown peer route /raft/{route}", 404)
        try:
            msg = await read_body(request, route, cls)
            reply = await node.handle_peer(msg)
            return _ok(codec.encode(reply))
        except RequestError as exc:
            return _from_error(exc)
        except Exception as exc:
            log.exception("peer %s failed", route)
            return _error(ErrorCode.INTERNAL, f"{route} failed: {type(exc).__name__}: {exc}")

    async def client(request: web.Request) -> web.Response:
        route = request.match_info["route"]
        cls = client_types.get(route)
        if cls is None:
            resp = _error(
                ErrorCode.INVALID_REQUEST,
                f"unknown route /v1/{route}; expected one of {sorted(client_types)}",
                404,
            )
        else:
            try:
                msg = await read_body(request, route, cls)
                resp = _ok(codec.encode(await node.handle_client(msg)))
            except RequestError as exc:
                resp = _from_error(exc)
            except Exception as exc:
                log.exception("client call %s failed", route)
                resp = _error(ErrorCode.INTERNAL, f"{route} failed: {type(exc).__name__}: {exc}")
        node.count_request(f"/v1/{route}", resp.status)
        return resp

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            body=node.render_metrics(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def health(request: web.Request) -> web.Response:
        return web.json_response(node.health())

    app = web.Application(middlewares=[auth], client_max_size=max_request_bytes)
    app.router.add_post("/raft/{route}", peer)
    app.router.add_post("/v1/{route}", client)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    return app


def _ok(body: bytes) -> web.Response:
    return web.Response(body=body, content_type=CONTENT_TYPE)


def _error(code: ErrorCode, message: str, status: int | None = None, **kw: Any) -> web.Response:
    body = codec.encode(ErrorResponse(code, message, **kw))
    return web.Response(
        body=body, status=status or STATUS.get(code, 500), content_type=CONTENT_TYPE
    )


def _from_error(exc: RequestError) -> web.Response:
    return _error(exc.code, str(exc), leader_id=exc.leader_id, leader_address=exc.leader_address)
