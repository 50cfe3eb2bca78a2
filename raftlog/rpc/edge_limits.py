"""Limits at a node's edge: what one client can make a node hold (issue 44).

Each limit is a ``raftlog server`` flag (:data:`FLAGS`), with a safe default in
:class:`EdgeLimits`; each refusal is counted by the limit's name
(``raftlog_edge_refusals_total{limit=...}``), and each time reading stops for
backpressure too (``raftlog_edge_backpressure_total{limit=...}``):

- ``queued_max_request_bytes`` (Kafka's ``queued.max.request.bytes``): bytes of
  requests read and not yet answered, node-wide (:class:`MemoryBudget`). Over it
  the node stops reading the streams that bring more (and defers reading a POST's
  body) until answers free room: backpressure, never a failure.
- ``max_in_flight_per_stream``: requests of one stream being answered; over it
  that stream is not read until one is answered (enforced by
  :mod:`raftlog.rpc.server`).
- ``request_header_timeout_ms``: a connection that has not sent its first whole
  HTTP request head by then is closed (half-sent or silent connections).
- ``connections_max_idle_ms`` (Kafka's ``connections.max.idle.ms``): a connection
  with no request in flight that has received nothing for that long is closed (a
  stream with a close frame that says so; clients reconnect when they next call).
- ``max_connections`` and ``max_connections_per_ip`` (Kafka's ``max.connections``
  and ``max.connections.per.ip``): a connection past either is closed at once;
- ``max_batches_per_produce`` and ``max_topics_per_metadata`` (distinct names,
  duplicates dropped first): a request past either is refused with
  INVALID_REQUEST naming the field and the flag (:meth:`EdgeGuard.refusal`).

:class:`EdgeGuard` holds the node's connections and enforces the last three; it
hooks aiohttp's :class:`~aiohttp.web.Server` (its ``connection_made`` and
``connection_lost``, which aiohttp's request handler calls for every connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from aiohttp import web

log = logging.getLogger(__name__)

__all__ = [
    "FLAGS",
    "EdgeConnection",
    "EdgeGuard",
    "EdgeLimits",
    "MemoryBudget",
]

#: each limit's name (the metric label) -> the ``raftlog server`` flag that sets it
FLAGS = {
    "queued_max_request_bytes": "--queued-max-request-bytes",
    "max_in_flight_per_stream": "--max-in-flight-per-stream",
    "request_header_timeout_ms": "--request-header-timeout-ms",
    "connections_max_idle_ms": "--connections-max-idle-ms",
    "max_connections": "--max-connections",
    "max_connections_per_ip": "--max-connections-per-ip",
    "max_batches_per_produce": "--max-batches-per-produce",
    "max_topics_per_metadata": "--max-topics-per-metadata",
}


@dataclasses.dataclass(frozen=True, slots=True)
class EdgeLimits:
    """The connection and request limits of one node (see the module doc).

    Defaults: large enough for a local cluster whose nodes, clients and Spark
    executors all connect from 127.0.0.1 (a client keeps a few connections per
    node, a Python client at most 5 produces in flight per partition), small
    enough that one client cannot take a node's memory.
    """

    queued_max_request_bytes: int = 256 * 1024 * 1024
    max_in_flight_per_stream: int = 1024
    request_header_timeout_ms: int = 10_000
    connections_max_idle_ms: int = 600_000
    max_connections: int = 10_000
    max_connections_per_ip: int = 2_000
    # issue 44: 300,000 one-byte batches in one produce took a leader 25 s; one name
    # 1,000,000 times in a metadata request made an 87 MB answer
    max_batches_per_produce: int = 10_000
    max_topics_per_metadata: int = 10_000


class MemoryBudget:
    """Bytes of requests in flight on a node, against ``limit``.

    ``charge`` never refuses: it says whether the budget is exhausted, and the
    reader that charged pauses itself (:meth:`wake_when_free` resumes it once
    answers released enough). A single request larger than the budget still goes
    through when nothing else is in flight, so no request size can wedge a node.
    """

    def __init__(self, limit: int, on_backpressure: Callable[[], None] = lambda: None) -> None:
        self.limit = limit
        self.used = 0
        self._waiting: list[Callable[[], None]] = []
        self._free = asyncio.Event()
        self._free.set()
        self._on_backpressure = on_backpressure

    @property
    def exhausted(self) -> bool:
        return self.used > self.limit

    def charge(self, nbytes: int) -> bool:
        self.used += nbytes
        if self.exhausted:
            self._free.clear()
            return True
        return False

    def release(self, nbytes: int) -> None:
        self.used -= nbytes
        if not self.exhausted and not self._free.is_set():
            self._free.set()
            waiting, self._waiting = self._waiting, []
            for resume in waiting:
                resume()

    def wake_when_free(self, resume: Callable[[], None]) -> None:
        self._on_backpressure()
        if self.exhausted:
            self._waiting.append(resume)
        else:
            resume()

    async def wait_free(self) -> None:
        """Return once the budget is not exhausted (at once when it is not)."""
        if self.exhausted:
            self._on_backpressure()
            await self._free.wait()


@dataclasses.dataclass(slots=True, eq=False)
class EdgeConnection:
    """One accepted connection, as the guard tracks it.

    ``requests``: HTTP requests being served on it (a stream counts as one for its
    whole life); ``head_done``: its first request head arrived; ``last_active``:
    monotonic time of its last request's end or, on a stream, of its last bytes
    (``receiver``'s); ``in_flight``: a stream's requests being answered.
    """

    transport: Any
    ip: str
    opened: float
    last_active: float
    head_done: bool = False
    requests: int = 0
    in_flight: int = 0
    receiver: Any = None  # the stream's FrameReceiver, once it has one
    close: Callable[[str], None] | None = None  # how to close it, saying why


class EdgeGuard:
    """The node's connections against the connection limits (see the module doc)."""

    def __init__(self, limits: EdgeLimits) -> None:
        self.limits = limits
        self.refusals: Counter[str] = Counter()
        self.backpressure: Counter[str] = Counter()
        self.budget = MemoryBudget(
            limits.queued_max_request_bytes,
            lambda: self.backpressure.update(("queued_max_request_bytes",)),
        )
        self._by_handler: dict[Any, EdgeConnection] = {}
        self._per_ip: Counter[str] = Counter()
        self._sweeper: asyncio.Task[None] | None = None

    # -- aiohttp's hooks

    def install(self, server: web.Server) -> None:
        """Watch every connection ``server`` (an AppRunner's, once set up) accepts, and
        start closing those past the timeouts."""
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: Any) -> None:
            made(handler, transport)
            self._admit(handler, transport)

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            lost(handler, exc)
            conn = self._by_handler.pop(handler, None)
            if conn is not None:
                self._per_ip[conn.ip] -= 1
                if not self._per_ip[conn.ip]:
                    del self._per_ip[conn.ip]

        # instance attributes: aiohttp's handler calls these through its manager
        server.connection_made = connection_made  # type: ignore[method-assign]
        server.connection_lost = connection_lost  # type: ignore[method-assign]
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep())

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper

    def _admit(self, handler: Any, transport: Any) -> None:
        peer = transport.get_extra_info("peername")
        ip = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        limit = None
        if len(self._by_handler) >= self.limits.max_connections:
            limit = "max_connections"
            cap = self.limits.max_connections
        elif self._per_ip[ip] >= self.limits.max_connections_per_ip:
            limit = "max_connections_per_ip"
            cap = self.limits.max_connections_per_ip
        if limit is not None:
            self.refusals[limit] += 1
            log.warning(
                "closed a connection from %s: over %s (%d, %s)", ip, limit, cap, FLAGS[limit]
            )
            # nothing read, nothing answered: the cap is the answer. After aiohttp's own
            # connection_made has finished: an abort inside it ends the connection before
            # aiohttp starts the handler's task, whose start then fails an assertion (a
            # traceback in the log per refused connection)
            transport.pause_reading()
            asyncio.get_running_loop().call_soon(transport.abort)
            return
        now = time.monotonic()
        self._by_handler[handler] = EdgeConnection(transport, ip, now, now)
        self._per_ip[ip] += 1

    def connection(self, handler: Any) -> EdgeConnection | None:
        """The tracked connection of aiohttp's request handler (``request.protocol``)."""
        return self._by_handler.get(handler)

    # -- requests

    def request_started(self, handler: Any) -> None:
        conn = self._by_handler.get(handler)
        if conn is not None:
            conn.head_done = True
            conn.requests += 1

    def request_ended(self, handler: Any) -> None:
        conn = self._by_handler.get(handler)
        if conn is not None:
            conn.requests -= 1
            conn.last_active = time.monotonic()

    def refusal(self, limit: str, field: str, count: int, per: str, advice: str) -> str:
        """Count a request refused by ``limit`` (a count limit of :class:`EdgeLimits`)
        and say why: the field, its count, the limit and its flag, then ``advice``."""
        self.refusals[limit] += 1
        return (
            f"{field}: {count} exceed the limit of {getattr(self.limits, limit)} {per} "
            f"({FLAGS[limit]}); {advice}"
        )

    # -- timeouts

    async def _sweep(self) -> None:
        header_s = self.limits.request_header_timeout_ms / 1000
        idle_s = self.limits.connections_max_idle_ms / 1000
        # a tenth of the shorter timeout: closed at most 10 % late, looked at rarely
        period = min(max(min(header_s, idle_s) / 10, 0.05), 1.0)
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            for conn in list(self._by_handler.values()):
                if not conn.head_done:
                    if now - conn.opened > header_s:
                        self._close(conn, "request_header_timeout_ms", "no whole request head")
                    continue
                if conn.in_flight or (conn.requests and conn.receiver is None):
                    continue  # a request is being answered: the connection is in use
                active = conn.last_active
                if conn.receiver is not None:
                    active = max(active, conn.receiver.last_active)
                if now - active > idle_s:
                    self._close(conn, "connections_max_idle_ms", "idle")

    def _close(self, conn: EdgeConnection, limit: str, what: str) -> None:
        self.refusals[limit] += 1
        ms = getattr(self.limits, limit)
        reason = f"{what} for {ms} ms ({FLAGS[limit]})"
        log.info("closing a connection from %s: %s", conn.ip, reason)
        if conn.close is not None:
            conn.close(reason)
        else:
            conn.transport.close()
        conn.head_done = True  # counted once: it is closing
        conn.last_active = float("inf")

    # -- metrics

    def gauges(self) -> dict[str, float]:
        """Current usage: name -> value (the metric names' suffixes)."""
        return {
            "connections": float(len(self._by_handler)),
            "queued_request_bytes": float(self.budget.used),
        }
