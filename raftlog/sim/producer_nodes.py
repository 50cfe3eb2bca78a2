"""The simulated nodes of the producer simulations: rm_stm on every replica.

:class:`ProducerSimNode` is a :class:`~raftlog.sim.node.SimNode` whose group runs
the real :class:`~raftlog.producers.rm_stm.RmStm` as its state machine
(snapshotted with the commit context, restored on restart) and, while it
leads, a task that aborts expired transactions (``RmStm.abort_expired``) as a
node would. The producer and coordinator simulations build their clusters of them.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Sequence
from typing import Any, cast

from raftlog.errors import RaftlogError
from raftlog.producers.rm_stm import RmStm, RmStmConfig
from raftlog.raft.errors import RaftError
from raftlog.sim.cluster import SimCluster
from raftlog.sim.node import SimNode

EXPIRE_EVERY_S = 0.1
"""How often (virtual seconds) a leader looks for expired transactions."""


def now_ms() -> int:
    """The virtual clock in milliseconds (rm_stm's clock in the simulations)."""
    return int(asyncio.get_running_loop().time() * 1000)


class ProducerSimNode(SimNode):
    """A :class:`SimNode` whose group runs rm_stm, and a leader task expiring transactions."""

    def __init__(self, *args: Any, rm_config: RmStmConfig, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.rm_config = rm_config
        self.rm: RmStm
        self.errors: list[str] = []  # unexpected exceptions of this node's rm_stm tasks

    def _build(self) -> None:
        super()._build()
        self.rm = RmStm(self.consensus, self.rm_config, clock_ms=now_ms)

    async def start(self) -> None:
        await super().start()
        self.spawn(self._expirer(self.rm))

    async def _expirer(self, rm: RmStm) -> None:
        for _ in range(10_000_000):
            await asyncio.sleep(EXPIRE_EVERY_S)
            if not (self.consensus.running and self.consensus.is_leader):
                continue
            try:
                await rm.abort_expired(now_ms())
            except (RaftlogError, RaftError, TimeoutError):
                continue
            except Exception:
                self.errors.append("abort_expired failed:\n" + traceback.format_exc())


class ProducerSimCluster(SimCluster):
    def __init__(self, n: int, seed: int, rm_config: RmStmConfig, **kw: Any) -> None:
        super().__init__(n, seed, **kw)
        self.rebuild_nodes(ProducerSimNode, rm_config=rm_config)

    # Its nodes are ProducerSimNodes (rebuild_nodes made them): the casts say so.
    def live(self) -> Sequence[ProducerSimNode]:
        return cast("Sequence[ProducerSimNode]", super().live())

    def leader(self) -> ProducerSimNode | None:
        return cast("ProducerSimNode | None", super().leader())
