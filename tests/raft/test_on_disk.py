"""Consensus over the on-disk SegmentedLog on a real event loop (fsync in a thread)."""

from __future__ import annotations

import asyncio
import pathlib

from raftlog.raft.configuration import Configuration
from raftlog.raft.consensus import Consensus, ConsensusOptions
from raftlog.raft.dispatch import PeerDispatcher
from raftlog.raft.heartbeat_manager import HeartbeatManager
from raftlog.sim.local_network import LocalNetwork
from raftlog.storage.batch import RecordBatch
from raftlog.storage.log import SegmentedLog


async def _wait_for(predicate, what: str, limit: int = 500) -> None:
    for _ in range(limit):
        if predicate():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"gave up waiting for {what}")


async def test_three_nodes_on_disk_replicate_and_survive_a_restart(tmp_path: pathlib.Path) -> None:
    options = ConsensusOptions(tick_interval_s=0.01, flush_in_executor=True)
    network = LocalNetwork()
    config = Configuration.of([1, 2, 3])

    async def boot(node: int) -> tuple[Consensus, HeartbeatManager]:
        log = SegmentedLog.open(tmp_path / f"n{node}")
        hb = HeartbeatManager(node, network.transport(node), interval_s=0.02)
        c = Consensus(7, node, config, log, network.transport(node), options, node, hb)
        network.register(node, PeerDispatcher(node, hb).handle)
        await c.start()
        await hb.start()
        return c, hb

    nodes = {n: await boot(n) for n in (1, 2, 3)}
    await _wait_for(lambda: any(c.is_leader for c, _ in nodes.values()), "a leader")
    leader = next(c for c, _ in nodes.values() if c.is_leader)
    results = []
    for i in range(20):
        stages = leader.replicate([RecordBatch.create(f"v{i}".encode(), 2)])
        results.append(stages)
    done = [await s.finished for s in results]
    assert [r.last_offset - r.base_offset for r in done] == [1] * 20
    assert done[-1].last_offset == leader.commit_index
    for c, hb in nodes.values():
        await hb.stop()
        await c.stop()
        c.log.close()
    # Reopen from disk: every committed record is there, the vote and term survive.
    reopened = {n: await boot(n) for n in (1, 2, 3)}
    await _wait_for(lambda: any(c.is_leader for c, _ in reopened.values()), "a new leader")
    new_leader = next(c for c, _ in reopened.values() if c.is_leader)
    assert new_leader.term > leader.term
    await new_leader.replicate([RecordBatch.create(b"after")]).finished
    payloads = [b.payload for b in new_leader.read(0, 1 << 20) if not b.is_control]
    assert payloads == [f"v{i}".encode() for i in range(20)] + [b"after"]
    for c, hb in reopened.values():
        await hb.stop()
        await c.stop()
        c.log.close()
