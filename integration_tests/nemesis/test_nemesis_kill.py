"""kill -9 of a partition's leader, chased five times in a row, under idempotent producers."""

from __future__ import annotations

import asyncio
import signal

from workload import Workload, assert_clean


async def test_nemesis_kill_leader_chased_five_times(fresh_cluster, tmp_path) -> None:
    async with Workload(
        fresh_cluster.servers,
        tmp_path / "history.jsonl",
        topic="chase",
        partitions=2,
        producers_per_partition=2,
        batches=100,
        pace_s=0.0,
    ) as w:
        await w.setup()
        w.start()
        w.release(10)
        await w.wait_acked(40)
        victims = []
        for i in range(5):
            leader = await w.leader(0, alive=fresh_cluster.alive)
            await asyncio.to_thread(fresh_cluster.kill, leader, signal.SIGKILL)
            victims.append(leader)
            w.release(10 + 15 * (i + 1))  # written while the leader is dead and after
            await w.leader(0, exclude=leader, alive=fresh_cluster.alive)
            await asyncio.to_thread(fresh_cluster.restart, leader)
            await w.wait_acked(4 * (10 + 15 * (i + 1)))
        assert all(fresh_cluster.alive(n) for n in (1, 2, 3))
        await w.finish()
        await w.final_read()
        report = w.check()
    print(f"killed leaders of partition 0, in order: {victims}")
    assert_clean(report, "kill -9 leader x5", w.total_batches)
