"""An HTTP request body given as buffers (:func:`raftlog.rpc.codec.encode_parts`).

A produce of a few MiB was joined into one ``bytes`` before its POST (the
client's ``codec.encode``), and aiohttp then joined that with the request's
headers (on Python < 3.12.9 it writes header and body as one buffer): two
copies of every payload in the Spark worker, on the sink's path. As a
:class:`PartsPayload` each buffer goes to the transport as it is: the headers
with the first (small) buffer, then every other buffer by itself.

Contract: the body on the wire is exactly ``b"".join(parts)``, with that length
declared as ``Content-Length``; the buffers are not copied and must not change
until the request has been sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiohttp import payload
from aiohttp.abc import AbstractStreamWriter

Buffer = bytes | memoryview


class PartsPayload(payload.Payload):
    """The body ``b"".join(parts)``, written buffer by buffer."""

    _size: int  # aiohttp's Payload allows None (a size not known); this one is always known

    def __init__(self, parts: Sequence[Buffer], **kwargs: Any) -> None:
        super().__init__(parts, **kwargs)
        self._parts = list(parts)
        self._size = sum(len(p) for p in self._parts)

    @property
    def size(self) -> int:
        return self._size

    def decode(self, encoding: str = "utf-8", errors: str = "strict") -> str:
        return b"".join(self._parts).decode(encoding, errors)

    async def as_bytes(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return b"".join(self._parts)

    async def write(self, writer: AbstractStreamWriter) -> None:
        for part in self._parts:
            await writer.write(part)

    async def write_with_length(
        self, writer: AbstractStreamWriter, content_length: int | None
    ) -> None:
        """The first ``content_length`` bytes (all when None), as aiohttp's own payloads
        do when a request declares a shorter length than its body."""
        left = self._size if content_length is None else content_length
        for part in self._parts:
            if left <= 0:
                return
            await writer.write(part if len(part) <= left else part[:left])
            left -= len(part)
