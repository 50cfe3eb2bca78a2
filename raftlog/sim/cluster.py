"""A simulated cluster hosting one Raft group on 3 or 5 nodes (or any n).

Used by the scenario tests (no random faults) and by the seeded simulator
(random faults). Everything runs on the caller's event loop; use it on a
:class:`~raftlog.sim.loop.VirtualTimeLoop` so time is virtual and runs replay.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from tenacity import (
    AsyncRetrying,
    RetryError,
    retry_if_exception_type,
    stop_after_attempt,
    wait_fixed,
)

from raftlog.raft.configuration import Configuration
from raftlog.raft.consensus import ConsensusOptions
from raftlog.raft.errors import RaftError
from raftlog.sim.network import NetworkOptions, SimNetwork
from raftlog.sim.node import SimNode
from raftlog.storage.batch import RecordBatch


def sim_options() -> ConsensusOptions:
    """Production defaults, but flushes inline so the run stays deterministic."""
    return ConsensusOptions(flush_in_executor=False)


class SimCluster:
    def __init__(
        self,
        n: int,
        seed: int = 0,
        options: ConsensusOptions | None = None,
        network: NetworkOptions | None = None,
        heartbeat_interval_s: float = 0.1,
        priorities: dict[int, int] | None = None,
        voters: list[int] | None = None,
    ) -> None:
        self.rng = random.Random(seed)
        self.network = SimNetwork(random.Random(seed * 31 + 1), network)
        self.options = options or sim_options()
        ids = list(range(1, n + 1))
        config = Configuration.of(voters if voters is not None else ids, (), priorities)
        self.nodes = {
            i: SimNode(i, self.network, config, self.options, heartbeat_interval_s, seed)
            for i in ids
        }

    @property
    def ids(self) -> list[int]:
        return sorted(self.nodes)

    def rebuild_nodes(self, make: Callable[..., SimNode], **kw: Any) -> None:
        """Replace every node (before ``start``) by ``make(node_id, network, configuration,
        options, heartbeat_interval_s, seed, **kw)``: a SimNode subclass with its own
        state machines (the producer and coordinator models)."""
        some = next(iter(self.nodes.values()))
        self.nodes = {
            i: make(
                i,
                self.network,
                some.configuration,
                self.options,
                some.heartbeat_interval_s,
                some.seed,
                **kw,
            )
            for i in self.nodes
        }

    def add_node(self, node_id: int, voters: list[int]) -> SimNode:
        """A node not yet in the group; it learns the configuration from the log."""
        some = next(iter(self.nodes.values()))
        node = SimNode(
            node_id,
            self.network,
            Configuration.of(voters),
            self.options,
            some.heartbeat_interval_s,
            some.seed,
        )
        self.nodes[node_id] = node
        return node

    async def start(self) -> None:
        for node in self.nodes.values():
            await node.start()

    async def stop(self) -> None:
        for node in self.nodes.values():
            await node.stop()

    def live(self) -> Sequence[SimNode]:
        return [n for n in self.nodes.values() if n.alive]

    def leaders(self) -> list[SimNode]:
        return [n for n in self.nodes.values() if n.alive and n.consensus.is_leader]

    def leader(self) -> SimNode | None:
        """The live leader with the highest term, if any."""
        leaders = self.leaders()
        return max(leaders, key=lambda n: n.consensus.term) if leaders else None

    async def wait_for_leader(self, timeout_s: float = 10.0, exclude: int = -1) -> SimNode:
        """The first live leader (other than ``exclude``) whose noop has committed."""
        step = self.options.tick_interval_s
        for _ in range(int(timeout_s / step) + 1):
            node = self.leader()
            if (
                node is not None
                and node.node_id != exclude
                and node.consensus.core.term_at(node.consensus.commit_index) == node.consensus.term
            ):
                return node
            await asyncio.sleep(step)
        raise TimeoutError(f"no leader within {timeout_s} virtual seconds")

    async def write(self, payload: bytes, attempts: int = 20) -> None:
        """Replicate one batch of ``payload`` through the leader and wait for its commit;
        a leader change under it is retried (at most ``attempts`` times, 0.2 s apart)."""
        retrying = AsyncRetrying(
            stop=stop_after_attempt(attempts),
            wait=wait_fixed(0.2),
            retry=retry_if_exception_type((RaftError, TimeoutError)),
        )
        try:
            async for attempt in retrying:
                leader = await self.wait_for_leader(timeout_s=10.0)
                with attempt:
                    stages = leader.consensus.replicate([RecordBatch.create(payload, 1)])
                    await asyncio.wait_for(stages.finished, 2.0)
        except RetryError as exc:
            raise AssertionError(f"the write of {payload!r} never committed") from exc

    async def settle(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def random_fault(
        self,
        rng: random.Random,
        background: list[asyncio.Task[None]],
        *,
        keep_majority: bool = False,
        reconfigure: Callable[[random.Random], None] | None = None,
        clock_pauses: bool = False,
    ) -> str:
        """One fault drawn from ``rng``: crash a node (tearing its unflushed tail), restart a
        crashed one, partition (two-way, or one-way 1 time in 3), heal, transfer leadership
        (a task added to ``background``), make the leader step down, or (with
        ``reconfigure``, 1 time in 20) ``reconfigure(rng)``. Returns what it did (the trace).

        ``keep_majority``: crash a node only when a majority stays up, or 1 time in 5.
        ``clock_pauses``: 1 heal in 3 becomes a clock pause instead: a node's clock stops
        for up to a second, then jumps (a task added to ``background``).
        """
        ids = self.ids
        action = rng.random()
        node = self.nodes[rng.choice(ids)]
        if action < 0.3:
            # mostly keep a majority up, so that clients get work done
            if not keep_majority or len(self.live()) - 1 > len(ids) // 2 or rng.random() < 0.2:
                keep = rng.choice([0, 0, 1, 2])
                node.crash(keep_unflushed=keep)
                return f"crash {node.node_id} keeping {keep} unflushed batches"
        elif action < 0.5:
            down = [n for n in self.nodes.values() if not n.alive]
            if down:
                back = rng.choice(down)
                await back.restart()
                return f"restart {back.node_id}"
        elif action < 0.65:
            if rng.random() < 1 / 3:
                a, b = rng.sample(ids, 2)
                self.network.cut_one_way(a, b)
                return f"cut {a}->{b} one way"
            side = set(rng.sample(ids, rng.randint(1, len(ids) // 2)))
            self.network.partition(side, ids)
            return f"partition {sorted(side)} from the rest"
        elif action < 0.8:
            if clock_pauses and rng.random() < 1 / 3:
                seconds = rng.uniform(0.1, 1.0)
                background.append(asyncio.create_task(node.pause_clock(seconds)))
                return f"pause the clock of {node.node_id} for {seconds:.2f}s"
            self.network.heal()
            return "heal"
        elif action < 0.9:
            leader = self.leader()
            if leader is not None:
                target = rng.choice([i for i in ids if i != leader.node_id])
                background.append(
                    asyncio.create_task(quietly(leader.consensus.transfer_leadership(target)))
                )
                return f"transfer {leader.node_id}->{target}"
        elif reconfigure is None or action < 0.95:
            leader = self.leader()
            if leader is not None:
                leader.consensus.step_down()
                return f"step down {leader.node_id}"
        else:
            reconfigure(rng)
            return "reconfigure"
        return "nothing"


async def quietly(coro: Awaitable[None]) -> None:
    """Await ``coro``, ignoring the Raft errors and timeouts a fault may cause."""
    with contextlib.suppress(RaftError, TimeoutError):
        await coro
