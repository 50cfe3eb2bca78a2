"""The server side of a stream, read without copying: each large frame lands in a buffer
of its own, straight from the socket.

A stream (:data:`~raftlog.rpc.peer.STREAM_PATH`, the client stream) opens as an
aiohttp WebSocket. aiohttp's reader then makes every received byte travel three
times through memory before the handler sees it: the event loop copies each read
into a new ``bytes``, the frame parser slices it into fragments, and the message
is their join. A follower receives every replicated byte this way, so these
copies were about a tenth of the nodes' CPU under the sink's load (perf:
``__memmove_avx512_unaligned_erms``, 14 % of the nodes' samples).

:func:`take_over` swaps the connection's protocol, once the upgrade is answered,
for a :class:`FrameReceiver`, an :class:`asyncio.BufferedProtocol`: the event loop
reads into the buffer it hands out. Small frames are parsed out of one reused
64 KiB buffer (and copied out, they are small); a frame larger than what that
buffer holds gets an array of its own, which the socket fills directly, and is
handed on as a read-only view: nothing writes to it afterwards, so a batch decoded
from it keeps pointing into it (``RecordBatch.decode``).

A frame's array grows as its bytes arrive, never by the length its header
declares (a header is 14 bytes; a client could claim 33 MiB in each of many
streams and send nothing more): it starts at :data:`FIRST_FRAME_BYTES` (or the
frame's size, when smaller) and grows :data:`FRAME_GROWTH` times over, up to the
declared size, each time it fills. A frame of 4 MiB (the sink's) is copied once
in part (its first MiB); memory never exceeds four times what arrived.

That is a node's side, where the announced size is a stranger's word. The side
that opened the stream (a client reading a node's answers, a node reading its
peer's) reads answers to its own requests from a node it chose to call: there
(``sized_by_header``) a frame's array is allocated once at its announced size, up
to :data:`SIZED_BY_HEADER_MAX` (a fetch answer: up to 16 MiB of batches and a
batch of up to 64 MiB), and grows as above past that. The reader's 1 -> 4 ->
16 MiB growth copies of a 16 MiB fetch answer cost about 0.3 ms each (4 % of the
reader's CPU). The array is not zeroed (``numpy.empty``): its pages become
memory as the socket fills them, not when allocated.

Reading can be paused for reasons of the owner's (:meth:`FrameReceiver.pause`):
a stream with too many requests in flight; and while the transport's write
buffer is over its high-water mark (answers the other end does not read): then
no more requests are read from it either. With a node's memory budget for
requests (``budget``), every frame's bytes are charged to it (a large frame's as
they arrive; the owner releases them once answered), and no frame is begun while
the budget is exhausted: reading pauses at the frame's start, its first bytes
left in the shared buffer, until the budget has room (Kafka mutes a channel so
when its memory pool is out). A frame begun always completes, so a frame larger
than the budget, or many begun at once, cannot wedge a node: the budget is
exceeded by at most the frames in progress.

Only what raftlog's streams send is accepted: whole binary frames, masked or
not, never compressed or fragmented. A text or fragmented frame closes the
stream with the WebSocket close code that says why, as aiohttp's reader did. A
binary frame past the limit does too, unless the owner takes ``on_oversized``:
then the frame's first :data:`OVERSIZED_HEAD_BYTES` bytes go to it (a client
stream's request id, to answer "too large" under it, as a POST's 413 does) and
the rest of the frame is read into the shared buffer and dropped, never held:
the stream goes on with the next frame. Pings are answered; a close frame is
answered and ends the stream.
Writing goes through aiohttp's writer on the same transport (the owner's
answers, :mod:`raftlog.rpc.frame_writer`), whose protocol still gets the
transport's flow-control and connection-lost callbacks from here.
"""

from __future__ import annotations

import asyncio
import struct
import time
from collections.abc import Callable
from typing import Any, Protocol

import numpy
from aiohttp import WSCloseCode
from aiohttp._websocket.helpers import websocket_mask

__all__ = [
    "FIRST_FRAME_BYTES",
    "FRAME_GROWTH",
    "OVERSIZED_HEAD_BYTES",
    "SIZED_BY_HEADER_MAX",
    "FrameReceiver",
    "RequestBudget",
    "take_over",
]

FIRST_FRAME_BYTES = 1024 * 1024
"""The first array of a frame larger than the shared buffer (at most its size)."""

FRAME_GROWTH = 4
"""How many times over a frame's array grows each time it fills (to its size at most)."""

SIZED_BY_HEADER_MAX = 96 * 1024 * 1024
"""The largest frame allocated at its announced size at once with ``sized_by_header``."""

#: the pause reasons a FrameReceiver sets itself
PAUSED_WRITES = "write buffer over its high-water mark"
PAUSED_BUDGET = "memory budget"


class RequestBudget(Protocol):
    """The node's memory budget for requests (:class:`raftlog.rpc.edge_limits.
    MemoryBudget`): what a FrameReceiver charges the bytes it reads to."""

    @property
    def exhausted(self) -> bool:
        """Whether more bytes are in use than the budget allows."""
        ...

    def charge(self, nbytes: int) -> bool:
        """Count ``nbytes`` more in use; whether the budget is now exhausted."""
        ...

    def release(self, nbytes: int) -> None:
        """Count ``nbytes`` fewer in use (they were answered, or dropped)."""
        ...

    def wake_when_free(self, resume: Callable[[], None]) -> None:
        """Call ``resume`` once, when the budget is no longer exhausted."""
        ...


OVERSIZED_HEAD_BYTES = 16
"""How much of an oversized frame's payload ``on_oversized`` is given (at most)."""

_HEAD_BYTES = 64 * 1024
_LEN16 = struct.Struct("!H")
_LEN64 = struct.Struct("!Q")
_CLOSE_CODE = struct.Struct("!H")
_OP_CONTINUATION, _OP_TEXT, _OP_BINARY = 0x0, 0x1, 0x2
_OP_CLOSE, _OP_PING, _OP_PONG = 0x8, 0x9, 0xA
_FIN = 0x80
_RSV = 0x70


class FrameReceiver(asyncio.BufferedProtocol):
    """The protocol of one stream connection after the upgrade (see the module doc).

    ``on_frame`` gets each binary frame's payload: ``bytes`` for a frame that fit
    in the shared buffer, else a read-only ``memoryview`` of a buffer nothing else
    holds. ``done`` resolves when the connection is lost. ``inner`` (aiohttp's
    request handler) keeps getting the transport's flow-control and
    connection-lost callbacks, so the ``WebSocketResponse`` still writes.

    With a ``budget``, every delivered frame's ``len(payload)`` bytes are charged
    to it, and the owner must release them (once answered); bytes of a frame not
    delivered (the connection lost in its middle) are released here.
    ``last_active`` is the monotonic time bytes last arrived. ``sized_by_header``:
    the other end is a node this side called, whose announced frame sizes are
    allocated at once (see the module doc); never on a node's side of a stream.
    """

    def __init__(
        self,
        transport: asyncio.Transport,
        inner: asyncio.BaseProtocol,
        on_frame: Callable[[bytes | memoryview], None],
        max_frame_bytes: int,
        on_oversized: Callable[[bytes, int], None] | None = None,
        budget: RequestBudget | None = None,
        sized_by_header: bool = False,
    ) -> None:
        self._transport = transport
        self._sized_by_header = sized_by_header
        self._budget = budget
        self._paused: set[str] = set()  # why reading is paused (empty: it is not)
        self.last_active = time.monotonic()
        self._inner = inner
        self._on_frame = on_frame
        self._max = max_frame_bytes
        self._on_oversized = on_oversized
        self._skip = 0  # bytes of an oversized frame still to drop as they arrive
        self._head = bytearray(_HEAD_BYTES)
        self._start = 0  # the unparsed bytes are _head[_start:_end]
        self._end = 0
        # A large frame being filled: its array (grown as bytes arrive), bytes filled,
        # its declared size, mask (None: unmasked).
        self._frame: numpy.ndarray | None = None
        self._filled = 0
        self._size = 0
        self._mask: bytes | None = None
        self._closing = False
        #: why the stream ended, once it has ('' before)
        self.reason = ""
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    # -- asyncio.BufferedProtocol

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return self._frame.data[self._filled :]  # .data: the array's memoryview
        if self._start:
            # Keep the unparsed tail (part of a header) at the front of the buffer.
            tail = self._end - self._start
            self._head[:tail] = self._head[self._start : self._end]
            self._start, self._end = 0, tail
        return memoryview(self._head)[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        frame = self._frame
        if frame is not None:
            self._filled += nbytes
            self._charge(nbytes)
            if self._filled == self._size:
                mask, self._frame, self._filled = self._mask, None, 0
                if mask is not None:
                    _unmask_array(frame, mask)
                self._hand(self._on_frame, frame.data.toreadonly())
            elif self._filled == len(frame):
                # Full but the frame is not: grow it, by what arrived, not what was
                # declared (one copy of what is here; the next growth is 4x larger).
                grown = numpy.empty(min(self._size, len(frame) * FRAME_GROWTH), numpy.uint8)
                grown[: self._filled] = frame
                self._frame = grown
            return
        self._end += nbytes
        self._parse()

    def eof_received(self) -> bool | None:
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        if self._frame is not None:
            self._release_partial()
        if not self.reason:
            self.reason = f"connection lost: {exc}" if exc else "the connection closed"
        self._inner.connection_lost(exc)
        if not self.done.done():
            self.done.set_result(None)

    def pause_writing(self) -> None:
        self._inner.pause_writing()
        # answers pile up unread: read no more requests until they drain
        self.pause(PAUSED_WRITES)

    def resume_writing(self) -> None:
        self._inner.resume_writing()
        self.resume(PAUSED_WRITES)

    # -- flow control

    def pause(self, reason: str) -> None:
        """Stop reading from the socket (TCP pushes back on the sender) until every
        reason given here is resumed."""
        if not self._paused and not self._closing:
            self._transport.pause_reading()
        self._paused.add(reason)

    def resume(self, reason: str) -> None:
        """Take back one reason to pause; reading resumes once none is left."""
        if reason not in self._paused:
            return
        self._paused.discard(reason)
        if not self._paused and not self._closing and not self._transport.is_closing():
            self._transport.resume_reading()

    @property
    def paused(self) -> frozenset[str]:
        """Why reading is paused now (empty: it is not)."""
        return frozenset(self._paused)

    def _charge(self, nbytes: int) -> None:
        if self._budget is not None:
            self._budget.charge(nbytes)

    def _over_budget(self) -> bool:
        """Whether a frame may not begin now (the budget is exhausted); if so, reading
        is paused until the budget has room, then what the shared buffer holds is
        parsed."""
        budget = self._budget
        if budget is None or not budget.exhausted:
            return False
        if PAUSED_BUDGET not in self._paused:
            self.pause(PAUSED_BUDGET)
            budget.wake_when_free(self._budget_freed)
        return True

    def _budget_freed(self) -> None:
        self.resume(PAUSED_BUDGET)
        if self._frame is None and not self._closing:
            self._parse()  # the frames already read and held back

    def _release_partial(self) -> None:
        """Give back what a frame never delivered was charged, and drop its array."""
        if self._budget is not None and self._filled:
            self._budget.release(self._filled)
        self._frame = None
        self._filled = 0

    # -- frames

    def _parse(self) -> None:
        """Take every whole frame out of the shared buffer; a large frame's start moves
        to a buffer of its own, which the socket fills from then on."""
        head = self._head
        while not self._closing:
            avail = self._end - self._start
            if self._skip:
                dropped = min(self._skip, avail)
                self._start += dropped
                self._skip -= dropped
                avail -= dropped
            if avail < 2 or self._over_budget():
                break
            pos = self._start
            first, second = head[pos], head[pos + 1]
            size = second & 0x7F
            header = 2
            if size == 126:
                header = 4
                if avail < header:
                    break
                (size,) = _LEN16.unpack_from(head, pos + 2)
            elif size == 127:
                header = 10
                if avail < header:
                    break
                (size,) = _LEN64.unpack_from(head, pos + 2)
            mask: bytes | None = None
            if second & 0x80:
                if avail < header + 4:
                    break
                mask = bytes(head[pos + header : pos + header + 4])
                header += 4
            body = pos + header
            oversized = self._max and size > self._max
            if oversized and self._on_oversized is not None and first & 0x0F == _OP_BINARY:
                if not self._acceptable(first, 0):  # compressed, fragmented
                    return
                head_bytes = min(size, OVERSIZED_HEAD_BYTES)
                if avail - header < head_bytes:
                    break  # its head is not all here yet (the buffer holds far more)
                self._start = body
                self._skip = size
                self._hand(
                    self._on_oversized, _unmasked(head[body : body + head_bytes], mask), size
                )
                continue
            if not self._acceptable(first, size):
                return
            if avail - header >= size:
                self._start = body + size
                self._dispatch(first & 0x0F, _unmasked(head[body : body + size], mask))
                continue
            if header + size <= _HEAD_BYTES:
                break  # it fits in the shared buffer: wait for the rest (control frames too)
            # A frame larger than the shared buffer (a binary one: control frames are
            # short): an array of its own, which the socket fills from here on, sized
            # by what arrived (see the module doc), never by the declared size. Not
            # zeroed first (numpy.empty): bytearray(size) zero-filled every frame, 7 %
            # of a follower's CPU under the sink's load. A masked frame is unmasked in
            # place once whole.
            have = avail - header
            first = max(FIRST_FRAME_BYTES, have)
            if self._sized_by_header and size <= SIZED_BY_HEADER_MAX:
                first = size  # an answer to this side's request: allocated once
            frame = numpy.empty(min(size, first), numpy.uint8)
            frame[:have] = numpy.frombuffer(head, numpy.uint8, have, body)
            self._frame, self._filled, self._size, self._mask = frame, have, size, mask
            self._start = self._end = 0
            self._charge(have)
            return
        if self._start == self._end:
            self._start = self._end = 0

    def _acceptable(self, first: int, size: int) -> bool:
        """Whether a frame with this first header byte and payload size is one a raftlog
        stream sends; if not, the stream is closed with the code that says why."""
        opcode = first & 0x0F
        if first & _RSV:
            return self._refuse(WSCloseCode.PROTOCOL_ERROR, "compressed frames are not accepted")
        if not first & _FIN or opcode == _OP_CONTINUATION:
            return self._refuse(WSCloseCode.PROTOCOL_ERROR, "fragmented frames are not accepted")
        if opcode == _OP_TEXT:
            return self._refuse(WSCloseCode.UNSUPPORTED_DATA, "stream frames are binary, got TEXT")
        if opcode not in (_OP_BINARY, _OP_CLOSE, _OP_PING, _OP_PONG):
            return self._refuse(WSCloseCode.PROTOCOL_ERROR, f"unknown opcode {opcode}")
        if opcode != _OP_BINARY and size > 125:
            return self._refuse(WSCloseCode.PROTOCOL_ERROR, "control frame longer than 125 bytes")
        if self._max and size > self._max:
            return self._refuse(
                WSCloseCode.MESSAGE_TOO_BIG,
                f"frame of {size} bytes exceeds the limit of {self._max} bytes",
            )
        return True

    def _dispatch(self, opcode: int, payload: bytes) -> None:
        if opcode == _OP_BINARY:
            self._deliver(payload)
        elif opcode == _OP_PING:
            self._send_control(_OP_PONG, payload)
        elif opcode == _OP_CLOSE:
            if not self.reason:
                code = _CLOSE_CODE.unpack_from(payload)[0] if len(payload) >= 2 else None
                said = bytes(payload[2:]).decode(errors="replace")
                self.reason = f"the other end closed it (code {code}{': ' + said if said else ''})"
            self.close(WSCloseCode.OK, b"")
        # a pong needs nothing

    def _deliver(self, payload: bytes) -> None:
        self._charge(len(payload))
        self._hand(self._on_frame, payload)

    def _hand(self, callback: Callable[..., None], *args: Any) -> None:
        """``callback(*args)``, the owner's: ``on_frame`` or ``on_oversized``."""
        try:
            callback(*args)
        except Exception as exc:  # a handler's bug must not leave the stream half-read
            self._refuse(WSCloseCode.INTERNAL_ERROR, f"{type(exc).__name__}: {exc}")

    def _refuse(self, code: int, reason: str) -> bool:
        self.close(code, reason.encode()[:123])
        return False

    def _send_control(self, opcode: int, payload: bytes) -> None:
        if not self._transport.is_closing():
            self._transport.write(bytes((_FIN | opcode, len(payload))) + payload)

    def close(self, code: int, message: bytes) -> None:
        """Send a close frame with ``code`` and ``message`` (at most 123 bytes), then close
        the connection; reading stops here."""
        if self._closing:
            return
        self._closing = True
        if not self.reason:
            self.reason = f"closed here (code {code}: {message.decode(errors='replace')})"
        if self._frame is not None:
            self._release_partial()
        self._send_control(_OP_CLOSE, _CLOSE_CODE.pack(code) + message)
        self._transport.close()


def _unmask_array(frame: numpy.ndarray, mask: bytes) -> None:
    """Unmask ``frame`` in place (RFC 6455: byte i XOR mask[i % 4]), four bytes at a
    time: a native uint32 view of the mask lines up with a uint32 view of the bytes."""
    words = len(frame) // 4
    if words:
        frame[: words * 4].view(numpy.uint32)[...] ^= numpy.frombuffer(mask, numpy.uint32)[0]
    for i in range(len(frame) - words * 4):
        frame[words * 4 + i] ^= mask[i]


def _unmasked(data: bytearray, mask: bytes | None) -> bytes:
    if mask is not None:
        websocket_mask(mask, data)
    return bytes(data)


def take_over(
    transport: Any,
    inner: Any,
    on_frame: Callable[[bytes | memoryview], None],
    max_frame_bytes: int,
    on_oversized: Callable[[bytes, int], None] | None = None,
    budget: RequestBudget | None = None,
    sized_by_header: bool = False,
) -> FrameReceiver | None:
    """Read an upgraded stream with a :class:`FrameReceiver` from now on; None where it
    cannot (a TLS connection, whose transport decrypts into its own buffers: aiohttp's
    reader stays).

    ``transport`` and ``inner`` are the connection's and aiohttp's protocol on it:
    a server's request's (its ``WebSocketResponse`` prepared, no await since), or a
    client WebSocket writer's (right after the handshake, before any request: the
    other end sends nothing before it, so aiohttp's reader holds nothing yet).
    ``sized_by_header``: only on the side that opened the stream (see FrameReceiver).
    """
    if transport is None or transport.is_closing() or transport.get_extra_info("sslcontext"):
        return None
    receiver = FrameReceiver(
        transport, inner, on_frame, max_frame_bytes, on_oversized, budget, sized_by_header
    )
    transport.set_protocol(receiver)
    return receiver
