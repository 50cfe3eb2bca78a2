"""SIGSTOP of a partition leader past the election timeout, then SIGCONT.

A new leader is elected in a higher term while the old one is frozen; once
resumed, the old leader's appends carry a stale term and are rejected, so it
steps down (its term moves past the one it was frozen in). Producers whose
requests were stuck on it retry through the sequencer: nothing lost or doubled.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time

from workload import Workload, assert_clean, metric

ELECTION_TIMEOUT_S = 0.5  # ConsensusOptions: 10 ticks of 50 ms


async def test_nemesis_sigstop_leader_then_sigcont(fresh_cluster, tmp_path) -> None:
    async with Workload(
        fresh_cluster.servers,
        tmp_path / "history.jsonl",
        topic="frozen",
        partitions=2,
        producers_per_partition=2,
        batches=80,
        pace_s=0.0,
    ) as w:
        await w.setup()
        gid = await w.group_id(0)
        w.start()
        w.release(10)
        await w.wait_acked(40)
        old = await w.leader(0)
        address = fresh_cluster.address(old)
        old_term = metric(address, "raftlog_group_term", gid)
        assert old_term is not None and metric(address, "raftlog_group_is_leader", gid) == 1.0
        pid = fresh_cluster.cluster.node(old).pid
        os.kill(pid, signal.SIGSTOP)
        print(f"SIGSTOP node {old} with {[(s.name, s.acked) for s in w.stats]} acknowledged")
        try:
            w.release(40)  # written while the leader is frozen
            new = await w.leader(0, exclude=old)
            await w.wait_acked(4 * 40)  # the majority makes progress without it
            await asyncio.sleep(4 * ELECTION_TIMEOUT_S)
        finally:
            os.kill(pid, signal.SIGCONT)
        # The resumed node learns the new term: its stale leadership is gone.
        term = old_term
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            term = metric(address, "raftlog_group_term", gid) or old_term
            if term > old_term:
                break
            await asyncio.sleep(0.1)
        assert term > old_term, f"node {old} still in term {old_term} after SIGCONT"
        await w.finish()
        await w.final_read()
        report = w.check()
    print(f"froze leader {old} (term {old_term:.0f}); node {new} took over; now term {term:.0f}")
    assert_clean(report, "SIGSTOP leader", w.total_batches)
