"""Disk faults: a power cut that drops everything after the last fsync, and a torn tail.

- ``log.before_flush=crash@N`` on one node: at its N-th flush (with ``--flush-scope
  node``, its N-th syncfs; as a follower it is asked to flush at once only when
  it is the quicker one, else every ``flush_delay_s``) the node cuts each
  of its logs to its flushed offset (the crash hook every group registers when
  failpoints are enabled) and SIGKILLs itself. Restarted without the failpoint,
  it recovers, and the majority's committed data wins.
- A stopped follower's partition log loses the last bytes of its last segment
  (half a batch). Restarted, it truncates the torn batch by CRC and catches up
  from the leader.
"""

from __future__ import annotations

import asyncio
import signal
import time

from workload import Workload, assert_clean, metric

from raftlog.faults.crash import tear_tail
from raftlog.faults.failpoints import ENV_VAR


async def _wait_dead(cluster, node_id: int, w: Workload, timeout_s: float = 60.0) -> None:
    """Release the workload's writes while ``node_id`` runs, until it has crashed.

    Writes are held until the restarted node serves: released while it still
    starts (seconds on a loaded machine), they were all acknowledged before it
    took part, and it never reached its 10th flush (CI on a slower machine).
    """
    deadline = time.monotonic() + timeout_s
    node = cluster.cluster.node(node_id)
    while cluster.alive(node_id) and await asyncio.to_thread(cluster.cluster.health, node) is None:
        assert time.monotonic() < deadline, f"node {node_id} did not serve after its restart"
        await asyncio.sleep(0.1)
    step = 20
    while cluster.alive(node_id):
        assert time.monotonic() < deadline, f"the crash failpoint of node {node_id} never fired"
        step = min(step + 2, w.batches)
        w.release(step)  # keep writes (and so flushes) coming
        await asyncio.sleep(0.1)


async def test_nemesis_crash_drops_unflushed_tail(fresh_cluster, tmp_path, monkeypatch) -> None:
    async with Workload(
        fresh_cluster.servers,
        tmp_path / "history.jsonl",
        topic="powercut",
        partitions=2,
        producers_per_partition=2,
        batches=80,
    ) as w:
        await w.setup()
        w.start()
        w.release(10)
        await w.wait_acked(40)
        victim = await w.leader(0)
        await asyncio.to_thread(fresh_cluster.kill, victim, signal.SIGKILL)
        # Restart it with the failpoint armed: it crashes at its 10th flush (one syncfs
        # serves both partitions, so that comes well before the workload ends).
        monkeypatch.setenv(ENV_VAR, "log.before_flush=crash@10")
        fresh_cluster.restart(victim)
        monkeypatch.delenv(ENV_VAR)
        await _wait_dead(fresh_cluster, victim, w)
        acked_at_crash = w.acked
        fresh_cluster.restart(victim)
        w.release(None)
        await w.wait_acked(acked_at_crash + 8)
        await w.finish()
        await w.final_read()
        report = w.check()
    print(f"node {victim} crashed at its 10th flush with {acked_at_crash} batches acknowledged")
    assert_clean(report, "crash after last fsync", w.total_batches)


async def test_nemesis_torn_tail_follower_repairs(fresh_cluster, tmp_path) -> None:
    async with Workload(
        fresh_cluster.servers,
        tmp_path / "history.jsonl",
        topic="torn",
        partitions=2,
        producers_per_partition=2,
        batches=60,
    ) as w:
        await w.setup()
        gid = await w.group_id(0)
        w.start()
        w.release(20)
        await w.wait_acked(80)
        leader = await w.leader(0)
        follower = next(n for n in (1, 2, 3) if n != leader)
        address = fresh_cluster.address(follower)
        dirty = metric(address, "raftlog_group_dirty_offset", gid)
        await asyncio.to_thread(fresh_cluster.kill, follower, signal.SIGKILL)
        log_dir = fresh_cluster.data_dir / f"node-{follower}" / "partitions" / "torn" / "0"
        cut = tear_tail(log_dir, 7)  # half of the last batch
        assert dirty is not None and cut.last_offset < dirty, (cut, dirty)
        w.release(40)  # written while the follower is down
        await w.wait_acked(160)
        fresh_cluster.restart(follower)
        await w.finish()
        # the repaired follower catches up to the leader's log
        leader_addr = fresh_cluster.address(await w.leader(0))
        caught_up = False
        deadline = time.monotonic() + 30.0
        while time.monotonic() < deadline and not caught_up:
            try:
                target = metric(leader_addr, "raftlog_group_dirty_offset", gid)
                got = metric(address, "raftlog_group_dirty_offset", gid)
                caught_up = got is not None and got == target
            except OSError:
                pass
            await asyncio.sleep(0.1)
        assert caught_up, f"node {follower} did not catch up after its torn tail"
        await w.final_read()
        report = w.check()
    print(f"tore 7 bytes off node {follower}'s log (last whole batch {cut.last_offset})")
    assert_clean(report, "torn tail", w.total_batches)
