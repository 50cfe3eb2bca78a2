"""Network partitions through a proxy per link (see ``proxied_cluster``).

- the leader of partition 0 isolated in a minority of one: the majority elects
  a new leader and keeps writing; after healing, the old leader rejoins in a
  higher term;
- a majority/minority split where the minority is a follower of partition 0
  (blackholed: its peers see timeouts, not refusals);
- responses dropped on the client link to the leader: writes land but the
  client never hears back, times out and retries; rm_stm returns the
  original offsets, so nothing is written twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

from workload import Workload, assert_clean, metric


def _workload(cluster, tmp_path, topic: str) -> Workload:
    return Workload(
        cluster.servers,
        tmp_path / "history.jsonl",
        topic=topic,
        partitions=2,
        producers_per_partition=2,
        batches=60,
        address_map=cluster.client_map,
    )


async def _term_above(address: str, gid: int, term: float, timeout_s: float = 30.0) -> float:
    deadline = time.monotonic() + timeout_s
    now = term
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            now = metric(address, "raftlog_group_term", gid) or term
        if now > term:
            return now
        await asyncio.sleep(0.1)
    raise AssertionError(f"{address} group {gid} still in term {term} after {timeout_s}s")


async def test_nemesis_isolate_leader_in_minority(proxied_cluster, tmp_path) -> None:
    c = proxied_cluster
    async with _workload(c, tmp_path, "isolated") as w:
        await w.setup()
        gid = await w.group_id(0)
        w.start()
        w.release(10)
        await w.wait_acked(40)
        old = await w.leader(0)
        old_term = metric(c.peers[old], "raftlog_group_term", gid)
        others = {1, 2, 3} - {old}
        for link in c.links_between({old}, others):
            await asyncio.to_thread(c.proxy.cut, link)
        try:
            w.release(35)  # written while the old leader is cut off
            new = await w.leader(0, exclude=old)
            await w.wait_acked(4 * 35)
        finally:
            await asyncio.to_thread(c.proxy.heal)
        term = await _term_above(c.peers[old], gid, old_term)
        await w.finish()
        await w.final_read()
        report = w.check()
    print(f"isolated leader {old} (term {old_term:.0f}); {new} led the majority; term now {term}")
    assert_clean(report, "isolate leader", w.total_batches)


async def test_nemesis_split_majority_minority(proxied_cluster, tmp_path) -> None:
    c = proxied_cluster
    async with _workload(c, tmp_path, "split") as w:
        await w.setup()
        w.start()
        w.release(10)
        await w.wait_acked(40)
        leader = await w.leader(0)
        minority = next(n for n in (1, 2, 3) if n != leader)
        majority = {1, 2, 3} - {minority}
        for link in c.links_between({minority}, majority):
            await asyncio.to_thread(c.proxy.cut, link, blackhole=True)
        try:
            w.release(35)
            # partition 1 may have been led by the minority node: both must progress
            for p in range(2):
                await w.leader(p, exclude=minority)
            await w.wait_acked(4 * 35)
        finally:
            await asyncio.to_thread(c.proxy.heal)
        await w.finish()
        await w.final_read()
        report = w.check()
    print(f"split {{{minority}}} from {sorted(majority)} (leader of partition 0: {leader})")
    assert_clean(report, "split majority/minority", w.total_batches)


async def test_nemesis_drop_responses_clients_retry_landed_writes(
    proxied_cluster, tmp_path
) -> None:
    c = proxied_cluster
    async with _workload(c, tmp_path, "dropped") as w:
        await w.setup()
        w.start()
        w.release(10)
        await w.wait_acked(40)
        leader = await w.leader(0)
        await asyncio.to_thread(c.proxy.drop_responses, f"c-{leader}")
        try:
            w.release(14)  # these land, but their answers are dropped
            deadline = time.monotonic() + 30.0
            while time.monotonic() < deadline:
                unknown = [
                    op
                    for op in w.history.operations
                    if op.partition == 0 and op.outcome.value == "unknown"
                ]
                if len(unknown) >= 2:
                    break
                await asyncio.sleep(0.1)
        finally:
            await asyncio.to_thread(c.proxy.heal)
        await w.finish()
        await w.final_read()
        report = w.check()
    assert len(unknown) >= 2, "no write to the leader timed out while its responses were dropped"
    print(f"dropped responses from leader {leader}: {len(unknown)} writes timed out")
    assert_clean(report, "drop responses", w.total_batches)
    assert report.unknown_landed >= 1, report.render()
