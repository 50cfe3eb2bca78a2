"""Requests from outside a simulated cluster (a client, a driver) through its lossy network.

:class:`Caller` runs ``fn(node)`` on the node it believes leads (now and then,
as with stale metadata, any live node), after a network delay drawn from the
cluster's network, as a task of that node (a crash cancels it). A lost request
or reply, a crash and a timeout all look the same to the caller: the outcome is
unknown (:class:`Lost`). Every draw comes from the caller's own seeded RNG, so
a run replays exactly.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from raftlog.errors import RaftlogError
from raftlog.raft.errors import RaftError
from raftlog.sim.checks import InvariantViolation
from raftlog.sim.cluster import SimCluster
from raftlog.sim.loop import retrieve

T = TypeVar("T")

MAX_ATTEMPTS = 1000
"""``retrying`` gives up (an invariant: no progress) after this many attempts."""


class Lost(Exception):
    """A request or its reply was lost, its node crashed, or it timed out: outcome unknown."""


class Caller:
    def __init__(self, rng: random.Random, request_timeout_s: float) -> None:
        self.rng = rng
        self.request_timeout_s = request_timeout_s
        self.failures = 0  # attempts of ``retrying`` that failed retriably

    async def call(self, cluster: SimCluster, fn: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``fn(node)`` on the node believed to lead; raises Lost or what ``fn`` raises."""
        net = cluster.network
        node = cluster.leader()
        if node is None or self.rng.random() < 0.1:  # stale metadata: any live node
            live = cluster.live()
            node = self.rng.choice(live) if live else None
        if node is None:
            await asyncio.sleep(0.05)
            raise Lost("no live node")
        await asyncio.sleep(net.delay())
        if not node.alive or (net.options.drop_rate and self.rng.random() < net.options.drop_rate):
            await asyncio.sleep(self.request_timeout_s)
            raise Lost(f"request to node {node.node_id} lost")
        task = node.spawn(fn(node))
        task.add_done_callback(retrieve)
        try:
            result = await asyncio.wait_for(asyncio.shield(task), self.request_timeout_s)
        except TimeoutError:
            raise Lost(f"node {node.node_id} did not answer in time") from None
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if task.cancelled() and (me is None or me.cancelling() == 0):
                raise Lost(f"node {node.node_id} crashed while handling the request") from None
            raise
        await asyncio.sleep(net.delay())
        if net.options.drop_rate and self.rng.random() < net.options.drop_rate:
            raise Lost(f"reply from node {node.node_id} lost")
        return result

    async def retrying(
        self, cluster: SimCluster, fn: Callable[[Any], Awaitable[T]], what: str
    ) -> T:
        """``call`` until it succeeds or raises a non-retriable error (bounded, as a
        client's request timeout bounds its retries)."""
        for _ in range(MAX_ATTEMPTS):
            try:
                return await self.call(cluster, fn)
            except RaftlogError as exc:
                if not exc.retriable:
                    raise
            except (Lost, RaftError, TimeoutError):
                pass
            self.failures += 1
            await asyncio.sleep(self.rng.uniform(0.01, 0.05))
        raise InvariantViolation(f"{what}: no success after {MAX_ATTEMPTS} attempts")
