"""Nodes in one process connected by direct calls (unit tests), with two-way cuts.

Not runtime code: production nodes talk through :mod:`raftlog.rpc`, and the
seeded simulator through :mod:`raftlog.sim.network` (delays, loss, duplication,
one-way partitions). This one delivers at once, in order, on the caller's task.
"""

from __future__ import annotations

from raftlog.raft.errors import TransportError
from raftlog.raft.transport import Handler


class LocalNetwork:
    """Nodes in one process; ``cut(a, b)`` drops traffic between two nodes both ways."""

    def __init__(self) -> None:
        self._handlers: dict[int, Handler] = {}
        self._cut: set[frozenset[int]] = set()

    def register(self, node: int, handler: Handler) -> None:
        self._handlers[node] = handler

    def unregister(self, node: int) -> None:
        self._handlers.pop(node, None)

    def cut(self, a: int, b: int) -> None:
        self._cut.add(frozenset((a, b)))

    def isolate(self, node: int) -> None:
        for other in self._handlers:
            if other != node:
                self.cut(node, other)

    def heal(self) -> None:
        self._cut.clear()

    def reachable(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self._cut and b in self._handlers

    def transport(self, node: int) -> LocalTransport:
        return LocalTransport(self, node)

    async def deliver(self, source: int, target: int, message: object) -> object:
        if not self.reachable(source, target):
            raise TransportError(f"node {target} unreachable from node {source}")
        reply = await self._handlers[target](message)
        if not self.reachable(source, target):
            raise TransportError(f"reply from node {target} lost (partitioned)")
        return reply


class LocalTransport:
    def __init__(self, network: LocalNetwork, node: int) -> None:
        self._network = network
        self.node = node

    def send_now(self, target_node: int, message: object) -> None:
        """No synchronous path in the model: every send is delivered as :meth:`send` is."""
        return None

    async def send(self, target_node: int, message: object) -> object:
        return await self._network.deliver(self.node, target_node, message)
