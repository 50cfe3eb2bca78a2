"""A controllable TCP proxy for one link: the network half of the nemesis.

``TcpProxy`` listens on 127.0.0.1 (an ephemeral port by default) and forwards
every accepted connection to a target ``host:port``. A test switches it
between modes at any time:

- ``heal()``: forward both ways (the initial mode);
- ``cut()``: a partition. Live connections are aborted and new ones are
  closed at once (``blackhole=False``: the peer sees a refused/reset link) or
  accepted and held silently, never reaching the target, until the next mode
  change closes them (``blackhole=True``: the peer sees timeouts, as with
  dropped packets);
- ``drop_responses()``: forward client→server bytes but discard
  server→client bytes, so a client times out and retries a write that landed;
- ``delay(seconds)``: hold every chunk ``seconds`` before forwarding it, in
  both directions, keeping order (composes with the modes above).

Invariant: the proxy never delivers a stream with a hole in it. Any
connection that had bytes discarded (drop_responses) or that is held by a
blackhole is closed when the mode changes, so after ``heal()`` clients
reconnect instead of reading a stale response as the answer to a new request.

Run as a process with a control endpoint: ``python -m raftlog.faults.proxy_control``
(see :mod:`raftlog.faults.proxy_control`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import ipaddress
import logging
import socket
import time
from collections.abc import Callable

logger = logging.getLogger(__name__)

_CHUNK = 64 * 1024
_QUEUE_CHUNKS = 64  # per direction: bounds memory while delaying; reading stalls when full
_CONNECT_TIMEOUT_S = 5.0


class Mode(enum.StrEnum):
    PASS = "pass"
    CUT = "cut"
    BLACKHOLE = "blackhole"
    DROP_RESPONSES = "drop_responses"


def check_loopback(host: str, field: str = "listen host") -> str:
    """Return ``host`` if it is a loopback address; the proxy never listens elsewhere."""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"{field} must be a loopback address such as 127.0.0.1, got {host!r}")
    return host


class _Link:
    """One proxied connection: two pumps (up: client→target, down: target→client)."""

    def __init__(self, client: asyncio.StreamWriter) -> None:
        self.client = client
        self.target: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.lost_bytes = False  # some bytes were discarded: never resume this stream
        self.held = False  # accepted by a blackhole; never connected to the target

    def abort(self) -> None:
        for writer in (self.client, self.target):
            if writer is not None:
                writer.transport.abort()
        for task in self.tasks:
            task.cancel()


class TcpProxy:
    """Forward 127.0.0.1:``listen_port`` to ``target_host:target_port`` under test control.

    Not thread-safe: call it from the event loop it was started on (the control
    endpoint does). ``start()`` binds; ``port`` is then the bound port.
    """

    def __init__(
        self,
        target_host: str,
        target_port: int,
        *,
        listen_host: str = "127.0.0.1",
        listen_port: int = 0,
        name: str = "link",
    ) -> None:
        if not isinstance(target_port, int) or not 0 < target_port < 65536:
            raise ValueError(f"target_port must be an int in 1..65535, got {target_port!r}")
        if not isinstance(listen_port, int) or not 0 <= listen_port < 65536:
            raise ValueError(
                f"listen_port must be an int in 0..65535 (0: ephemeral), got {listen_port!r}"
            )
        self.name = name
        self.target = (target_host, target_port)
        self._listen = (check_loopback(listen_host), listen_port)
        self._server: asyncio.Server | None = None
        self._links: set[_Link] = set()
        self._mode = Mode.PASS
        self._delay = 0.0
        self.connections_accepted = 0
        self.bytes_up = 0  # delivered to the target
        self.bytes_down = 0  # delivered to clients
        self.bytes_dropped = 0

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        if self._server is not None:
            raise RuntimeError(f"proxy {self.name!r} is already started")
        self._server = await asyncio.start_server(self._accept, *self._listen)

    async def stop(self) -> None:
        """Close the listener and every connection; idempotent."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self._close_links(lambda _link: True)
        if server is not None:
            await server.wait_closed()

    async def __aenter__(self) -> TcpProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError(f"proxy {self.name!r} is not started")
        return self._server.sockets[0].getsockname()[1]

    @property
    def address(self) -> str:
        return f"{self._listen[0]}:{self.port}"

    # -- control ----------------------------------------------------------------------------

    @property
    def mode(self) -> Mode:
        return self._mode

    @property
    def delay_seconds(self) -> float:
        return self._delay

    @property
    def open_connections(self) -> int:
        return len(self._links)

    def cut(self, *, blackhole: bool = False) -> None:
        """Partition the link: abort live connections; refuse (or blackhole) new ones."""
        self._set_mode(Mode.BLACKHOLE if blackhole else Mode.CUT)
        self._close_links(lambda _link: True)

    def heal(self) -> None:
        """Forward both ways again (the delay is kept; ``delay(0)`` removes it)."""
        self._set_mode(Mode.PASS)

    def drop_responses(self) -> None:
        """Forward requests, discard responses (see the module docstring)."""
        self._set_mode(Mode.DROP_RESPONSES)

    def delay(self, seconds: float) -> None:
        """Hold each chunk ``seconds`` (>= 0, at most 60) before forwarding it."""
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise ValueError(f"delay seconds must be a number, got {seconds!r}")
        if not 0 <= seconds <= 60:
            raise ValueError(f"delay seconds must be in [0, 60], got {seconds!r}")
        self._delay = float(seconds)

    def status(self) -> dict[str, object]:
        return {
            "name": self.name,
            "listen": self.address if self._server is not None else None,
            "target": f"{self.target[0]}:{self.target[1]}",
            "mode": self._mode.value,
            "delay_s": self._delay,
            "open_connections": len(self._links),
            "connections_accepted": self.connections_accepted,
            "bytes_up": self.bytes_up,
            "bytes_down": self.bytes_down,
            "bytes_dropped": self.bytes_dropped,
        }

    def _set_mode(self, mode: Mode) -> None:
        if mode is not self._mode:
            logger.info("proxy %s: %s -> %s", self.name, self._mode.value, mode.value)
        self._mode = mode
        # Streams with holes, and blackholed connections, never resume (module invariant).
        self._close_links(lambda link: link.lost_bytes or link.held)

    def _close_links(self, which: Callable[[_Link], bool]) -> None:
        for link in [link for link in self._links if which(link)]:
            self._links.discard(link)
            link.abort()

    # -- forwarding -------------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections_accepted += 1
        _set_nodelay(writer)
        if self._mode is Mode.CUT:
            writer.transport.abort()
            return
        link = _Link(writer)
        self._links.add(link)
        try:
            if self._mode is Mode.BLACKHOLE:
                link.held = True
                await self._swallow(reader, link)
                return
            try:
                target_reader, target_writer = await asyncio.wait_for(
                    asyncio.open_connection(*self.target), _CONNECT_TIMEOUT_S
                )
            except (OSError, TimeoutError) as exc:
                logger.info("proxy %s: cannot reach target %s: %s", self.name, self.target, exc)
                return
            if target_writer.get_extra_info("sockname") == target_writer.get_extra_info("peername"):
                # A TCP self-connect (the target is down and the kernel gave this
                # connection the target's port as its source): relaying it would echo
                # the client's own messages back to it.
                logger.info("proxy %s: self-connected to %s; dropped", self.name, self.target)
                target_writer.transport.abort()
                return
            link.target = target_writer
            _set_nodelay(target_writer)
            if link not in self._links:  # cut while connecting
                return
            link.tasks = [
                asyncio.ensure_future(self._pump(reader, target_writer, link, up=True)),
                asyncio.ensure_future(self._pump(target_reader, writer, link, up=False)),
            ]
            # When either side finishes, the whole connection goes (half-close is not needed).
            await asyncio.wait(link.tasks, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            pass
        finally:
            self._links.discard(link)
            link.abort()

    async def _swallow(self, reader: asyncio.StreamReader, link: _Link) -> None:
        """Blackhole: read and discard until the client goes or the link is closed."""
        with contextlib.suppress(OSError, asyncio.CancelledError):
            while link in self._links:
                data = await reader.read(_CHUNK)
                if not data:
                    return
                self.bytes_dropped += len(data)

    async def _pump(
        self, src: asyncio.StreamReader, dst: asyncio.StreamWriter, link: _Link, *, up: bool
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(_QUEUE_CHUNKS)
        writer = asyncio.ensure_future(self._deliver(queue, dst, link, up=up))
        try:
            while True:
                data = await src.read(_CHUNK)
                if not data:
                    break
                await queue.put((time.monotonic() + self._delay, data))
            await queue.put((0.0, b""))  # end of stream
            await writer
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.cancel()

    async def _deliver(
        self, queue: asyncio.Queue[tuple[float, bytes]], dst: asyncio.StreamWriter, link: _Link,
        *, up: bool,
    ) -> None:  # fmt: skip
        while True:
            due, data = await queue.get()
            if not data:
                return
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            # The mode is checked at delivery, so a change applies to bytes in flight too.
            if self._mode is Mode.DROP_RESPONSES and not up:
                link.lost_bytes = True
                self.bytes_dropped += len(data)
                continue
            if self._mode in (Mode.CUT, Mode.BLACKHOLE):
                link.lost_bytes = True
                self.bytes_dropped += len(data)
                continue
            dst.write(data)
            await dst.drain()
            if up:
                self.bytes_up += len(data)
            else:
                self.bytes_down += len(data)


def _set_nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
