"""The Kafka protocol listener: one asyncio TCP server per node (``--kafka-listen``).

Per connection, requests are read one after another and each is answered by a task
of its own, so a client's pipelined requests (a producer's in-flight batches, a
consumer's fetch beside its metadata) run at once; the answers are written strictly in
request order, as Kafka's brokers do (a connection is "muted" past its in-flight
bound, ``max_in_flight``, until the oldest is answered).

The edge, before anything is allocated by what a client declares:

- a frame's declared size must be 10 .. ``max_request_bytes`` (Kafka's
  ``socket.request.max.bytes``): otherwise the connection is closed, before its
  body is read;
- a frame cut short (the peer closes mid-frame) ends the connection;
- an unknown API key, or a version of an API not answered here, closes the
  connection (what a Kafka broker does), except ApiVersions: an unsupported version
  of it is answered with UNSUPPORTED_VERSION (35) and the full API list in a v0 body
  (KIP-511), so that a newer client can pick a version;
- a body that does not decode by its schema closes the connection;
- a produced batch with a wrong CRC, a record count its bytes cannot hold, an
  unsupported codec or a control batch gets its partition's Kafka error
  (:mod:`raftlog.kafka.records`) and the connection stays usable.

A connection that sends nothing for ``idle_timeout_s`` (the node's
``--connections-max-idle-ms``, Kafka's ``connections.max.idle.ms``: 10 minutes), between
requests or in the middle of one, is closed. A Metadata request naming more distinct
topics than ``--max-topics-per-metadata`` closes its connection (duplicates are dropped
first, in Metadata and in Fetch, as Kafka's broker does).

Requests are read only while their declared sizes, with those of the requests read and
not yet answered, fit ``request_budget`` (the node's ``--queued-max-request-bytes``,
Kafka's ``queued.max.request.bytes``; a request larger than it goes alone): many bodies
sent at once, or half sent, hold no more than that (``raftlog_kafka_request_bytes``).

Nothing a connection does reaches another connection or the node's other work
beyond the calls it makes: an error closes that connection only. At most
``max_connections`` are open at once (``--kafka-max-connections``): one more is closed
as soon as it is accepted. Each closing is counted in
``raftlog_kafka_connections_closed{reason}``.

Authentication: on a node with tokens (``KafkaApis.sasl_required``) a connection
authenticates with SASL/PLAIN (SaslHandshake v1, then SaslAuthenticate) before any
request but ApiVersions; the token it sends as the password is its role for every
later request (:data:`raftlog.kafka.apis.CALLER`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
import struct
from typing import Any

from kio.index import load_response_schema

from raftlog.kafka.apis import (
    CALLER,
    ILLEGAL_SASL_STATE,
    UNSUPPORTED_VERSION,
    ClosingRefusal,
    KafkaApis,
    api_versions_body,
)
from raftlog.kafka.groups.handlers import CLIENT_HOST
from raftlog.kafka.protocol import (
    API_VERSIONS,
    API_VERSIONS_KEY,
    SASL_AUTHENTICATE_KEY,
    SASL_HANDSHAKE_KEY,
    RequestHead,
    UnsupportedRequest,
    build,
    encode_response,
    read_head,
    read_request,
    response_schema,
)
from raftlog.rpc.roles import Role

log = logging.getLogger("raftlog.kafka")

_SIZE = struct.Struct(">i")
#: The shortest request: api key, version, correlation id, client id length.
MIN_REQUEST_BYTES = 10
#: Requests of one connection answered at once before it reads no further.
DEFAULT_MAX_IN_FLIGHT = 64
#: Open Kafka connections a node accepts (--kafka-max-connections).
DEFAULT_MAX_CONNECTIONS = 1024
DEFAULT_REQUEST_BUDGET = 256 * 1024 * 1024
"""The node's ``--queued-max-request-bytes`` default (Kafka's ``queued.max.request.bytes``):
what the Kafka door's requests may hold at once, from their size prefix to their answer."""
DEFAULT_IDLE_TIMEOUT_S = 600.0
"""Kafka's ``connections.max.idle.ms`` default: a connection that sends no byte of a
request for this long, between requests or inside one, is closed."""


class KafkaListener:
    """Serves ``apis`` on ``host:port``; :meth:`start` then :meth:`stop`."""

    def __init__(
        self,
        apis: KafkaApis,
        max_request_bytes: int,
        metrics: Any,
        *,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        ssl_context: ssl.SSLContext | None = None,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        request_budget: int = DEFAULT_REQUEST_BUDGET,
    ) -> None:
        """``metrics``: the node's :class:`raftlog.metrics.NodeMetrics` (its
        ``kafka_*`` families). ``idle_timeout_s``: the node's
        ``--connections-max-idle-ms`` (Kafka's ``connections.max.idle.ms``)."""
        self.idle_timeout_s = idle_timeout_s
        # bytes of requests read or being read and not yet answered, by declared size
        self.request_budget = request_budget
        self._held = 0
        self._freed = asyncio.Event()
        self.apis = apis
        self.max_request_bytes = max_request_bytes
        self.metrics = metrics
        self.max_connections = max_connections
        self.max_in_flight = max_in_flight
        self.ssl_context = ssl_context
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(
            self._serve, host, port, ssl=self.ssl_context, reuse_address=True
        )
        self.apis.groups.coordinator.start()  # the group coordinator's timers

    @property
    def address(self) -> str:
        assert self._server is not None
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"{host}:{port}"

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await self.apis.groups.stop()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 5.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        # the requests' tasks, made by this one, inherit it: a member's client_host
        CLIENT_HOST.set(f"/{peer[0]}" if isinstance(peer, tuple) else "")
        if len(self._connections) >= self.max_connections:
            log.warning(
                "kafka: refusing %s: %d connections open (--kafka-max-connections)",
                peer,
                len(self._connections),
            )
            self._closed("connection_limit")
            writer.close()
            return
        self._connections.add(task)
        self.metrics.kafka_connections.set(len(self._connections))
        pending: asyncio.Queue[tuple[RequestHead, asyncio.Future[bytes | None]] | None]
        pending = asyncio.Queue(maxsize=self.max_in_flight)
        sender = asyncio.create_task(self._send_in_order(pending, writer, peer))
        try:
            await self._read_requests(reader, pending, peer)
        except (ConnectionError, asyncio.IncompleteReadError):
            self._closed("truncated")  # the client went away mid-frame: nothing to answer
        finally:
            with contextlib.suppress(asyncio.CancelledError):
                await pending.put(None)
                await sender
            sender.cancel()
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 1.0)
            self._connections.discard(task)
            self.metrics.kafka_connections.set(len(self._connections))

    def _closed(self, reason: str) -> None:
        self.metrics.kafka_connections_closed.labels(reason).inc()

    async def _read_requests(
        self,
        reader: asyncio.StreamReader,
        pending: asyncio.Queue[tuple[RequestHead, asyncio.Future[bytes | None]] | None],
        peer: Any,
    ) -> None:
        """Read frames until the client closes or sends one that ends the connection.

        On a listener that requires SASL (``apis.sasl_required``), a connection may
        send only ApiVersions, SaslHandshake (PLAIN) and SaslAuthenticate until the
        last succeeds; its role (client or admin) is then every later request's. A
        failed authentication is answered, then the connection closes (as Kafka's)."""
        role: Role | None = None
        handshaken = False
        while True:
            try:
                async with asyncio.timeout(self.idle_timeout_s):
                    prefix = await reader.readexactly(_SIZE.size)
            except asyncio.IncompleteReadError:
                return  # closed between requests, or mid size prefix
            except TimeoutError:
                log.info(
                    "kafka: closing %s: idle for %gs (--connections-max-idle-ms)",
                    peer,
                    self.idle_timeout_s,
                )
                self._closed("idle")
                return
            (size,) = _SIZE.unpack(prefix)
            if not MIN_REQUEST_BYTES <= size <= self.max_request_bytes:
                log.warning(
                    "kafka: closing %s: a request declares %d bytes, outside %d..%d "
                    "(--kafka-max-request-bytes)",
                    peer,
                    size,
                    MIN_REQUEST_BYTES,
                    self.max_request_bytes,
                )
                self._closed("request_size")
                return
            # Kafka's memory pool: a request is read only once its declared size fits what
            # the requests being read and answered leave of the budget (or none are), so
            # many bodies sent at once, or half sent, hold no more than the budget
            await self._hold(size)
            try:
                # a body cut short: IncompleteReadError; one that stops coming holds what
                # came (up to --kafka-max-request-bytes) until the idle timeout
                async with asyncio.timeout(self.idle_timeout_s):
                    frame = await reader.readexactly(size)
            except BaseException as exc:
                self._give_back(size)
                if not isinstance(exc, TimeoutError):
                    raise
                log.info(
                    "kafka: closing %s: a %d-byte request still unread after %gs "
                    "(--connections-max-idle-ms)",
                    peer,
                    size,
                    self.idle_timeout_s,
                )
                self._closed("idle")
                return
            owned = True  # the hold is given back here, unless an answer takes it
            try:
                try:
                    head, body_at = read_head(frame)
                except UnsupportedRequest as exc:
                    if exc.head.api_key != API_VERSIONS_KEY:
                        log.warning("kafka: closing %s: %s", peer, exc)
                        self._closed("unsupported_api")
                        return
                    await pending.put((exc.head, _done(_unsupported_api_versions(exc.head))))
                    continue
                except Exception as exc:
                    log.warning(
                        "kafka: closing %s: a request header does not decode: %r", peer, exc
                    )
                    self._closed("undecodable")
                    return
                try:
                    req = read_request(head, frame, body_at)
                except Exception as exc:
                    log.warning(
                        "kafka: closing %s: a %s v%d request does not decode: %r",
                        peer,
                        head.api_key,
                        head.api_version,
                        exc,
                    )
                    self._closed("undecodable")
                    return
                if head.api_key == SASL_AUTHENTICATE_KEY:
                    if handshaken:
                        values, role = self.apis.authenticate(req.auth_bytes)
                    else:
                        values = {
                            "error_code": ILLEGAL_SASL_STATE,
                            "error_message": "SaslAuthenticate before a SaslHandshake (PLAIN)",
                            "auth_bytes": b"",
                        }
                    answer = encode_response(head, build(response_schema(head), values))
                    await pending.put((head, _done(answer)))
                    if role is None:
                        log.warning("kafka: closing %s: %s", peer, values["error_message"])
                        self._closed("authentication")
                        return
                    continue
                if head.api_key == SASL_HANDSHAKE_KEY:
                    handshaken = req.mechanism == "PLAIN"
                elif self.apis.sasl_required and role is None and head.api_key != API_VERSIONS_KEY:
                    log.warning(
                        "kafka: closing %s: API %d before SASL/PLAIN authentication",
                        peer,
                        head.api_key,
                    )
                    self._closed("unauthenticated")
                    return
                answer_task = asyncio.ensure_future(self._answer(head, req, role))
                answer_task.add_done_callback(functools.partial(self._answered, size))
                owned = False
                await pending.put((head, answer_task))
            finally:
                if owned:
                    self._give_back(size)

    async def _hold(self, size: int) -> None:
        """Wait until ``size`` more bytes fit ``request_budget`` beside the requests held
        (or none is held: a request larger than the budget still goes alone), then hold
        them until :meth:`_give_back`."""
        while self._held and self._held + size > self.request_budget:
            self._freed.clear()
            await self._freed.wait()
        self._held += size
        self.metrics.kafka_request_bytes.set(self._held)

    def _answered(self, size: int, _task: object) -> None:
        self._give_back(size)

    def _give_back(self, size: int) -> None:
        self._held -= size
        self.metrics.kafka_request_bytes.set(self._held)
        self._freed.set()  # the waiting readers look again

    async def _answer(self, head: RequestHead, req: Any, role: Role | None) -> bytes | None:
        CALLER.set(role)  # this task's context: its handlers' tasks inherit it
        values = await self.apis.handle(head, req)
        self.metrics.kafka_requests.labels(API_VERSIONS[head.api_key][0]).inc()
        if values is None:
            return None  # produce with acks=0: Kafka sends no response
        return encode_response(head, build(response_schema(head), values))

    async def _send_in_order(
        self,
        pending: asyncio.Queue[tuple[RequestHead, asyncio.Future[bytes | None]] | None],
        writer: asyncio.StreamWriter,
        peer: Any,
    ) -> None:
        """Write each answer when it and every earlier one are ready; stop at None."""
        broken = False
        while True:
            item = await pending.get()
            if item is None:
                return
            head, future = item
            try:
                answer = await future
            except ClosingRefusal as exc:
                log.warning("kafka: closing %s: %s", peer, exc)
                broken = True
                self._closed(exc.reason)
                writer.close()
                continue
            except Exception:
                log.exception(
                    "kafka: %s v%d from %s failed; closing",
                    head.api_key,
                    head.api_version,
                    peer,
                )
                broken = True
                self._closed("failed")
                writer.close()
                continue
            if answer is None or broken or writer.is_closing():
                continue
            writer.write(_SIZE.pack(len(answer)) + answer)
            try:
                await writer.drain()
            except ConnectionError:
                broken = True


def _done(value: bytes) -> asyncio.Future[bytes | None]:
    future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


def _unsupported_api_versions(head: RequestHead) -> bytes:
    """KIP-511: UNSUPPORTED_VERSION and the full API list, in a v0 body."""
    body = build(load_response_schema(API_VERSIONS_KEY, 0), api_versions_body(UNSUPPORTED_VERSION))
    return encode_response(head, body)
