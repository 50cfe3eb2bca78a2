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

import pytest

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


class HeaderRecorder(Recorder):
    """A state machine that promises never to read a DATA batch's payload (as rm_stm):
    it records the payload it is given, which may then be empty."""

    reads_data_payloads = False


class RecordingNode(SimNode):
    recorder_class: type[Recorder] = Recorder

    def _build(self) -> None:
        super()._build()
        self.recorder = self.recorder_class()
        self.consensus.add_state_machine(self.recorder)


class HeaderRecordingNode(RecordingNode):
    recorder_class = HeaderRecorder


def committed(node: SimNode) -> list[tuple[int, int, bytes]]:
    c = node.consensus
    return [(b.base_offset, b.term, b.payload) for b in c.read(0, 1 << 30)]


def headers(applied: list[tuple[int, int, bytes]]) -> list[tuple[int, int]]:
    return [(offset, term) for offset, term, _ in applied]


async def one_seed(seed: int, node_class: type[RecordingNode]) -> None:
    rng = random.Random(seed)
    cluster = SimCluster(3, seed=seed)
    cluster.rebuild_nodes(node_class)
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
        if node_class is HeaderRecordingNode:  # the payloads may be left out: compare the rest
            log, applied = headers(log), headers(applied)
        assert applied == log[: len(applied)], f"seed {seed} node {node.node_id}"
        assert len(applied) == len(log), f"seed {seed} node {node.node_id}: applier behind"
    for task in background:
        task.cancel()
    await asyncio.gather(*background, return_exceptions=True)
    await cluster.stop()


@pytest.mark.parametrize("node_class", [RecordingNode, HeaderRecordingNode])
def test_every_node_applies_exactly_its_committed_log_under_faults(node_class) -> None:
    for seed in SEEDS:
        run_virtual(one_seed(seed, node_class))


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


def test_large_data_batches_wait_as_headers_when_no_state_machine_reads_them(monkeypatch) -> None:
    """With 1 MiB appends, 20 of them sent at once, a budget of 1.5 MiB and state
    machines that never read a DATA payload, no applier goes back to its log: the
    batches wait as headers, every one is applied once, in order, at its offset.
    State machines that read payloads get them, and the budget then sends their
    appliers back to the log."""
    misses: list[int] = []  # offsets an applier did not find in memory
    take_pending = state_machines.Applier._take_pending

    def counting(self, start, last):
        found = take_pending(self, start, last)
        if found is None:
            misses.append(start)
        return found

    monkeypatch.setattr(state_machines.Applier, "_take_pending", counting)
    monkeypatch.setattr(state_machines, "PENDING_MAX_BYTES", 3 << 19)

    async def scenario(node_class: type[RecordingNode]) -> list[int]:
        cluster = SimCluster(3, seed=11)
        cluster.rebuild_nodes(node_class)
        await cluster.start()
        leader = await cluster.wait_for_leader()
        await asyncio.sleep(0.5)
        misses.clear()
        payloads = [bytes([i]) * (1 << 20) for i in range(20)]
        stages = [leader.consensus.replicate([RecordBatch.create(p, 3)]) for p in payloads]
        await asyncio.gather(*(s.finished for s in stages))
        await asyncio.sleep(1.0)
        for node in cluster.nodes.values():
            applied = node.recorder.applied[-20:]
            log = committed(node)[-20:]
            assert headers(applied) == headers(log), f"node {node.node_id}"
            assert [offset for offset, _, _ in applied] == [log[0][0] + 3 * i for i in range(20)]
            if node_class is HeaderRecordingNode:
                assert [p for _, _, p in applied] == [b""] * 20
            else:
                assert [p for _, _, p in applied] == payloads
        await cluster.stop()
        return list(misses)

    assert run_virtual(scenario(HeaderRecordingNode)) == []
    assert run_virtual(scenario(RecordingNode)), (
        "20 MiB past a 1.5 MiB budget: payload readers must read the log back"
    )
