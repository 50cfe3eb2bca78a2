"""The aiohttp peer transport: raft's ``Transport`` between node processes.

One long-lived replication stream per pair of nodes (this node -> a peer): an
aiohttp WebSocket, opened lazily by the first send to that peer, carries every
group's appends, heartbeats, votes, recovery chunks and timeout_now requests.
Frames are binary, ``(request id, codec frame)`` (:func:`raftlog.rpc.peer.
stream_frame`); the peer answers each with the same id, in any order, so many
requests are in flight on the one stream at once.

Contract of :meth:`StreamTransport.send`: it returns the peer's reply, or raises
:class:`raftlog.raft.errors.TransportError` within ``timeout_s`` (connecting
included) — refused or reset connection, a handshake the peer refused (a wrong
or missing peer token), a timeout, an error reply, an undecodable reply. Raft
treats that as a lost message; no retries here: raft's own timers resend.

Invariants of a stream:

- every request in flight on a stream that ends (closed by either side, reset,
  an undecodable frame, a protocol violation) fails at once with TransportError,
  and the next send to that peer opens a new stream: a cut link never leaves a
  caller hanging and never poisons later sends;
- a request that times out on a stream from which nothing at all arrived while
  it waited closes that stream (the link is presumed dead, e.g. a blackholed
  proxy), so the next send reconnects; a timeout while other replies still
  arrive leaves the stream up (a slow handler, not a dead link);
- a reply is matched to its request by id only; a reply to a request that
  already failed (timed out) is dropped.

With a TLS context (:func:`raftlog.rpc.tls.client_context` of the cluster's
CA) the stream is ``wss`` and the peer's certificate is verified against the CA
for the peer's advertised host, also when its traffic is routed elsewhere (a
proxy per link): the name checked is the node's, not the route's. The
handshake carries the peer token, never the client token; the server's one
auth check (:class:`raftlog.rpc.server.AuthPolicy`) admits it before upgrading.

The stream's frames go unmasked both ways (:class:`UnmaskedWebSocket`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import ssl
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, TypeVar

import aiohttp

from raftlog.raft.errors import PeerRefused, TransportError
from raftlog.rpc import codec
from raftlog.rpc.codec import CodecError
from raftlog.rpc.frame_receiver import take_over
from raftlog.rpc.frame_writer import send_frame, write_frame
from raftlog.rpc.messages import ErrorResponse
from raftlog.rpc.peer import (
    REPLY_TYPES,
    STREAM_PATH,
    encoded_frame_parts,
    split_frame,
    stream_frame_parts,
)

K = TypeVar("K")
_T = TypeVar("_T")

AUTH_HEADER = "Authorization"
#: bounds one reply frame (a heartbeat batch reply grows with the groups a peer leads)
MAX_REPLY_BYTES = 16 << 20
#: how long closing a stream may wait for the peer's close frame (a cut link sends none)
CLOSE_TIMEOUT_S = 1.0
#: after a failed open of a peer's raft stream, its sends fail at once for this long
#: (StreamTransport._stream): a restarted peer is reached at most this much later.
REOPEN_AFTER_S = 0.2


class UnmaskedWebSocket(aiohttp.ClientWebSocketResponse):
    """A client WebSocket whose frames are sent unmasked.

    RFC 6455 has a browser's frames masked so that a script cannot make the bytes
    on the wire look like requests to a caching proxy in between. A raft stream
    is node to node, no script writes its frames, and they are mostly appends of
    a MiB or so: masking copied each frame twice and XORed it, an eighth of a
    node's busy time in the ``spark`` benchmark (aiohttp's ``writer.py``,
    ``header + mask + message``). aiohttp's reader follows a frame's mask bit, so
    the peer reads these frames as it reads masked ones.
    """

    def __init__(self, reader: Any, writer: Any, *args: Any, **kwargs: Any) -> None:
        writer.use_mask = False
        super().__init__(reader, writer, *args, **kwargs)
        self._frame_writer = writer

    async def send_parts(self, parts: list[bytes | memoryview]) -> None:
        """Send one binary frame whose payload is ``parts`` joined, without joining them
        (:func:`raftlog.rpc.frame_writer.send_frame`). Raises ConnectionError when the
        stream is closing."""
        await send_frame(self._frame_writer, parts)

    @property
    def writing_paused(self) -> bool:
        """The transport's buffer is over its high-water mark: a writer should wait."""
        return bool(self._frame_writer.protocol.writing_paused)

    def write_parts(self, parts: list[bytes | memoryview]) -> bool:
        """:meth:`send_parts` without the wait (:func:`raftlog.rpc.frame_writer.
        write_frame`): returns whether the caller should wait before writing more."""
        return write_frame(self._frame_writer, parts)


class StreamClosedError(TransportError):
    """A :class:`FrameStream` ended, or was closed, with the request in flight."""


@dataclasses.dataclass(frozen=True, slots=True)
class SentRequest:
    """A request :meth:`FrameStream.send_now` wrote; ``reply`` resolves to the reply
    frame's codec bytes, or fails with StreamClosedError."""

    request_id: int
    reply: asyncio.Future[memoryview]


class FrameStream:
    """One open WebSocket of ``(request id, codec frame)`` frames and the requests in
    flight on it: a node's replication stream to a peer, or a client's stream to a
    node (:mod:`raftlog.client.calls`). Replies are matched by id, in any order.

    :meth:`request` raises StreamClosedError (a TransportError) when the stream
    ends before the reply (every request in flight fails at once); it never times
    out by itself.

    Replies are read by a :class:`~raftlog.rpc.frame_receiver.FrameReceiver` on a
    plain connection (a large reply, a fetch's batches, lands in a buffer of its own
    straight from the socket: aiohttp's reader copied each byte three times), by
    aiohttp's reader on a TLS one. ``max_frame`` bounds one reply (0: unbounded); a
    larger one ends the stream.
    """

    def __init__(self, ws: UnmaskedWebSocket, peer: str, max_frame: int = 0) -> None:
        self.ws = ws
        self.peer = peer  # "node N (ADDRESS)", for messages
        self.closed = False
        loop = asyncio.get_running_loop()
        self.last_received = loop.time()
        self._next_id = 0
        self._pending: dict[int, asyncio.Future[memoryview]] = {}
        writer = ws._frame_writer
        # this side called the node: its answers are allocated at their announced size
        self._receiver = take_over(
            writer.transport, writer.protocol, self._on_frame, max_frame, sized_by_header=True
        )
        self.reader = loop.create_task(self._watch() if self._receiver else self._read())

    async def request(self, message: Any) -> memoryview:
        """Send ``message`` and return the reply frame's codec bytes, undecoded (no
        timeout here: the caller bounds it). Raises StreamClosedError; CodecError when
        ``message`` cannot be encoded."""
        return await self._exchange(lambda request_id: stream_frame_parts(request_id, message))

    async def request_encoded(self, *encoded: bytes | memoryview) -> memoryview:
        """:meth:`request` of a message that is already codec-encoded, in one buffer or
        several in order (sent without joining them)."""
        return await self._exchange(lambda request_id: encoded_frame_parts(request_id, *encoded))

    def send_now(self, message: Any) -> SentRequest | None:
        """Write ``message`` in this call, and return the request it is on the stream;
        None when it cannot go now without waiting (the stream is closed, or its
        buffer is over its high-water mark): use :meth:`request`. Raises CodecError
        when ``message`` cannot be encoded. The reply is :meth:`reply_of` the result."""
        if self.closed or self.ws.writing_paused:
            return None
        request_id, future, frame = self._register(
            lambda request_id: stream_frame_parts(request_id, message)
        )
        try:
            self.ws.write_parts(frame)
        except ConnectionError:
            self._pending.pop(request_id, None)
            return None
        return SentRequest(request_id, future)

    async def reply_of(self, sent: SentRequest) -> memoryview:
        """The reply frame's codec bytes to a request :meth:`send_now` wrote (no timeout
        here: the caller bounds it). Raises StreamClosedError."""
        try:
            return await sent.reply
        finally:
            self._pending.pop(sent.request_id, None)

    def _register(
        self, frame_of: Callable[[int], list[bytes | memoryview]]
    ) -> tuple[int, asyncio.Future[memoryview], list[bytes | memoryview]]:
        """A new request id, the future of its reply (recorded as pending) and its frame;
        nothing is recorded when ``frame_of`` raises (a message that cannot be encoded)."""
        self._next_id += 1
        request_id = self._next_id
        frame = frame_of(request_id)
        future: asyncio.Future[memoryview] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        return request_id, future, frame

    async def _exchange(self, frame_of: Callable[[int], list[bytes | memoryview]]) -> memoryview:
        if self.closed:
            raise StreamClosedError(f"the stream to {self.peer} closed")
        request_id, future, frame = self._register(frame_of)
        try:
            await self.ws.send_parts(frame)
            return await future
        except ConnectionError as exc:  # aiohttp: "Cannot write to closing transport"
            raise StreamClosedError(f"the stream to {self.peer} closed: {exc}") from exc
        finally:
            self._pending.pop(request_id, None)

    def _deliver(self, frame: bytes | memoryview) -> str:
        """Hand a reply frame to the request of its id, whichever reader read it; why
        the stream is bad when the frame holds no id ('' otherwise)."""
        self.last_received = asyncio.get_running_loop().time()
        try:
            request_id, body = split_frame(frame)
        except CodecError as exc:  # no id: nothing can be matched, the stream is bad
            return str(exc)
        future = self._pending.pop(request_id, None)
        if future is not None and not future.done():
            future.set_result(body)
        # else the request already failed (timed out): its reply is late
        return ""

    def _on_frame(self, frame: bytes | memoryview) -> None:
        """A reply from the FrameReceiver."""
        bad = self._deliver(frame)
        if bad:
            assert self._receiver is not None
            self._receiver.close(aiohttp.WSCloseCode.PROTOCOL_ERROR, bad.encode()[:123])

    async def _watch(self) -> None:
        """The reader task of a taken-over stream: ends the stream when the connection
        does (or, cancelled by :meth:`abort`, closes it)."""
        receiver = self._receiver
        assert receiver is not None
        try:
            await asyncio.shield(receiver.done)
        finally:
            self.abort(receiver.reason or "the peer closed it")  # closes the receiver
            # aiohttp's side: its close finds the transport closing and releases the
            # connection at once (else its pool warns "Unclosed connection" later)
            with contextlib.suppress(Exception):
                await self.ws.close()

    async def _read(self) -> None:
        reason = "the peer closed it"
        try:
            async for msg in self.ws:
                if msg.type is not aiohttp.WSMsgType.BINARY:
                    detail = self.ws.exception() or msg.data
                    reason = f"unexpected {msg.type.name} frame ({detail!r})"
                    break
                bad = self._deliver(msg.data)
                if bad:
                    reason = bad
                    break
            else:
                if self.ws.exception() is not None:
                    reason = str(self.ws.exception())
        except Exception as exc:  # a reset mid-read, a bug: end this stream, not the node
            reason = f"{type(exc).__name__}: {exc}"
        finally:
            self.abort(reason)
            with contextlib.suppress(Exception):
                await self.ws.close()

    def abort(self, reason: str) -> None:
        """Close the stream for new requests and fail every request in flight."""
        self.closed = True
        if self._receiver is not None:
            # the socket closes now, also when the reader task never got to run
            self._receiver.close(aiohttp.WSCloseCode.GOING_AWAY, b"")
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(
                    StreamClosedError(f"the stream to {self.peer} closed: {reason}")
                )
        if asyncio.current_task() is not self.reader:
            self.reader.cancel()  # its finally closes the socket


async def timed_request(
    get_stream: Callable[[], Awaitable[FrameStream]],
    request: Callable[[FrameStream], Awaitable[_T]],
    timeout_s: float,
) -> _T:
    """``request(stream)`` on the stream ``get_stream()`` gives, both within ``timeout_s``.

    The one rule for a dead link, for the node's and the client's streams: when the
    time runs out and nothing at all came back on the stream while the request
    waited, the stream is aborted (its other requests fail, the next call opens a
    new one); a stream that still answers others stays. Raises TimeoutError.
    """
    stream: FrameStream | None = None
    sent_at = 0.0
    try:
        async with asyncio.timeout(timeout_s):
            stream = await get_stream()
            sent_at = asyncio.get_running_loop().time()
            return await request(stream)
    except TimeoutError:
        if stream is not None and stream.last_received < sent_at:
            stream.abort(f"nothing received for {timeout_s:.3g} s")
        raise


class StreamPool(Generic[K]):
    """Open :class:`FrameStream` s by key (a peer's node id, a node's address): at most
    one per key, opened once for all the callers that want it meanwhile.

    A caller's timeout never cancels the connect that others wait for (they await it
    shielded). A stream that opens after :meth:`close` is aborted, not kept.
    """

    def __init__(self, closed_reason: str) -> None:
        self._closed_reason = closed_reason
        self._streams: dict[K, FrameStream] = {}
        self._connecting: dict[K, asyncio.Task[FrameStream]] = {}
        self._closed = False

    async def get(
        self, key: K, open_stream: Callable[[], Coroutine[Any, Any, FrameStream]]
    ) -> FrameStream:
        """The open stream of ``key``, else the one ``open_stream()`` opens (its errors
        reach every caller waiting for it)."""
        stream = self._streams.get(key)
        if stream is not None and not stream.closed:
            return stream
        task = self._connecting.get(key)
        if task is None:
            task = asyncio.get_running_loop().create_task(open_stream())
            self._connecting[key] = task
            task.add_done_callback(lambda t: self._opened(key, t))
        return await asyncio.shield(task)

    def opened(self, key: K) -> FrameStream | None:
        """The open stream of ``key``; None when there is none (never opens one)."""
        stream = self._streams.get(key)
        return stream if stream is not None and not stream.closed else None

    def _opened(self, key: K, task: asyncio.Task[FrameStream]) -> None:
        if self._connecting.get(key) is task:
            del self._connecting[key]
        if task.cancelled() or task.exception() is not None:
            return
        stream = task.result()
        if self._closed:
            stream.abort(self._closed_reason)
        else:
            self._streams[key] = stream

    def drop(self, key: K, reason: str) -> None:
        """Abort the stream of ``key`` (its requests in flight fail); the next get opens anew."""
        stale = self._streams.pop(key, None)
        if stale is not None:
            stale.abort(reason)

    async def close(self) -> None:
        """Abort every stream and cancel every connect under way; wait for the readers."""
        self._closed = True
        for task in list(self._connecting.values()):
            task.cancel()
        streams, self._streams = list(self._streams.values()), {}
        for stream in streams:
            stream.abort(self._closed_reason)
        await asyncio.gather(*(s.reader for s in streams), return_exceptions=True)


async def open_frame_stream(
    session: aiohttp.ClientSession,
    url: str,
    label: str,
    *,
    headers: dict[str, str],
    max_msg_size: int,
    **tls: Any,
) -> FrameStream:
    """A :class:`FrameStream` (named ``label`` in its errors) over a new WebSocket to
    ``url``: the one way every stream opens, the raft stream and the client stream
    alike. Never compressed, and no receive timeout (each request bounds its own wait);
    closing waits at most :data:`CLOSE_TIMEOUT_S` for the other end's close frame.
    ``max_msg_size`` bounds one incoming frame (0: unbounded); ``tls`` goes to
    ``ws_connect`` (``ssl``, ``server_hostname``). aiohttp's errors pass through, for
    each caller to say what failed in its own terms."""
    ws = await session.ws_connect(
        url,
        headers=headers,
        max_msg_size=max_msg_size,
        timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=CLOSE_TIMEOUT_S),
        compress=0,
        **tls,
    )
    return FrameStream(ws, label, max_msg_size)


class _Deferred:
    """An awaitable that makes its coroutine only when awaited: a reply nobody waits
    for (its sender was cancelled before it ran) leaves no coroutine never awaited."""

    __slots__ = ("_make",)

    def __init__(self, make: Callable[[], Awaitable[Any]]) -> None:
        self._make = make

    def __await__(self) -> Any:
        return self._make().__await__()


def _decode_reply(body: memoryview, reply_type: type, peer: Callable[[], str]) -> Any:
    """The reply in ``body``, or a TransportError (the request's outcome) when
    it is an error reply, another type, or undecodable: only that request fails.
    ``peer()`` names the sender in that error."""
    try:
        reply = codec.decode(body)
    except CodecError as exc:
        return TransportError(f"bad reply from {peer()}: {exc}")
    if type(reply) is reply_type:
        return reply
    if isinstance(reply, ErrorResponse):
        return TransportError(f"{peer()} answered with an error: {reply.message}")
    return TransportError(
        f"bad reply from {peer()}: expected a {reply_type.__name__}, got {type(reply).__name__}"
    )


class StreamTransport:
    """Sends raft requests to peers by node id over one stream per peer; returns replies.

    ``peers`` maps a node id to its advertised address; ``routes`` (optional) to
    where its traffic goes instead. ``peer_token`` is sent in every handshake;
    ``ssl_context`` (None: plain ``ws``) verifies each peer for its advertised
    host. ``timeout_s`` bounds each send, connecting included.
    """

    def __init__(
        self,
        node_id: int,
        peers: dict[int, str],
        *,
        routes: dict[int, str] | None = None,
        peer_token: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 5.0,
        gate: Callable[[], str | None] | None = None,
    ) -> None:
        """``gate``, when given, is asked before every send: a reason (str) fails the
        send with a TransportError saying it, None lets it go."""
        self.node_id = node_id
        self._gate = gate
        self._peers = dict(peers)
        self._routes = dict(routes or {})
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else False
        self._scheme = "wss" if ssl_context is not None else "ws"
        self._auth = {AUTH_HEADER: f"Bearer {peer_token}"} if peer_token else {}
        self._timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None
        self._streams = StreamPool[int]("transport is closed")
        # target -> (loop time until which its sends fail at once, the failure): see _stream
        self._failed_open: dict[int, tuple[float, TransportError]] = {}
        self._closed = False

    def add_peer(self, node_id: int, address: str) -> None:
        """Reach ``node_id`` at ``address`` from now on (a node that joined the running
        cluster, learnt from the controller); a new address closes the old stream."""
        if self._peers.get(node_id) == address:
            return
        self._peers[node_id] = address
        self._failed_open.pop(node_id, None)
        self._streams.drop(node_id, f"node {node_id} moved to {address}")

    async def send(self, target_node: int, message: Any) -> Any:
        """Send ``message`` to ``target_node``; return its reply or raise TransportError."""
        if self._closed:
            raise TransportError("transport is closed")
        if self._gate is not None and (refused := self._gate()) is not None:
            raise TransportError(refused)
        return await self._reply(
            target_node, message, lambda: self._stream(target_node), lambda s: s.request(message)
        )

    def send_now(self, target_node: int, message: Any) -> Awaitable[Any] | None:
        """:meth:`send`, with ``message`` written to ``target_node``'s open stream in this
        call rather than in a later turn of the loop; the awaitable gives the reply or
        raises TransportError, as :meth:`send` does. None when it cannot be written now
        (no stream open, its buffer over the high-water mark, a send that would fail):
        call :meth:`send`, which opens, waits and says why."""
        if self._closed or (self._gate is not None and self._gate() is not None):
            return None
        stream = self._streams.opened(target_node)
        if stream is None or type(message) not in REPLY_TYPES:
            return None
        try:
            sent = stream.send_now(message)
        except CodecError:
            return None
        if sent is None:
            return None

        async def opened() -> FrameStream:
            return stream

        return _Deferred(
            lambda: self._reply(target_node, message, opened, lambda s: s.reply_of(sent))
        )

    async def _reply(
        self,
        target_node: int,
        message: Any,
        get_stream: Callable[[], Awaitable[FrameStream]],
        request: Callable[[FrameStream], Awaitable[memoryview]],
    ) -> Any:
        reply_type = REPLY_TYPES.get(type(message))
        if reply_type is None:
            raise TransportError(f"{type(message).__name__} is not a peer request")
        try:
            body = await timed_request(get_stream, request, self._timeout_s)
        except TimeoutError as exc:
            what = f"{type(message).__name__} to {self._describe(target_node)}"
            raise TransportError(f"{what} timed out after {self._timeout_s:g} s") from exc
        except CodecError as exc:
            what = f"{type(message).__name__} to {self._describe(target_node)}"
            raise TransportError(f"{what}: cannot encode it: {exc}") from exc
        # Described only on failure: a send is on every write's path (an f-string and
        # two lookups per append to each follower).
        outcome = _decode_reply(body, reply_type, lambda: self._describe(target_node))
        if isinstance(outcome, TransportError):
            raise outcome
        return outcome

    async def send_encoded(self, target_node: int, encoded: bytes | memoryview) -> memoryview:
        """The reply's codec bytes, undecoded, to a request that is already codec-encoded
        (a node's shard 0 relays a peer's request to the shard that owns its group as
        it came, and its reply back the same way). Raises TransportError."""
        if self._closed:
            raise TransportError("transport is closed")
        try:
            return await timed_request(
                lambda: self._stream(target_node),
                lambda s: s.request_encoded(encoded),
                self._timeout_s,
            )
        except TimeoutError as exc:
            raise TransportError(
                f"a relayed request to {self._describe(target_node)} timed out after "
                f"{self._timeout_s:g} s"
            ) from exc

    def _describe(self, target: int) -> str:
        advertised = self._peers.get(target)
        address = self._routes.get(target, advertised)
        via = f" via {address}" if address != advertised else ""
        return f"node {target} ({advertised}{via})"

    async def _stream(self, target: int) -> FrameStream:
        """The open stream to ``target``, opening it (once, shared by concurrent sends).

        After an open that failed, sends to ``target`` fail at once with that error for
        :data:`REOPEN_AFTER_S`: a lost message, which raft's timers resend. Why: after a
        kill -9, every group that sends to the dead node (a vote request per election,
        the new leaders' appends, recovery) tried a connection of its own, one after
        the other as each was refused: at 1,000 partitions about a tenth of a live
        node's event loop during the failover went into connects to the dead node."""
        failed = self._failed_open.get(target)
        if failed is not None:
            until, error = failed
            if asyncio.get_running_loop().time() < until:
                raise type(error)(f"{error} (not retried for {REOPEN_AFTER_S:g} s)")
            del self._failed_open[target]
        try:
            return await self._streams.get(target, lambda: self._open(target))
        except TransportError as exc:
            if target not in self._failed_open:
                until = asyncio.get_running_loop().time() + REOPEN_AFTER_S
                self._failed_open[target] = (until, exc)
            raise

    async def _open(self, target: int) -> FrameStream:
        advertised = self._peers.get(target)
        if advertised is None:
            raise TransportError(f"unknown peer node {target}")
        address = self._routes.get(target, advertised)
        tls: dict[str, Any] = {"ssl": self._ssl}
        if self._ssl is not False and address != advertised:
            tls["server_hostname"] = _host(advertised)
        if self._session is None:
            self._session = aiohttp.ClientSession(
                # bounds the handshake; the open stream has no receive timeout (sends do)
                timeout=aiohttp.ClientTimeout(
                    total=self._timeout_s, connect=min(1.0, self._timeout_s)
                ),
                ws_response_class=UnmaskedWebSocket,
            )
        peer = self._describe(target)
        try:
            stream = await open_frame_stream(
                self._session,
                f"{self._scheme}://{address}{STREAM_PATH}",
                peer,
                headers=self._auth,
                max_msg_size=MAX_REPLY_BYTES,
                **tls,
            )
        except aiohttp.WSServerHandshakeError as exc:
            raise TransportError(
                f"{peer} refused the raft stream: HTTP {exc.status} {exc.message} "
                "(is this node's --peer-token the peer's?)"
            ) from exc
        except aiohttp.ClientConnectorError as exc:
            # Refused: nothing listens at the address (a killed or stopped node), which
            # node liveness may judge at once; other connect errors may be a slow peer.
            refused = isinstance(exc.os_error, ConnectionRefusedError)
            error = PeerRefused if refused else TransportError
            raise error(f"cannot open the raft stream to {peer}: {exc!r}") from exc
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise TransportError(f"cannot open the raft stream to {peer}: {exc!r}") from exc
        if self._peers.get(target) != advertised:  # add_peer moved it while connecting
            stream.abort(f"node {target} moved to {self._peers.get(target)}")
            raise TransportError(f"{peer} moved while the raft stream was opening")
        return stream

    async def close(self) -> None:
        """Fail every request in flight, close every stream; later sends raise."""
        self._closed = True
        await self._streams.close()
        if self._session is not None:
            await self._session.close()


def _host(address: str) -> str:
    """``HOST`` of ``HOST:PORT`` (brackets of an IPv6 literal removed)."""
    return address.rpartition(":")[0].strip("[]")
