"""A state machine whose apply() raises on a committed batch does not stop its group.

Every node of a simulated 3-node group runs a state machine that raises on one
value. Each replica skips that batch, counts it, and keeps applying: the group
keeps a leader, later writes commit and are applied, and the read barrier
(``last_applied``) reaches the commit index. Before the applier caught the
error, it died on the batch, stepped the replica down, restarted a tick later
and died on the same batch again, for good: the group had no leader.
"""

from __future__ import annotations

import asyncio

import pytest

from raftlog.metrics import NodeMetrics
from raftlog.sim.cluster import SimCluster
from raftlog.sim.loop import run_virtual
from raftlog.sim.node import SimNode
from raftlog.storage.batch import RecordBatch

POISON = b"poison"


class Picky:
    """Records each payload it applies and raises on POISON (plain or awaited)."""

    def __init__(self, awaited: bool) -> None:
        self.awaited = awaited
        self.applied: list[bytes] = []

    def apply(self, batch: RecordBatch) -> object:
        if not self.awaited:
            return self._apply(batch)

        async def later() -> None:
            await asyncio.sleep(0)
            self._apply(batch)

        return later()

    def _apply(self, batch: RecordBatch) -> None:
        if bytes(batch.payload) == POISON:
            raise ValueError("cannot apply this value")
        self.applied.append(bytes(batch.payload))

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


class Other:
    """A second state machine of the group: it applies every batch, the poison too."""

    def __init__(self) -> None:
        self.applied: list[bytes] = []

    def apply(self, batch: RecordBatch) -> None:
        self.applied.append(bytes(batch.payload))

    def snapshot(self) -> bytes:
        return b""

    def restore(self, data: bytes) -> None:
        pass


def _node_class(awaited: bool) -> type[SimNode]:
    class PickyNode(SimNode):
        def _build(self) -> None:
            super()._build()
            self.picky = Picky(awaited)
            self.other = Other()
            self.consensus.add_state_machine(self.picky)
            self.consensus.add_state_machine(self.other)

    return PickyNode


@pytest.mark.parametrize("awaited", [False, True], ids=["plain", "awaitable"])
def test_a_state_machine_raising_on_one_batch_skips_it_and_the_group_serves_on(
    awaited: bool,
) -> None:
    async def scenario() -> None:
        cluster = SimCluster(3, seed=7)
        cluster.rebuild_nodes(_node_class(awaited))
        await cluster.start()
        leader = await cluster.wait_for_leader()
        await cluster.write(b"before")
        await cluster.write(POISON)
        await asyncio.sleep(2.0)  # several ticks: a dying applier would have stepped down
        assert cluster.leader() is leader, "the leader stepped down over the bad batch"
        later = [f"after-{i}".encode() for i in range(10)]
        for payload in later:
            await cluster.write(payload)
        await asyncio.sleep(1.0)  # heartbeats carry the commit index to the followers
        for node in cluster.nodes.values():
            c = node.consensus
            tag = f"node {node.node_id}"
            assert node.picky.applied[-11:] == [b"before", *later], tag
            assert node.other.applied[-12:] == [b"before", POISON, *later], tag
            assert c.stm_apply_errors == 1, tag
            assert c.last_applied == c.commit_index, tag
            assert c.task_failures == 0, tag
        text = NodeMetrics(leader.node_id, lambda: [_View(leader)]).render().decode()
        labels = f'group="0",node="{leader.node_id}",partition="0",topic="t"'
        assert f"raftlog_stm_apply_errors_total{{{labels}}} 1.0" in text
        await cluster.stop()

    run_virtual(scenario())


class _View:
    """What the metrics collector reads of a simulated node's group."""

    def __init__(self, node: SimNode) -> None:
        self.group_id, self.topic, self.partition = 0, "t", 0
        self._c = node.consensus

    def gauges(self) -> dict[str, float]:
        return {"stm_apply_errors": self._c.stm_apply_errors}
