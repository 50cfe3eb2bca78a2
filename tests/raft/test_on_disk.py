"""Consensus over the on-disk SegmentedLog on a real event loop (fsync in a thread)."""

from __future__ import annotations

import asyncio
import pathlib

from raftlog.raft.configuration import Configuration
from raftlog.raft.consensus import Consensus, ConsensusOptions
from raftlog.raft.dispatch import PeerDispatcher
from raftlog.raft.heartbeat_manager import HeartbeatManager
from raftlog.sim.local_network import LocalNetwork
from raftlog.storage.api import CommitContext
from raftlog.storage.batch import RecordBatch
from raftlog.storage.log import SegmentedLog
from raftlog.storage.record_writer import RecordWriter


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


async def test_commit_contexts_are_saved_off_the_loop_through_the_nodes_writer(
    tmp_path: pathlib.Path,
) -> None:
    """With a ``commit_context_saver`` (the node's RecordWriter, as raftlog.node.group_host
    wires it) a running group never saves its commit context on the event loop: the
    contexts reach the disk through the writer (the log's commit_context_offset, which
    bounds retention, moves only once one is durable), and only the last one, at stop,
    is saved at once. Thousands of groups quiescing together used to make three fsyncs
    each on the loop, stalling it for seconds."""
    options = ConsensusOptions(tick_interval_s=0.01, flush_in_executor=True)
    network = LocalNetwork()
    config = Configuration.of([1, 2, 3])
    writer = RecordWriter()
    on_loop: list[int] = []
    through_writer: list[int] = []

    async def boot(node: int) -> tuple[Consensus, HeartbeatManager]:
        log = SegmentedLog.open(tmp_path / f"n{node}")
        sync_save = log.save_commit_context

        def counted_sync_save(ctx: CommitContext) -> None:
            on_loop.append(ctx.committed_offset)
            sync_save(ctx)

        log.save_commit_context = counted_sync_save  # type: ignore[method-assign]

        async def saver(ctx: CommitContext) -> None:
            await writer.save(*log.commit_context_record(ctx))
            log.commit_context_saved(ctx)
            through_writer.append(ctx.committed_offset)

        hb = HeartbeatManager(node, network.transport(node), interval_s=0.02)
        c = Consensus(
            7, node, config, log, network.transport(node), options, node, hb,
            commit_context_saver=saver,
        )  # fmt: skip
        network.register(node, PeerDispatcher(node, hb).handle)
        await c.start()
        await hb.start()
        return c, hb

    nodes = {n: await boot(n) for n in (1, 2, 3)}
    await _wait_for(lambda: any(c.is_leader for c, _ in nodes.values()), "a leader")
    leader = next(c for c, _ in nodes.values() if c.is_leader)
    for i in range(5):
        await leader.replicate([RecordBatch.create(f"v{i}".encode(), 2)]).finished
    end = leader.commit_index
    # quiescing saves each replica's context with the whole log committed
    await _wait_for(
        lambda: all(c.log.commit_context_offset == end for c, _ in nodes.values()),
        "every replica's commit context saved at the log's end",
    )
    assert on_loop == [] and end in through_writer
    for c, hb in nodes.values():
        await hb.stop()
        await c.stop()
        c.log.close()
    for n in (1, 2, 3):
        log = SegmentedLog.open(tmp_path / f"n{n}")
        ctx = log.load_commit_context()
        log.close()
        assert ctx is not None and ctx.committed_offset == end, (n, ctx)
