"""A simulated network: delays (hence reordering), loss, duplication, late replies, cuts.

Every request is delivered after a random delay drawn from the seeded RNG and
handled *in the target node's context* (the handler runs as a task the target
owns, so crashing the target cancels it). A dropped request or reply, a cut
link or a down node looks like a timeout to the sender: it waits
``rpc_timeout_s`` and gets :class:`TransportError`, as with a real RPC.

Faults (all drawn from the seeded RNG, so a run replays exactly):

- loss (``drop_rate``) of a request or of its reply;
- duplication (``duplicate_rate``): the request is delivered a second time
  later; the sender gets the reply of one copy or the other, so a reply may
  describe an older or newer state than one the sender already applied;
- late replies (``late_reply_rate``): a reply is held back up to
  ``late_reply_max_s`` (below the RPC timeout), so it arrives after replies to
  newer requests: stale replies delivered late;
- partitions: two-way (:meth:`cut`, :meth:`partition`) and one-way
  (:meth:`cut_one_way`: ``a`` can no longer reach ``b``, while ``b`` still
  reaches ``a``), healed by :meth:`heal`;
- held requests (:meth:`hold`): the requests a predicate picks wait, until
  :meth:`release`, behind everything else the network carries (reordering by
  kind, as a congested link would; one held past the RPC timeout is lost).

A handler that raises a :class:`~raftlog.raft.errors.RaftError` refused the
request (a stopped group): the sender sees a TransportError. Any other
exception, :class:`~raftlog.raft.core.SafetyViolation` included, is a bug: it
is kept in :attr:`SimNetwork.failure` (the simulator fails the seed on it,
with its traceback) and the sender sees a TransportError meanwhile.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
from collections.abc import Awaitable, Callable
from typing import Any

from raftlog.raft.errors import RaftError, TransportError


@dataclasses.dataclass(slots=True)
class NetworkOptions:
    min_delay_s: float = 0.0005
    max_delay_s: float = 0.003
    drop_rate: float = 0.0
    rpc_timeout_s: float = 0.3
    duplicate_rate: float = 0.0
    late_reply_rate: float = 0.0
    late_reply_max_s: float = 0.05


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
        self._one_way: set[tuple[int, int]] = set()  # (source, target) pairs that are cut
        self.delivered = 0
        self.dropped = 0
        self.duplicated = 0
        self.late_replies = 0
        # The first exception a handler raised that is not a refusal (a bug).
        self.failure: BaseException | None = None
        # The requests held back now (hold), and the event their release sets.
        self._held: Callable[[object], bool] | None = None
        self._released: asyncio.Event | None = None
        # Per message type: requests and replies lost, requests delivered twice.
        self.lost_by_type: collections.Counter[str] = collections.Counter()
        self.duplicated_by_type: collections.Counter[str] = collections.Counter()

    def attach(self, node: int, endpoint: Endpoint) -> None:
        self._endpoints[node] = endpoint

    def detach(self, node: int) -> None:
        self._endpoints.pop(node, None)

    def cut(self, a: int, b: int) -> None:
        self._cut.add(frozenset((a, b)))

    def cut_one_way(self, source: int, target: int) -> None:
        """``source`` can no longer reach ``target`` (requests and replies that way)."""
        self._one_way.add((source, target))

    def partition(self, side: set[int], nodes: list[int]) -> None:
        """Cut every link between ``side`` and the other ``nodes``."""
        for a in side:
            for b in nodes:
                if b not in side:
                    self.cut(a, b)

    def heal(self) -> None:
        self._cut.clear()
        self._one_way.clear()

    def hold(self, which: Callable[[object], bool]) -> None:
        """Hold back every request ``which`` picks (those reaching the network from now
        on), until :meth:`release` delivers them all at once; a new hold releases the last."""
        self.release()
        self._held = which
        self._released = asyncio.Event()

    def release(self) -> None:
        """Deliver the held requests (those whose senders have not timed out yet)."""
        if self._released is not None:
            self._released.set()
        self._held = None
        self._released = None

    async def _wait_if_held(self, message: object) -> bool:
        """Wait while ``message`` is held; False when the sender's RPC timeout came first."""
        released = self._released
        if released is None or self._held is None or not self._held(message):
            return True
        try:
            await asyncio.wait_for(released.wait(), self.options.rpc_timeout_s)
        except TimeoutError:
            return False
        return True

    def connected(self, a: int, b: int) -> bool:
        """True when ``a`` can send to ``b`` (two-way and one-way cuts both count)."""
        return frozenset((a, b)) not in self._cut and (a, b) not in self._one_way

    def transport(self, node: int) -> SimTransport:
        return SimTransport(self, node)

    def delay(self) -> float:
        """One message's delay (seconds), drawn from the seeded rng between the options'
        ``min_delay_s`` and ``max_delay_s``."""
        o = self.options
        return o.min_delay_s + self.rng.random() * (o.max_delay_s - o.min_delay_s)

    def _chance(self, rate: float) -> bool:
        return rate > 0 and self.rng.random() < rate

    def _lost(self, source: int, target: int) -> bool:
        if not self.connected(source, target) or target not in self._endpoints:
            return True
        return self._chance(self.options.drop_rate)

    async def _timeout(self, what: str, message: object) -> TransportError:
        self.dropped += 1
        self.lost_by_type[type(message).__name__] += 1
        await asyncio.sleep(self.options.rpc_timeout_s)
        return TransportError(what)

    def _handle(self, endpoint: Endpoint, message: object) -> asyncio.Task[Any]:
        task = endpoint.spawn(endpoint.handler(message))
        task.add_done_callback(self._retrieve)
        return task

    def _retrieve(self, task: asyncio.Task[Any]) -> None:
        # The sender may have timed out; a refusal is its business, a bug is the run's.
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and not isinstance(exc, RaftError) and self.failure is None:
            self.failure = exc

    async def _duplicate(self, target: int, message: object) -> object:
        """Deliver ``message`` again after a while; its reply (or None when it is lost)."""
        await asyncio.sleep(self.delay() + self.rng.random() * self.options.late_reply_max_s)
        endpoint = self._endpoints.get(target)
        if endpoint is None:
            return None
        self.duplicated += 1
        self.duplicated_by_type[type(message).__name__] += 1
        task = self._handle(endpoint, message)
        try:
            return await asyncio.wait_for(asyncio.shield(task), self.options.rpc_timeout_s)
        except Exception:
            return None

    async def send(self, source: int, target: int, message: object) -> object:
        await asyncio.sleep(self.delay())
        if not await self._wait_if_held(message):
            self.dropped += 1
            self.lost_by_type[type(message).__name__] += 1
            raise TransportError(f"request {type(message).__name__} {source}->{target} held")
        if self._lost(source, target):
            raise await self._timeout(
                f"request {type(message).__name__} {source}->{target} lost", message
            )
        endpoint = self._endpoints[target]
        task = self._handle(endpoint, message)
        duplicate = None
        if self._chance(self.options.duplicate_rate):
            duplicate = endpoint.spawn(self._duplicate(target, message))
        try:
            reply = await asyncio.wait_for(asyncio.shield(task), self.options.rpc_timeout_s)
        except asyncio.CancelledError:
            if task.cancelled() and not _current_task_cancelling():
                raise TransportError(f"node {target} crashed while handling a request") from None
            raise
        except TimeoutError:
            raise TransportError(f"node {target} did not answer in time") from None
        except Exception as exc:  # a refusal (group stopped), or a bug kept in self.failure
            raise TransportError(f"node {target}: {exc!r}") from exc
        if duplicate is not None and self.rng.random() < 0.5:
            # The sender gets the duplicate's reply instead: newer or older state.
            try:
                later = await duplicate
            except asyncio.CancelledError:
                if not _current_task_cancelling():
                    raise TransportError(f"node {target} crashed") from None
                raise
            if later is not None:
                reply = later
        await asyncio.sleep(self.delay())
        if self._chance(self.options.late_reply_rate):
            self.late_replies += 1
            await asyncio.sleep(self.rng.random() * self.options.late_reply_max_s)
        if self._lost(target, source):
            raise await self._timeout(
                f"reply {type(reply).__name__} {target}->{source} lost", reply
            )
        self.delivered += 1
        return reply


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


class SimTransport:
    def __init__(self, network: SimNetwork, node: int) -> None:
        self._network = network
        self.node = node

    def send_now(self, target_node: int, message: object) -> None:
        """No synchronous path in the model: every send is delivered as :meth:`send` is."""
        return None

    async def send(self, target_node: int, message: object) -> object:
        return await self._network.send(self.node, target_node, message)
