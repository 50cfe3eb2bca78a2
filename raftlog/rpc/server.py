"""The node's aiohttp application: peer RPC, client calls, metrics.

Routes (all bodies are codec frames, see :mod:`raftlog.rpc.codec`):

- ``GET /raft/stream`` — the replication stream: a WebSocket from one peer
  carrying its raft requests as binary frames ``(request id, codec frame)``
  (:mod:`raftlog.rpc.peer`); each is answered on the same stream with the same
  id as soon as it is handled, so replies come in any order; any other
  ``/raft/*`` path is a framed 404 naming the stream;
- ``POST /v1/<call>`` — client calls (see ``messages.CLIENT_ROUTES``);
  errors are a framed ErrorResponse with a matching HTTP status;
- ``GET /v1/stream`` — the client stream: a WebSocket from one client carrying
  its calls as frames ``(request id, codec frame)``, as the replication stream
  does; each is answered under its id with what ``POST /v1/<call>`` answers
  (the response or the framed ErrorResponse). The Python client sends its small
  calls here (one connection, no HTTP request per call);
- ``GET /metrics`` — Prometheus text; ``GET /health`` — JSON status.

Authentication (:class:`AuthPolicy`, one check for every route, in one
middleware, before a body is read, so a refused request changes nothing): three
secrets, each a role (:mod:`raftlog.rpc.roles`), sent as ``Authorization: Bearer
<token>``. ``/raft/*`` takes the peer token only; each ``/v1/<call>`` its role's
token (client, or admin: the admin token may call every client route; the peer
token only the calls nodes make on each other); ``/v1/stream`` opens for any of
them and each message on it is checked for its route's role, answered under its
id when refused; ``/health`` and ``/metrics`` take any (or none when the node is
bound to loopback). No token, an unknown one or a malformed header (not
``Bearer <token>``, not UTF-8) gets 401; a known token of a role that may not
call the route gets 403. Each message names the role, its flag and its
environment variable.

A malformed body gets 400 with the codec's message (which field, what was
expected) and never reaches the node. On the stream, a malformed message is
answered under its id with an ErrorResponse (INVALID_REQUEST, the codec's
message) and never reaches the node; a frame too short to carry an id, or a
text frame, closes that stream (the peer fails what it had in flight and
reconnects). Neither affects other streams or the node.

Limits (:mod:`raftlog.rpc.edge_limits`, given as ``guard``): a stream stops being
read while it has ``max_in_flight_per_stream`` requests being answered, while the
node is over its memory budget for requests in flight, and while its answers are
not read (the transport's write buffer over its high-water mark); a POST's body
is not read while the node is over that budget. Every frame's and body's bytes
are charged to the budget until its answer is ready. Answers are not: one the
client does not read must not hold the node's budget, which would stop every
other client's and peer's streams (Kafka's memory pool holds requests only);
they are bounded per stream by the requests in flight and the write-buffer pause.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import hmac
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from aiohttp import WSCloseCode, WSMsgType, web

from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError
from raftlog.rpc.edge_limits import EdgeGuard, EdgeLimits
from raftlog.rpc.frame_receiver import FrameReceiver, take_over
from raftlog.rpc.frame_writer import send_frame
from raftlog.rpc.messages import CLIENT_ROUTES, CLIENT_STREAM_PATH, ErrorCode, ErrorResponse
from raftlog.rpc.peer import (
    REPLY_TYPES,
    REQUEST_ID_SIZE,
    STREAM_PATH,
    encoded_frame,
    encoded_frame_parts,
    split_frame,
    stream_frame,
)
from raftlog.rpc.roles import PAGE_ROLES, Role, may_call, role_of, token_source

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
    ErrorCode.TRANSACTION_LOST: 409,
    ErrorCode.KAFKA_STORAGE_ERROR: 507,  # Insufficient Storage: the disk is full
    ErrorCode.INVALID_REPLICATION_FACTOR: 400,  # a bad field value, as INVALID_REQUEST
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

    async def relay_peer(self, body: memoryview) -> memoryview | None:
        """The reply's codec bytes to the encoded peer request ``body`` when another
        process of the node answered it (a shard), or None: this one decodes and
        handles it."""
        ...

    async def handle_client(self, message: Any) -> Any: ...

    async def forward_client(
        self, route: str, message: Any, body: bytes | memoryview, authorization: str
    ) -> tuple[int, bytes | memoryview] | None:
        """(HTTP status, body) of a client call another process of the node answered
        (a shard, :mod:`raftlog.node.shards`), or None: this one answers it."""
        ...

    async def health(self) -> dict[str, Any]: ...

    async def render_metrics(self) -> bytes: ...

    def count_request(self, route: str, status: int) -> None: ...


STATUS_PATHS = ("/health", "/metrics")
#: Why a header names no role, beyond a missing or unknown token.
MALFORMED_HEADER = "the Authorization header is malformed (expected 'Bearer <token>', UTF-8)"


@dataclasses.dataclass(frozen=True, slots=True)
class AuthPolicy:
    """Who may call which route (see the module doc and :mod:`raftlog.rpc.roles`).

    ``client_token``, ``admin_token`` and ``peer_token`` are the three roles'
    secrets. ``/raft/*`` needs the peer token (open when it is None). A ``/v1/``
    route needs its role (:func:`raftlog.rpc.roles.may_call`); client routes are
    open when the node has no client token, admin routes only when it has neither
    a client nor an admin token (a node with a client token and no admin token
    refuses every admin call: a client token never reaches one). ``open_status``:
    ``/health`` and ``/metrics`` answer without a token (a node bound to loopback);
    otherwise they need any of the three. ``auto_create_topics``: Kafka's
    ``auto.create.topics.enable``, which makes ``create_topic`` a client route.
    """

    client_token: str | None = None
    peer_token: str | None = None
    open_status: bool = True
    admin_token: str | None = None
    auto_create_topics: bool = True

    def identify(self, authorization: str) -> tuple[Role | None, str]:
        """(the role whose token ``authorization`` carries, or None; why None: no
        header, an unknown token, or a malformed header)."""
        if not authorization:
            return None, "none was sent"
        try:
            sent = authorization.encode("utf-8")
        except UnicodeEncodeError:  # bytes that were not UTF-8 (surrogate-escaped)
            return None, MALFORMED_HEADER
        if not sent.startswith(b"Bearer "):
            return None, MALFORMED_HEADER
        found = None
        for role, token in (
            (Role.CLIENT, self.client_token),
            (Role.ADMIN, self.admin_token),
            (Role.PEER, self.peer_token),
        ):
            # constant time, and every token compared: nothing tells how much of a
            # guess was right, nor which secret it was closest to
            if token is not None and hmac.compare_digest(sent, f"Bearer {token}".encode()):
                found = role
        return found, "" if found else "the token sent is none of this node's"

    def refusal(self, path: str, authorization: str) -> tuple[int, str] | None:
        """None when a request for ``path`` with this ``Authorization`` header may
        proceed, else (HTTP status, message naming the role, flag and variable)."""
        who, why = self.identify(authorization)
        if path.startswith("/raft/"):
            if self.peer_token is None or who is Role.PEER:
                return None
            return self._refused(f"peer route {path}", Role.PEER, who, why)
        if path in STATUS_PATHS:
            if self.open_status or who is not None or not self._any_token():
                return None
            return 401, (
                f"{path} needs a token: send 'Authorization: Bearer <token>' with "
                f"{token_source(Role.CLIENT)}, {token_source(Role.ADMIN)} or "
                f"{token_source(Role.PEER)} (it answers without one only on a node bound "
                f"to loopback); {why}"
            )
        if path == CLIENT_STREAM_PATH:
            # any role may open the stream; each message on it is checked by route
            if who is not None or self.client_token is None:
                return None
            return self._refused(f"client stream {path}", Role.CLIENT, who, why)
        if path in PAGE_ROLES:
            if who is not None or self.client_token is None:
                return None
            return self._refused(f"GET {path}", PAGE_ROLES[path], who, why)
        route = path.removeprefix("/v1/")
        return self.route_refusal(route, who, why)

    def route_refusal(self, route: str, who: Role | None, why: str = "") -> tuple[int, str] | None:
        """None when a caller of role ``who`` may call the client route ``route``
        (a POST's, or a message's on the client stream), else (status, message)."""
        need = role_of(route, self.auto_create_topics)
        if may_call(who, route, self.auto_create_topics):
            return None
        if self.client_token is None and (need is Role.CLIENT or self.admin_token is None):
            return None  # the node has no token for this role: open (see the class doc)
        return self._refused(route, need, who, why)

    def _refused(self, what: str, need: Role, who: Role | None, why: str) -> tuple[int, str]:
        message = f"{what} needs the {need.value} role: send {token_source(need)}"
        if need is Role.ADMIN and self.admin_token is None:
            message += "; this node has no admin token, so it refuses every admin call"
        if who is not None:
            return 403, f"{message}; it refuses the {who.value} token it was sent"
        return 401, f"{message} as 'Authorization: Bearer <token>'; {why}"

    def _any_token(self) -> bool:
        return any(t is not None for t in (self.client_token, self.admin_token, self.peer_token))


def too_large_error(limit: int) -> RequestError:
    """The refusal of a request past ``limit`` bytes, as a POST body or a stream frame."""
    return RequestError(
        ErrorCode.RECORD_TOO_LARGE, f"request body exceeds the limit of {limit} bytes"
    )


async def read_bounded_body(request: web.Request, limit: int) -> bytes:
    """The whole body of ``request``, in one copy; RequestError (RECORD_TOO_LARGE) as
    soon as it passes ``limit`` bytes.

    aiohttp's ``request.read()`` copies a body three times (the received chunks
    joined, appended to a growing bytearray, that turned into bytes); a produce of
    a MiB or more made those copies a visible share of the leader's time. Its
    ``readany()`` joins every block buffered at the time (a copy), so this takes
    the received blocks one by one with ``readchunk()`` (as they came off the
    socket, uncopied) and joins them once.
    """
    too_large = too_large_error(limit)
    if (request.content_length or 0) > limit:
        raise too_large
    # As request.read() does: without it the reader pauses the socket at every 128 KiB
    # buffered (aiohttp's default), and a body of a few MiB arrives at half the speed.
    request.content.set_read_chunk_size(limit)
    blocks: list[bytes] = []
    size = 0
    content = request.content
    while True:
        block, _ = await content.readchunk()
        if not block:
            # The end of the body, or only the end of an HTTP chunk (chunked encoding),
            # reported apart from its data. aiohttp's reader of an empty body is one shared
            # object that says "end of chunk" from its second read on, so at_eof decides.
            if content.at_eof():
                break
            continue
        size += len(block)
        if size > limit:
            raise too_large
        blocks.append(block)
    return b"".join(blocks)  # one block: no copy (bytes.join returns it as it is)


#: why a stream's reading is paused (FrameReceiver.pause) for its requests in flight
PAUSED_IN_FLIGHT = "max_in_flight_per_stream"


def make_app(
    node: NodeHandlers,
    *,
    auth: AuthPolicy | None = None,
    max_request_bytes: int,
    guard: EdgeGuard | None = None,
) -> web.Application:
    """The application serving ``node``; ``max_request_bytes`` bounds a body.

    ``auth`` (default: everything open) is checked for every request before its
    body is read; a refusal is a framed ErrorResponse with code UNAUTHORIZED and
    HTTP 401 or 403. ``guard`` (default: one with the default limits, not
    installed on a server) holds the memory budget and the per-stream limit, and
    is told where each request starts and ends (its header and idle timeouts).
    """
    client_types = {route: cls for cls, route in CLIENT_ROUTES.items()}
    policy = auth or AuthPolicy()
    edge = guard or EdgeGuard(EdgeLimits())
    budget = edge.budget
    max_in_flight = edge.limits.max_in_flight_per_stream

    @web.middleware
    async def track(request: web.Request, handler: Any) -> web.StreamResponse:
        # the request's head is whole: the connection passed its header timeout
        edge.request_started(request.protocol)
        try:
            return await handler(request)
        finally:
            edge.request_ended(request.protocol)

    authenticate = auth_middleware(policy, node.count_request)

    async def read_body(request: web.Request, route: str, cls: type) -> tuple[bytes, Any]:
        body = await read_bounded_body(request, max_request_bytes)
        try:
            return body, codec.decode(body, cls)
        except CodecError as exc:
            raise RequestError(ErrorCode.INVALID_REQUEST, f"malformed {route} body: {exc}") from exc

    async def unknown_peer_route(request: web.Request) -> web.Response:
        return _error(
            ErrorCode.INVALID_REQUEST,
            f"unknown peer route {request.method} {request.path}: peers send raft requests "
            f"over the replication stream, a WebSocket at GET {STREAM_PATH}",
            404,
        )

    streams: set[web.WebSocketResponse] = set()  # read by aiohttp (TLS)
    receivers: set[FrameReceiver] = set()
    # strong references to the handlers of stream requests (the loop keeps weak ones)
    answering: set[asyncio.Task[None]] = set()
    # what each stream request being answered holds of the budget, by its task
    charges: dict[asyncio.Task[None], int] = {}

    def answer_ready() -> None:
        """The running stream request's answer is ready: its bytes leave the budget."""
        task = asyncio.current_task()
        if task is not None:
            budget.release(charges.pop(task, 0))

    async def serve_stream(
        request: web.Request,
        answer: Callable[[web.WebSocketResponse, int, memoryview], Any],
        refuse_oversized: Callable[[web.WebSocketResponse, int, memoryview], Any] | None = None,
    ) -> web.StreamResponse:
        """Read a stream's frames and hand each to ``answer`` in a task of its own: with a
        :class:`~raftlog.rpc.frame_receiver.FrameReceiver` (no copy of a frame's bytes),
        or with aiohttp's reader on a TLS connection.

        A frame past ``max_request_bytes`` (and its request id) closes the stream,
        unless ``refuse_oversized`` is given: then, on a FrameReceiver, that request
        is answered by ``refuse_oversized(ws, request_id, head)`` (``head``: the first
        bytes of its message), its bytes dropped as they arrive, and the stream goes
        on."""
        # the middleware already admitted the token of the stream's path at the upgrade
        max_frame = max_request_bytes + REQUEST_ID_SIZE
        ws = web.WebSocketResponse(max_msg_size=max_frame, compress=False)
        try:
            await ws.prepare(request)
        except ConnectionError:
            # the other side gave up on the handshake before it was answered (its
            # connect timed out, e.g. while this node was stopped): nothing to serve.
            # Not the unprepared ws: aiohttp would close it and log "Call .prepare()
            # first" as an unhandled error; a plain response's write fails quietly.
            return web.Response(status=499)
        loop = asyncio.get_running_loop()
        receiver: FrameReceiver | None = None
        conn = edge.connection(request.protocol)
        in_flight = 0
        # the TLS path (aiohttp's reader) waits on this instead of pausing a receiver
        slots = asyncio.Semaphore(max_in_flight)

        def spawn(
            answering_one: Coroutine[Any, Any, None], charged: int = 0, slot: bool = False
        ) -> None:
            # each request is handled on its own: a slow append does not hold back
            # the heartbeats and votes behind it on the stream; at most max_in_flight
            # at once (then the stream is not read: TCP pushes back on the sender)
            nonlocal in_flight
            task = loop.create_task(answering_one)
            answering.add(task)
            charges[task] = charged
            in_flight += 1
            if conn is not None:
                conn.in_flight = in_flight
            if in_flight >= max_in_flight and receiver is not None:
                edge.backpressure[PAUSED_IN_FLIGHT] += 1
                receiver.pause(PAUSED_IN_FLIGHT)

            def done(task: asyncio.Task[None]) -> None:
                nonlocal in_flight
                answering.discard(task)
                in_flight -= 1
                if conn is not None:
                    conn.in_flight = in_flight
                budget.release(charges.pop(task, 0))
                if slot:
                    slots.release()
                if receiver is not None and in_flight < max_in_flight:
                    receiver.resume(PAUSED_IN_FLIGHT)

            task.add_done_callback(done)

        def spawn_answer(
            request_id: int, body: memoryview, charged: int, slot: bool = False
        ) -> None:
            spawn(answer(ws, request_id, body), charged, slot)

        def on_oversized(head: bytes, size: int) -> None:
            assert refuse_oversized is not None
            # the head holds a whole request id: the frame is far longer than one (an
            # error here closes the stream, FrameReceiver._hand)
            request_id, message_head = split_frame(head)
            spawn(refuse_oversized(ws, request_id, message_head))

        def on_frame(frame: bytes | memoryview) -> None:
            # the frame's bytes were charged to the budget: released once answered
            try:
                request_id, body = split_frame(frame)
            except CodecError as exc:
                budget.release(len(frame))
                assert receiver is not None
                receiver.close(WSCloseCode.PROTOCOL_ERROR, str(exc).encode()[:123])
                return
            spawn_answer(request_id, body, len(frame))

        # No await since prepare: no frame can have reached aiohttp's reader yet (the
        # other side sends only once it has the upgrade's answer).
        receiver = take_over(
            request.transport,
            request.protocol,
            on_frame,
            max_frame,
            on_oversized if refuse_oversized else None,
            budget,
        )
        if receiver is not None:
            receivers.add(receiver)
            if conn is not None:
                conn.receiver = receiver
                conn.close = lambda why: receiver.close(WSCloseCode.GOING_AWAY, why.encode())
            try:
                await receiver.done
            finally:
                receivers.discard(receiver)
            return ws
        streams.add(ws)
        activity = _Activity()
        if conn is not None:
            conn.receiver = activity
            conn.close = lambda why: ws._writer.transport.close() if ws._writer else None
        try:
            async for msg in ws:
                activity.last_active = time.monotonic()
                if msg.type is not WSMsgType.BINARY:
                    await ws.close(
                        code=WSCloseCode.UNSUPPORTED_DATA,
                        message=f"stream frames are binary, got {msg.type.name}".encode(),
                    )
                    break
                try:
                    request_id, body = split_frame(msg.data)
                except CodecError as exc:
                    await ws.close(code=WSCloseCode.PROTOCOL_ERROR, message=str(exc).encode())
                    break
                # backpressure as a FrameReceiver's pause: the next frame is not read
                budget.charge(len(msg.data))
                await slots.acquire()
                spawn_answer(request_id, body, len(msg.data), slot=True)
                await budget.wait_free()
        finally:
            streams.discard(ws)
        return ws

    async def peer_stream(request: web.Request) -> web.StreamResponse:
        return await serve_stream(request, answer)

    async def client_stream(request: web.Request) -> web.StreamResponse:
        authorization = _authorization(request)
        # the middleware let any role open the stream: each message needs its route's
        who, why = policy.identify(authorization)

        async def answer_client(
            ws: web.WebSocketResponse, request_id: int, body: memoryview
        ) -> None:
            try:
                msg = codec.decode(body)
                route = CLIENT_ROUTES.get(type(msg))
                if route is None:
                    raise CodecError(f"{type(msg).__name__} is not a client request")
            except CodecError as exc:
                route = "stream"
                status, answer = _error_body(
                    ErrorCode.INVALID_REQUEST, f"malformed request on the client stream: {exc}"
                )
                parts: list[bytes | memoryview] = [answer]
            else:
                refused = policy.route_refusal(route, who, why)
                if refused is not None:
                    status, answer = _error_body(ErrorCode.UNAUTHORIZED, refused[1], refused[0])
                    parts = [answer]
                else:
                    status, parts = await call(route, msg, body, authorization)
            await reply(ws, request_id, route, status, parts)

        async def refuse_oversized(
            ws: web.WebSocketResponse, request_id: int, head: memoryview
        ) -> None:
            # what a POST of this size is answered (413), here under its request id,
            # counted under the call's route as a POST's is (its type id is in the head)
            try:
                route = CLIENT_ROUTES.get(codec.type_of(head), "stream")
            except CodecError:
                route = "stream"
            status, answer = _error_body_of(too_large_error(max_request_bytes))
            await reply(ws, request_id, route, status, [answer])

        async def reply(
            ws: web.WebSocketResponse,
            request_id: int,
            route: str,
            status: int,
            parts: list[bytes | memoryview],
        ) -> None:
            node.count_request(f"/v1/{route}", status)
            answer_ready()
            # the stream may have closed meanwhile: the client already failed this request
            with contextlib.suppress(ConnectionError):
                # a fetch's batches go to the socket as they were read: no join
                await send_frame(ws._writer, encoded_frame_parts(request_id, *parts))

        return await serve_stream(request, answer_client, refuse_oversized)

    async def answer(ws: web.WebSocketResponse, request_id: int, body: memoryview) -> None:
        frame = await peer_answer(request_id, body)
        answer_ready()
        # the stream may have closed meanwhile: the sender already failed this request
        with contextlib.suppress(ConnectionError):
            await ws.send_bytes(frame)

    async def peer_answer(request_id: int, body: memoryview) -> bytes:
        """The framed reply to one peer request: relayed undecoded to the shard that owns
        its group when it is not this one's, else handled here; an error, never raised."""
        try:
            relayed = await node.relay_peer(body)
        except CodecError:
            relayed = None  # decoding it below says what is wrong, under its id
        except Exception as exc:
            log.warning("relaying a peer request to its shard failed: %r", exc)
            reply = ErrorResponse(ErrorCode.INTERNAL, f"relaying to its shard failed: {exc}")
            return stream_frame(request_id, reply)
        if relayed is not None:
            return encoded_frame(request_id, relayed)
        try:
            msg = codec.decode(body)
            if type(msg) not in REPLY_TYPES:
                raise CodecError(f"{type(msg).__name__} is not a peer request")
        except CodecError as exc:
            reply = ErrorResponse(
                ErrorCode.INVALID_REQUEST, f"malformed peer request on the raft stream: {exc}"
            )
            return stream_frame(request_id, reply)
        try:
            return stream_frame(request_id, await node.handle_peer(msg))
        except RequestError as exc:
            reply = ErrorResponse(exc.code, str(exc), exc.leader_id, exc.leader_address)
        except Exception as exc:
            log.exception("peer %s failed", type(msg).__name__)
            reply = ErrorResponse(
                ErrorCode.INTERNAL, f"{type(msg).__name__} failed: {type(exc).__name__}: {exc}"
            )
        return stream_frame(request_id, reply)

    async def close_streams(app: web.Application) -> None:
        # a stream never ends by itself: close them, or shutdown waits for its timeout
        for receiver in list(receivers):
            receiver.close(WSCloseCode.GOING_AWAY, b"node shutting down")
        for ws in list(streams):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"node shutting down")

    async def call(
        route: str, msg: Any, body: bytes | memoryview, authorization: str
    ) -> tuple[int, list[bytes | memoryview]]:
        """(HTTP status, framed answer as buffers in order) of one decoded client call:
        the one path of a ``POST /v1/<call>`` and of a frame on the client stream."""
        try:
            forwarded = await node.forward_client(route, msg, body, authorization)
            if forwarded is not None:
                return forwarded[0], [forwarded[1]]
            return 200, codec.encode_parts(await node.handle_client(msg))
        except RequestError as exc:
            status, answer = _error_body_of(exc)
        except Exception as exc:
            log.exception("client call %s failed", route)
            status, answer = _error_body(
                ErrorCode.INTERNAL, f"{route} failed: {type(exc).__name__}: {exc}"
            )
        return status, [answer]

    async def client(request: web.Request) -> web.Response:
        route = request.match_info["route"]
        cls = client_types.get(route)
        if cls is None:
            status, answer = _error_body(
                ErrorCode.INVALID_REQUEST,
                f"unknown route /v1/{route}; expected one of {sorted(client_types)}",
                404,
            )
        else:
            # over the node's memory budget: leave the body in the socket until answers
            # free room (backpressure, as a stream's pause)
            await budget.wait_free()
            body = b""
            try:
                body, msg = await read_body(request, route, cls)
                budget.charge(len(body))
            except RequestError as exc:
                status, answer = _error_body_of(exc)
            except ConnectionError as exc:  # the client went away mid-body: no one to answer
                log.info("client call %s: the connection ended inside its body: %s", route, exc)
                status, answer = _error_body(ErrorCode.INVALID_REQUEST, f"{route}: {exc}")
            except Exception as exc:
                log.exception("client call %s failed", route)
                status, answer = _error_body(
                    ErrorCode.INTERNAL, f"{route} failed: {type(exc).__name__}: {exc}"
                )
            else:
                try:
                    status, parts = await call(route, msg, body, _authorization(request))
                    answer = b"".join(parts)
                finally:
                    budget.release(len(body))
        node.count_request(f"/v1/{route}", status)
        return web.Response(body=answer, status=status, content_type=CONTENT_TYPE)

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            body=await node.render_metrics(),
            headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )

    async def health(request: web.Request) -> web.Response:
        return web.json_response(await node.health())

    app = web.Application(middlewares=[track, authenticate], client_max_size=max_request_bytes)
    app.router.add_get(STREAM_PATH, peer_stream)
    app.on_shutdown.append(close_streams)
    app.router.add_route("*", "/raft/{route}", unknown_peer_route)
    app.router.add_get(CLIENT_STREAM_PATH, client_stream)
    app.router.add_post("/v1/{route}", client)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/health", health)
    return app


def auth_middleware(policy: AuthPolicy, count: Callable[[str, int], None] | None = None) -> Any:
    """The middleware that checks every request against ``policy`` before its body is
    read (``count(path, status)`` is told of each refusal). A refusal is a framed
    ErrorResponse with code UNAUTHORIZED and HTTP 401 or 403; on the read-only pages
    (:data:`raftlog.rpc.roles.PAGE_ROLES`) it is text with a ``WWW-Authenticate:
    Basic`` challenge, so that a browser asks for the token."""

    @web.middleware
    async def authenticate(request: web.Request, handler: Any) -> web.StreamResponse:
        refused = policy.refusal(request.path, _authorization(request))
        if refused is not None:
            status, message = refused
            if count is not None:
                count(request.path, status)
            if request.path in PAGE_ROLES:
                return web.Response(
                    text=message + "\n(in a browser: give the token as the password)\n",
                    status=status,
                    headers={"WWW-Authenticate": 'Basic realm="raftlog", charset="UTF-8"'},
                )
            return _error(ErrorCode.UNAUTHORIZED, message, status)
        return await handler(request)

    return authenticate


def _authorization(request: web.Request) -> str:
    """The request's Authorization header ("" when absent). Bytes that are not UTF-8
    come as surrogate escapes: :meth:`AuthPolicy.identify` calls them malformed.

    On the read-only pages (:data:`raftlog.rpc.roles.PAGE_ROLES`), which browsers
    open, HTTP Basic authentication carries the token as its password; it is read as
    ``Bearer <password>`` (any other header stays as sent)."""
    header = request.headers.get("Authorization", "")
    if request.path in PAGE_ROLES and header.startswith("Basic "):
        try:
            decoded = base64.b64decode(header[6:], validate=True).decode("utf-8")
        except (ValueError, UnicodeDecodeError):
            return header  # identify() calls it malformed
        return "Bearer " + decoded.partition(":")[2]
    return header


@dataclasses.dataclass(slots=True)
class _Activity:
    """When a stream read by aiohttp's reader (TLS) last received a frame, as a
    FrameReceiver's ``last_active`` says for its own (the idle timeout reads it)."""

    last_active: float = dataclasses.field(default_factory=time.monotonic)


def status_of_answer(answer: bytes | memoryview) -> int:
    """The HTTP status of a framed answer to a client call: its error code's when it
    is an ErrorResponse, else 200 (answers on a client stream carry no status)."""
    try:
        if codec.type_of(answer) is not ErrorResponse:
            return 200
        return STATUS.get(codec.decode(answer, ErrorResponse).code, 500)
    except CodecError:
        return 500


def _error_body(
    code: ErrorCode, message: str, status: int | None = None, **kw: Any
) -> tuple[int, bytes]:
    """(HTTP status, framed ErrorResponse) of an error: ``status`` or the code's."""
    return status or STATUS.get(code, 500), codec.encode(ErrorResponse(code, message, **kw))


def _error_body_of(exc: RequestError) -> tuple[int, bytes]:
    return _error_body(
        exc.code, str(exc), leader_id=exc.leader_id, leader_address=exc.leader_address
    )


def _error(code: ErrorCode, message: str, status: int | None = None, **kw: Any) -> web.Response:
    status, body = _error_body(code, message, status, **kw)
    return web.Response(body=body, status=status, content_type=CONTENT_TYPE)
