"""kill -9 a partition leader while producing with acks=all; restart it and it catches up."""

from __future__ import annotations

import asyncio
import signal
import time

from benchmarks.workloads.nemesis_workload import metric
from raftlog.client import RaftlogClient, RaftlogError
from raftlog.storage.batch import BatchKind
from raftlog.storage.log import SegmentedLog


async def test_kill_leader_while_producing_then_restart_catches_up(fresh_cluster) -> None:
    async with RaftlogClient(fresh_cluster.servers, request_timeout_s=30.0) as client:
        await client.create_topic("failover", partitions=1, replication_factor=3)
        meta = await client.describe_topic("failover")
        for _ in range(50):
            meta = await client.describe_topic("failover")
            if meta.partitions[0].leader > 0:
                break
            await asyncio.sleep(0.1)
        victim = meta.partitions[0].leader
        assert victim in (1, 2, 3)

        acked: list[tuple[int, bytes]] = []
        killed_at = 0.0
        first_ack_after_kill = None
        for i in range(200):
            if i == 30:
                fresh_cluster.kill(victim, signal.SIGKILL)
                killed_at = time.monotonic()
            payload = f"record-{i}".encode()
            try:
                r = await client.produce("failover", 0, [(payload, 1)], acks="all")
            except RaftlogError:
                continue  # not acknowledged: may or may not be in the log
            acked.append((r.base_offset, payload))
            if killed_at and first_ack_after_kill is None:
                first_ack_after_kill = time.monotonic() - killed_at
            if i >= 60 and first_ack_after_kill is not None:
                break
        assert first_ack_after_kill is not None, "producing never resumed after the kill"
        print(f"kill -9 to first acknowledged write: {first_ack_after_kill * 1000:.0f} ms")

        meta = await client.describe_topic("failover")
        assert meta.partitions[0].leader not in (victim, -1)
        got: dict[int, bytes] = {}
        offset = 0
        for _ in range(500):
            f = await client.fetch("failover", 0, offset)
            for b in f.batches:
                got[b.base_offset] = b.payload
            offset = f.next_offset
            if offset >= f.high_watermark:
                break
        for off, payload in acked:
            assert got.get(off) == payload, f"acknowledged record at {off} lost"
        hwm = f.high_watermark

        # restart: the node catches up through recovery, and its log matches
        fresh_cluster.restart(victim)
        topics = (await client.metadata()).topics
        gid = next(t for t in topics if t.name == "failover").partitions[0].group_id
        addr = fresh_cluster.address(victim)
        caught_up = False
        for _ in range(300):
            try:
                ci = metric(addr, "raftlog_group_commit_index", gid)
            except OSError:
                ci = None
            if ci is not None and ci >= hwm - 1:
                caught_up = True
                break
            await asyncio.sleep(0.1)
        assert caught_up, "the restarted node did not catch up"
        fresh_cluster.kill(victim, signal.SIGTERM)

    node_log = SegmentedLog.open(
        fresh_cluster.data_dir / f"node-{victim}" / "partitions" / "failover" / "0"
    )
    try:
        batches = node_log.read(0, 64 * 1024 * 1024, hwm - 1)
    finally:
        node_log.close()
    on_disk = {b.base_offset: b.payload for b in batches if b.kind is BatchKind.DATA}
    leader_view = {o: p for o, p in got.items() if o < hwm}
    assert leader_view == {o: p for o, p in on_disk.items() if o < hwm}
