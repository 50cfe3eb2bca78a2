"""The applier takes appended batches from memory, never a batch the log no longer holds.

Every node of a simulated 3-node group runs a state machine that records each batch
it applies. Whatever the faults (crashes that tear unflushed tails, partitions,
leadership changes: followers truncate and replace uncommitted suffixes), each
node must have applied exactly its committed log, in order, each batch once. Run
over many seeds: a suffix replaced after it was queued in memory is what a stale
cache would apply.
"""

from __future__ import annotations

import ast
import asyncio
import random

from raftlog.raft import state_machines
from raftlog.raft.errors import RaftError
from raftlog.sim.cluster import SimCluster, quietly
from raftlog.sim.loop import run_virtual
from raftlog.sim.node import SimNode
from raftlog.storage.batch import RecordBatch

SEEDS = range(40)
FAULT_STEPS = 25


class Recorder:
    """Records (base offset, term, payload) of every applied batch; its snapshot is
    the record, so a restarted node restores it and goes on from there."""

    def __init__(self) -> None:
        self.applied: list[tuple[int, int, bytes]] = []

    def apply(self, batch: RecordBatch) -> None:
        self.applied.append((batch.base_offset, batch.term, batch.payload))

    def snapshot(self) -> bytes:
        return repr(self.applied).encode()

    def restore(self, data: bytes) -> None:
        self.applied = ast.literal_eval(data.decode())


class RecordingNode(SimNode):
    def _build(self) -> None:
        super()._build()
        self.recorder = Recorder()
        self.consensus.add_state_machine(self.recorder)


def committed(node: SimNode) -> list[tuple[int, int, bytes]]:
    c = node.consensus
    return [(b.base_offset, b.term, b.payload) for b in c.read(0, 1 << 30)]


async def one_seed(seed: int) -> None:
    rng = random.Random(seed)
    cluster = SimCluster(3, seed=seed)
    cluster.rebuild_nodes(RecordingNode)
    await cluster.start()
    background: list[asyncio.Task[None]] = []
    written = 0
    for step in range(FAULT_STEPS):
        await cluster.random_fault(rng, background, keep_majority=True)
        leader = cluster.leader()
        if leader is not None:
            for _ in range(rng.randint(1, 4)):
                written += 1
                payload = f"{seed}:{step}:{written}".encode() * rng.randint(1, 50)
                stages = leader.consensus.replicate([RecordBatch.create(payload, 2)])
                background.append(asyncio.ensure_future(quietly(stages.finished)))
        await asyncio.sleep(rng.uniform(0.05, 0.4))
    cluster.network.heal()
    for node in cluster.nodes.values():
        await node.restart()
    for _ in range(50):  # bounded: a final write commits once the group is whole again
        leader = await cluster.wait_for_leader()
        try:
            await asyncio.wait_for(
                leader.consensus.replicate([RecordBatch.create(b"final", 1)]).finished, 2.0
            )
            break
        except (RaftError, TimeoutError):  # a leader change under the write: try again
            await asyncio.sleep(0.2)
    else:
        raise AssertionError(f"seed {seed}: the final write never committed")
    await asyncio.sleep(2.0)  # heartbeats carry the commit index, appliers catch up
    for node in cluster.nodes.values():
        log = committed(node)
        applied = node.recorder.applied
        assert applied == log[: len(applied)], f"seed {seed} node {node.node_id}"
        assert len(applied) == len(log), f"seed {seed} node {node.node_id}: applier behind"
    for task in background:
        task.cancel()
    await asyncio.gather(*background, return_exceptions=True)
    await cluster.stop()


def test_every_node_applies_exactly_its_committed_log_under_faults() -> None:
    for seed in SEEDS:
        run_virtual(one_seed(seed))


def test_the_applier_is_fed_from_memory(monkeypatch) -> None:
    """The batches applied come from the appended ones, not from reading the log back
    (a tight budget sends a lagging applier back to the log, and it still applies all)."""
    reads: list[int] = []

    async def scenario() -> None:
        cluster = SimCluster(3, seed=5)
        cluster.rebuild_nodes(RecordingNode)
        await cluster.start()
        leader = await cluster.wait_for_leader()
        for node in cluster.nodes.values():
            original = node.consensus.read

            def counting(start, max_bytes, end=None, _original=original):
                reads.append(start)
                return _original(start, max_bytes, end)

            node.consensus.read = counting  # type: ignore[method-assign]
        for _ in range(20):
            await leader.consensus.replicate([RecordBatch.create(b"x" * 100, 1)]).finished
        await asyncio.sleep(1.0)
        for node in cluster.nodes.values():
            assert [a[2] for a in node.recorder.applied][-20:] == [b"x" * 100] * 20
        await cluster.stop()

    run_virtual(scenario())
    assert reads == []
    monkeypatch.setattr(state_machines, "PENDING_MAX_BYTES", 150)
    run_virtual(scenario())
    assert reads, "with a budget of one batch the applier must read the log"
