"""A simulated network: per-message delay (hence reordering), drops and partitions.

Every request is delivered after a random delay drawn from the seeded RNG and
handled *in the target node's context* (the handler runs as a task the target
owns, so crashing the target cancels it). A dropped request or reply, a cut
link or a down node looks like a timeout to the sender: it waits
``rpc_timeout_s`` and gets :class:`TransportError`, as with a real RPC.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable
from typing import Any

from raftlog.raft.errors import TransportError


@dataclasses.dataclass(slots=True)
class NetworkOptions:
    min_delay_s: float = 0.0005
    max_delay_s: float = 0.003
    drop_rate: float = 0.0
    rpc_timeout_s: float = 0.3


class Endpoint:
    """What the network needs from a node: a handler and a way to run tasks it owns."""

    def __init__(
        self,
        handler: Callable[[object], Awaitable[object]],
        spawn: Callable[[Any], asyncio.Task[Any]],
    ) -> None:
        self.handler = handler
        self.spawn = spawn


class SimNetwork:
    def __init__(self, rng: random.Random, options: NetworkOptions | None = None) -> None:
        self.rng = rng
        self.options = options or NetworkOptions()
        self._endpoints: dict[int, Endpoint] = {}
        self._cut: set[frozenset[int]] = set()
        self.delivered = 0
        self.dropped = 0

    def attach(self, node: int, endpoint: Endpoint) -> None:
        self._endpoints[node] = endpoint

    def detach(self, node: int) -> None:
        self._endpoints.pop(node, None)

    def cut(self, a: int, b: int) -> None:
        self._cut.add(frozenset((a, b)))

    def partition(self, side: set[int], nodes: list[int]) -> None:
        """Cut every link between ``side`` and the other ``nodes``."""
        for a in side:
            for b in nodes:
                if b not in side:
                    self.cut(a, b)

    def heal(self) -> None:
        self._cut.clear()

    def connected(self, a: int, b: int) -> bool:
        return frozenset((a, b)) not in self._cut

    def transport(self, node: int) -> SimTransport:
        return SimTransport(self, node)

    def _delay(self) -> float:
        o = self.options
        return o.min_delay_s + self.rng.random() * (o.max_delay_s - o.min_delay_s)

    def _lost(self, source: int, target: int) -> bool:
        if not self.connected(source, target) or target not in self._endpoints:
            return True
        return self.options.drop_rate > 0 and self.rng.random() < self.options.drop_rate

    async def _timeout(self, what: str) -> TransportError:
        self.dropped += 1
        await asyncio.sleep(self.options.rpc_timeout_s)
        return TransportError(what)

    async def send(self, source: int, target: int, message: object) -> object:
        await asyncio.sleep(self._delay())
        if self._lost(source, target):
            raise await self._timeout(f"request {type(message).__name__} {source}->{target} lost")
        endpoint = self._endpoints[target]
        task = endpoint.spawn(endpoint.handler(message))
        task.add_done_callback(_retrieve)
        try:
            reply = await asyncio.wait_for(asyncio.shield(task), self.options.rpc_timeout_s)
        except asyncio.CancelledError:
            if task.cancelled() and not _current_task_cancelling():
                raise TransportError(f"node {target} crashed while handling a request") from None
            raise
        except TimeoutError:
            raise TransportError(f"node {target} did not answer in time") from None
        except Exception as exc:  # the handler refused (e.g. group stopped)
            raise TransportError(f"node {target}: {exc}") from exc
        await asyncio.sleep(self._delay())
        if self._lost(target, source):
            raise await self._timeout(f"reply {type(reply).__name__} {target}->{source} lost")
        self.delivered += 1
        return reply


def _retrieve(task: asyncio.Task[Any]) -> None:
    # The sender may have timed out; its error is reported to the sender, not logged.
    if not task.cancelled():
        task.exception()


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class SimTransport:
    def __init__(self, network: SimNetwork, node: int) -> None:
        self._network = network
        self.node = node

    async def send(self, target_node: int, message: object) -> object:
        return await self._network.send(self.node, target_node, message)
