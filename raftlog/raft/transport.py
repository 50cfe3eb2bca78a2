"""The transport interface the stages send through.

``Transport.send(target_node, message)`` delivers one request to a peer node
and returns its reply; it raises :class:`~raftlog.raft.errors.TransportError`
when the peer cannot be reached or does not answer in time. The real aiohttp
transport lives in :mod:`raftlog.rpc`; in-process ones for tests and the
simulator live in :mod:`raftlog.sim` (``local_network``, ``network``), outside
runtime code.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

Handler = Callable[[object], Awaitable[object]]
"""What a node registers to receive requests: the reply to one request."""


class Transport(Protocol):
    async def send(self, target_node: int, message: object) -> object:
        """Deliver ``message`` to ``target_node``; its reply, or raise TransportError."""
        ...

    def send_now(self, target_node: int, message: object) -> Awaitable[object] | None:
        """:meth:`send` with ``message`` on its way in this call (the leader's appends:
        they leave before its own disk write, not a loop turn later); awaiting the
        result gives the reply or raises TransportError. None when it cannot go now:
        then call :meth:`send`. A transport without such a path always returns None."""
        ...
