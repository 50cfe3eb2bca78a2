"""kill -9 of every node of a real cluster at once, twice, in the middle of acknowledged
writes: after the restart every acknowledged record is there (checker: nothing lost,
nothing duplicated, the final reads hold every value written).

Each round releases more writes, waits until some of them are acknowledged (so writes
are in flight when the power goes), then SIGKILLs the three node PIDs back to back,
waits for each to exit, and restarts them all. Nodes are stopped by PID in the
fixture finalizer whatever happens.
"""

from __future__ import annotations

import asyncio
import os
import signal

from workload import Workload, assert_clean

from raftlog.storage import identity

ROUNDS = 2


async def test_nemesis_kill_every_node_mid_write_and_restart(fresh_cluster, tmp_path) -> None:
    nodes = (1, 2, 3)
    async with Workload(
        fresh_cluster.servers,
        tmp_path / "history.jsonl",
        topic="killall",
        partitions=2,
        producers_per_partition=2,
        batches=90,
        pace_s=0.0,
    ) as w:
        await w.setup()
        w.start()
        acked_before_kills = []
        for r in range(ROUNDS):
            w.release(30 * (r + 1))
            await w.wait_acked(4 * (30 * r + 10))  # in the middle of this round's writes
            acked_before_kills.append(w.acked)
            pids = [fresh_cluster.pid(n) for n in nodes]
            for pid in pids:  # back to back: no node sees another one go first
                os.kill(pid, signal.SIGKILL)
            for n in nodes:  # bounded wait for each exit (SIGKILL again is harmless)
                await asyncio.to_thread(fresh_cluster.kill, n, signal.SIGKILL)
            assert not any(fresh_cluster.alive(n) for n in nodes)
            for n in nodes:
                await asyncio.to_thread(fresh_cluster.restart, n)
            for p in range(w.partitions):
                await w.leader(p, alive=fresh_cluster.alive, timeout_s=60.0)
        w.release()
        await w.finish()
        await w.final_read()
        report = w.check()
    print(f"acknowledged before each kill-all: {acked_before_kills}")
    assert all(fresh_cluster.alive(n) for n in nodes)
    for n in nodes:  # every restart found its own, durably marked data: nothing set aside
        node_dir = fresh_cluster.data_dir / f"node-{n}"
        assert identity.read_marker(node_dir, identity.NODE_MARKER) == str(n)
        assert identity.moved_aside(node_dir) == []
        for p in range(2):
            marked = identity.partition_dir(node_dir, "killall", p)
            assert identity.read_marker(marked, identity.GROUP_MARKER)
    assert_clean(report, f"kill -9 all nodes x{ROUNDS}", w.total_batches)
